//! Inverse of a batch of unit-lower-triangular matrices `I + L`.
//!
//! The chunked gated delta rule needs `(I + L)^-1` for every 64-token chunk and head, where `L`
//! is the strictly lower part of `(beta k) k^T` weighted by the decay. Its entries are close to 1
//! on real inputs, so power series (Neumann) forms overflow; the block-doubling inverse below is
//! exact in the same sense as forward substitution.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

/// Inverts `I + strictly_lower(a)` for a batch of square matrices.
pub trait UnitLowerInverse: Backend {
    /// `a`: `[..., n, n]`; only its strictly lower part is read (the diagonal is taken as 1 and
    /// the upper part as 0). Returns `(I + strictly_lower(a))^-1`, unit lower triangular, with
    /// the shape of `a`.
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
        crate::generic::unit_lower_inverse(a).into_primitive().tensor()
    }
}

/// `(I + strictly_lower(a))^-1` for `a` of shape `[..., n, n]` (rank `D >= 2`).
pub fn unit_lower_inverse<B: UnitLowerInverse, const D: usize>(a: Tensor<B, D>) -> Tensor<B, D> {
    assert!(D >= 2, "unit_lower_inverse needs a tensor of rank 2 or more, got rank {D}");
    let dims = a.dims();
    let (n, m) = (dims[D - 2], dims[D - 1]);
    assert_eq!(n, m, "unit_lower_inverse needs square matrices, got {n}x{m}");
    if D == 3 {
        // The op's own shape: no reshape, which copies on some backends (ndarray).
        let x = B::unit_lower_inverse(a.into_primitive().tensor());
        return Tensor::from_primitive(TensorPrimitive::Float(x));
    }
    let batch: usize = dims[..D - 2].iter().product();
    let a = a.reshape([batch, n, n]);
    let x = B::unit_lower_inverse(a.into_primitive().tensor());
    Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(x)).reshape(dims)
}
