#![doc = include_str!("../README.md")]

mod backends;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
mod expert_count;
pub mod generic;
pub mod reference;
mod unit_lower_inverse;

pub use expert_count::{ExpertCount, expert_count};
pub use unit_lower_inverse::{UnitLowerInverse, unit_lower_inverse};
