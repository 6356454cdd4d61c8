//! Inverse of a batch of unit-lower-triangular matrices `I + L`.
//!
//! The chunked gated delta rule needs `(I + L)^-1` for every 64-token chunk and head, where `L`
//! is the strictly lower part of `(beta k) k^T` weighted by the decay. Its entries are close to 1
//! on real inputs, so power series (Neumann) forms overflow; the block-doubling inverse below is
//! exact in the same sense as forward substitution.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "autodiff")]
mod autodiff;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "wgpu")]
mod cube;
#[cfg(feature = "wgpu")]
mod fusion;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(UnitLowerInverse, kernels: ndarray, candle, cube, fusion, autodiff);

/// Inverts `I + strictly_lower(a)` for a batch of square matrices.
pub trait UnitLowerInverse: Backend {
    /// `a`: `[..., n, n]`; only its strictly lower part is read (the diagonal is taken as 1 and
    /// the upper part as 0). Returns `(I + strictly_lower(a))^-1`, unit lower triangular, with
    /// the shape of `a`.
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
        generic::unit_lower_inverse(a).into_primitive().tensor()
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

/// The generic inverse, in burn tensor ops: [`UnitLowerInverse::unit_lower_inverse`]'s default.
pub mod generic {
    use burn::tensor::{Tensor, backend::Backend};

    /// Block-doubling inverse in batched matmuls.
    ///
    /// Pads `n` to a power of two `N` (padding rows are identity), then grows the inverted diagonal
    /// blocks from size 1 to `N`: for each pair of inverted `s`-blocks `X11`, `X22` and the block
    /// `A21` below the first,
    /// `[[A11, 0], [A21, A22]]^-1 = [[X11, 0], [-X22 A21 X11, X22]]`.
    pub fn unit_lower_inverse<B: Backend>(a: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, n, _] = a.dims();
        let device = a.device();
        if batch == 0 || n == 0 {
            return Tensor::zeros([batch, n, n], &device);
        }
        let size = n.next_power_of_two();
        let a = if size == n {
            a
        } else {
            let a = Tensor::cat(vec![a, Tensor::zeros([batch, size - n, n], &device)], 1);
            Tensor::cat(vec![a, Tensor::zeros([batch, size, size - n], &device)], 2)
        };

        // Inverted diagonal blocks of size `s`: [batch, size / s, s, s]. Size-1 blocks are 1.
        let mut inverted = Tensor::<B, 4>::ones([batch, size, 1, 1], &device);
        let mut s = 1;
        while s < size {
            let pairs = size / (2 * s);
            let blocks = diagonal_blocks(a.clone(), 2 * s);
            let a21 = blocks.slice([0..batch, 0..pairs, s..2 * s, 0..s]);
            let halves = inverted.reshape([batch, pairs, 2 * s, s]);
            let x11 = halves.clone().slice([0..batch, 0..pairs, 0..s, 0..s]);
            let x22 = halves.slice([0..batch, 0..pairs, s..2 * s, 0..s]);
            let x21 = x22.clone().matmul(a21).matmul(x11.clone()).neg();
            let top = Tensor::cat(vec![x11, Tensor::zeros([batch, pairs, s, s], &device)], 3);
            let bottom = Tensor::cat(vec![x21, x22], 3);
            inverted = Tensor::cat(vec![top, bottom], 2);
            s *= 2;
        }
        inverted.reshape([batch, size, size]).slice([0..batch, 0..n, 0..n])
    }

    /// The diagonal `b x b` blocks of `[batch, size, size]` matrices, as `[batch, size / b, b, b]`.
    ///
    /// Flattened row-major, block `k` starts at `k * (b * size + b)`; appending `size` padding
    /// elements makes the blocks a regular `[size / b, b * size + b]` grid whose rows begin with the
    /// block's `b` rows of `size` elements, of which the first `b` columns are the block.
    fn diagonal_blocks<B: Backend>(a: Tensor<B, 3>, b: usize) -> Tensor<B, 4> {
        let [batch, size, _] = a.dims();
        let device = a.device();
        let count = size / b;
        let flat = Tensor::cat(vec![a.reshape([batch, size * size]), Tensor::zeros([batch, size], &device)], 1);
        flat.reshape([batch, count, b * size + b])
            .slice([0..batch, 0..count, 0..b * size])
            .reshape([batch, count, b, size])
            .slice([0..batch, 0..count, 0..b, 0..b])
    }
}
