//! Backend extensions for the two ops that made the PyTorch Qwen3.5 reference slow on some
//! devices: the tokens-per-expert count of the MoE router (`torch.histc`) and the inverse of the
//! unit-lower-triangular systems of the chunked gated delta rule (`solve_triangular`).
//!
//! Each op is a trait over burn's [`Backend`](burn::tensor::backend::Backend) whose default method
//! is a generic implementation from burn tensor ops, so every backend is correct out of the box;
//! a backend can override the method with a specialised kernel. Model code calls the
//! `Tensor`-level functions ([`expert_count`], [`unit_lower_inverse`]) and bounds its backend on
//! [`DeciderOps`].
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Int, Tensor};
//!
//! let device = Default::default();
//! let ids = Tensor::<NdArray, 1, Int>::from_ints([2, 0, 2, 7], &device);
//! // Ids at or above the expert count are dropped, like `histc(bins = 4, min = 0, max = 3)`.
//! let counts = decider_ops::expert_count(ids, 4);
//! assert_eq!(counts.into_data().to_vec::<i64>().unwrap(), vec![1, 0, 2, 0]);
//! ```

mod backends;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
mod expert_count;
pub mod generic;
pub mod reference;
mod unit_lower_inverse;

pub use expert_count::{ExpertCount, expert_count};
pub use unit_lower_inverse::{UnitLowerInverse, unit_lower_inverse};

/// Every op of this crate: the bound that model code puts on its backend.
pub trait DeciderOps: ExpertCount + UnitLowerInverse {}

impl<B: ExpertCount + UnitLowerInverse> DeciderOps for B {}
