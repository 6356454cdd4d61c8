//! The generic implementations, written with burn tensor ops: every backend's default, always
//! correct, and the yardstick the specialised kernels are tested and benchmarked against.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Tensor, TensorMetadata, TensorPrimitive, backend::Backend};

/// The generic count: each id compared with every expert index, summed over the ids, a chunk of
/// ids at a time so memory stays bounded (`CHUNK x E`). Ids outside `0..E` match no index.
///
/// The natural scatter-add form is not used: burn-wgpu 0.21's scatter-add (and `select_assign`
/// with `Add`) loses an update on 65,536 ids into 256 bins, which the kernel tests caught.
pub fn expert_count<B: Backend>(ids: Tensor<B, 1, Int>, num_experts: usize) -> Tensor<B, 1, Int> {
    const CHUNK: usize = 4096;
    let device = ids.device();
    let [n] = ids.dims();
    let mut counts = Tensor::<B, 1, Int>::zeros([num_experts], &device);
    if num_experts == 0 {
        return counts;
    }
    let experts = Tensor::<B, 1, Int>::arange(0..num_experts as i64, &device).unsqueeze::<2>(); // [1, E]
    for start in (0..n).step_by(CHUNK) {
        let len = CHUNK.min(n - start);
        let chunk = ids.clone().narrow(0, start, len).unsqueeze_dim::<2>(1).expand([len, num_experts]);
        let matches = chunk.equal(experts.clone().expand([len, num_experts])).int();
        counts = counts + matches.sum_dim(0).squeeze_dim::<1>(0);
    }
    counts
}

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
    inverted
        .reshape([batch, size, size])
        .slice([0..batch, 0..n, 0..n])
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
    let flat = Tensor::cat(
        vec![a.reshape([batch, size * size]), Tensor::zeros([batch, size], &device)],
        1,
    );
    flat.reshape([batch, count, b * size + b])
        .slice([0..batch, 0..count, 0..b * size])
        .reshape([batch, count, b, size])
        .slice([0..batch, 0..count, 0..b, 0..b])
}

/// `round_q8(x) · Wᵀ` with the Q8_0 weight dequantized first (`[out, in / 32, 32]` values times
/// their block's scale), then one float matmul on the rounded activations.
pub fn q8_matmul<B: Backend>(x: Tensor<B, 2>, values: Tensor<B, 2, Int>, scales: Tensor<B, 2>) -> Tensor<B, 2> {
    let [out, d_in] = values.dims();
    let [n, _] = x.dims();
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by the row count.
        return Tensor::zeros([0, out], &x.device());
    }
    let blocks = d_in / crate::Q8_BLOCK;
    let weight = values.float().reshape([out, blocks, crate::Q8_BLOCK]) * scales.reshape([out, blocks, 1]);
    round_activations_q8(x).matmul(weight.reshape([out, d_in]).transpose())
}

/// `x [n, in]` rounded to 8-bit blocks of 32 and back, as [`crate::quantize_activations_q8`]
/// rounds it. Rounding has no gradient: the gradient passes to `x` as if unrounded (the
/// straight-through estimator of quantization-aware training).
fn round_activations_q8<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let [n, d_in] = x.dims();
    let blocks = x.clone().detach().reshape([n, d_in / crate::Q8_BLOCK, crate::Q8_BLOCK]);
    let scale = blocks.clone().abs().max_dim(2).div_scalar(127.0);
    // A zero scale is a zero block: divided by 1, its values stay 0.
    let divisor = scale.clone().mask_fill(scale.clone().equal_elem(0.0), 1.0);
    let rounded = (blocks / divisor).round() * scale;
    // `x + (r - x)` is `r` exactly: `r` is 0 or within a factor of 2 of `x` (Sterbenz).
    x.clone() + (rounded.reshape([n, d_in]) - x).detach()
}

/// `x · weights[index]` with burn's matmul (`weights` `[in, out]` or `[experts, in, out]`).
pub fn dense_matmul<B: Backend>(x: FloatTensor<B>, weights: FloatTensor<B>, index: usize) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let weight = match weights.shape().num_dims() {
        2 => Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weights)),
        _ => {
            let stacked = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(weights));
            let [_, d_in, d_out] = stacked.dims();
            stacked.narrow(0, index, 1).reshape([d_in, d_out])
        }
    };
    let [n, _] = x.dims();
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by zero on a 0-row input.
        return Tensor::<B, 2>::zeros([0, weight.dims()[1]], &x.device()).into_primitive().tensor();
    }
    x.matmul(weight).into_primitive().tensor()
}
