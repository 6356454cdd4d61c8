//! The generic implementations, written with burn tensor ops: every backend's default, always
//! correct, and the yardstick the specialised kernels are tested and benchmarked against.

use burn::tensor::ops::{ActivationOps, FloatTensor, IntTensor};
use burn::tensor::{FloatDType, Int, Shape, Tensor, TensorData, TensorPrimitive, backend::Backend};

use crate::{ActivationBits, DenseMatmul, Half, HalfMatmul, Q4Matmul, Q8Matmul, UnitLowerInverse};

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

/// `round(x) · Wᵀ` with the Q8_0 weight dequantized first (`[out, in / 32, 32]` values times
/// their block's scale), then one float matmul on the activations rounded to `bits`.
pub fn q8_matmul<B: Q8Matmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 2, Int>,
    scales: Tensor<B, 2, Int>,
    bits: ActivationBits,
) -> Tensor<B, 2> {
    let ([n, d_in], [out, _]) = (x.dims(), values.dims());
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by the row count.
        return Tensor::zeros([0, out], &x.device());
    }
    let blocks = d_in / crate::Q8_BLOCK;
    let weight = crate::q8_values_f32(values).reshape([out, blocks, crate::Q8_BLOCK])
        * crate::block_scales_f32(scales, blocks).reshape([out, blocks, 1]);
    round_activations(x, bits).matmul(weight.reshape([out, d_in]).transpose())
}

/// `round(x) · Wᵀ` with the Q4_0 weight unpacked and dequantized first ([`q4_weight`]),
/// then one float matmul on the activations rounded to [`crate::Q4_ACTIVATION_BITS`].
pub fn q4_matmul<B: Q8Matmul>(x: Tensor<B, 2>, values: Tensor<B, 2, Int>, scales: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let ([n, d_in], [out, _]) = (x.dims(), values.dims());
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by the row count.
        return Tensor::zeros([0, out], &x.device());
    }
    round_activations(x, crate::Q4_ACTIVATION_BITS).matmul(q4_weight(values, scales, d_in).transpose())
}

/// The weight `[rows, in]` that Q4_0 packed `values [rows, in / 2]` (in Q4_0's order) and their
/// `scales [rows, in / 32]` stand for, in tensor ops: each byte `b` is `16 h + l`, value `j` of
/// its block `l` and value `j + 16` `h`, each standing for `(q - 8) · d`. Exact in f32.
pub fn q4_weight<B: Q8Matmul>(values: Tensor<B, 2, Int>, scales: Tensor<B, 2, Int>, d_in: usize) -> Tensor<B, 2> {
    let [rows, _] = values.dims();
    let blocks = d_in / crate::Q4_BLOCK;
    let bytes = crate::q4_bytes_f32(values).reshape([rows, blocks, crate::Q4_BLOCK / 2]);
    let high = bytes.clone().div_scalar(16.0).floor();
    let low = bytes - high.clone() * 16.0;
    let q = Tensor::cat(vec![low, high], 2) - 8.0;
    (q * crate::block_scales_f32(scales, blocks).reshape([rows, blocks, 1])).reshape([rows, d_in])
}

/// `x · Wᵀ` with the 16-bit weight read as f32 first ([`crate::half_bits_f32`]), then one float
/// matmul.
pub fn half_matmul<B: Backend>(x: Tensor<B, 2>, bits: Tensor<B, 2, Int>, half: Half) -> Tensor<B, 2> {
    let [out, _] = bits.dims();
    let [n, _] = x.dims();
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by the row count.
        return Tensor::zeros([0, out], &x.device());
    }
    x.matmul(crate::half_bits_f32(bits, half).transpose())
}

/// `x · Wᵀ` with the 16-bit float weight cast to f32 (exact), then one float matmul.
pub fn half_float_matmul<B: Backend>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    let [out, _] = weight.dims();
    let [n, _] = x.dims();
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by the row count.
        return Tensor::zeros([0, out], &x.device());
    }
    x.matmul(weight.cast(FloatDType::F32).transpose())
}

/// `x [n, in]` rounded to blocks of 32 `bits` integers and back, as [`crate::round_activations`]
/// rounds it on the host. Rounding has no gradient: the gradient passes to `x` as if unrounded
/// (the straight-through estimator of quantization-aware training).
fn round_activations<B: Backend>(x: Tensor<B, 2>, bits: ActivationBits) -> Tensor<B, 2> {
    let [n, d_in] = x.dims();
    let blocks = x.clone().detach().reshape([n, d_in / crate::Q8_BLOCK, crate::Q8_BLOCK]);
    let scale = blocks.clone().abs().max_dim(2).div_scalar(bits.max_value());
    // A zero scale is a zero block: divided by 1, its values stay 0.
    let divisor = scale.clone().mask_fill(scale.clone().equal_elem(0.0), 1.0);
    let rounded = (blocks / divisor).round() * scale;
    // `x + (r - x)` is `r` exactly: `r` is 0 or within a factor of 2 of `x` (Sterbenz).
    x.clone() + (rounded.reshape([n, d_in]) - x).detach()
}

/// The causal conv as burn tensor ops: the window `history ++ x` along time, then for each tap
/// `j` the window shifted by `j` times the weight's column `j`, summed; burn's SiLU.
pub fn causal_conv1d<B: Backend>(
    x: Tensor<B, 3>,
    history: Tensor<B, 3>,
    weight: Tensor<B, 2>,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let [batch, len, channels] = x.dims();
    let kernel = weight.dims()[1];
    // burn cannot narrow to nothing: no tokens leave the history as it is, and with K = 1 there
    // is none.
    if len == 0 {
        return (x, history);
    }
    let (window, history) = match kernel {
        1 => (x, history),
        _ => {
            let window = Tensor::cat(vec![history, x], 1); // [batch, K - 1 + len, channels]
            (window.clone(), window.narrow(1, len, kernel - 1))
        }
    };
    let mut out = Tensor::zeros([batch, len, channels], &window.device());
    for j in 0..kernel {
        let tap = weight.clone().narrow(1, j, 1).reshape([1, 1, channels]);
        out = out + window.clone().narrow(1, j, len) * tap;
    }
    (Tensor::from_primitive(TensorPrimitive::Float(silu::<B>(out.into_primitive().tensor()))), history)
}

/// burn's `float_reshape`.
pub fn reshape<B: Backend>(x: FloatTensor<B>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(x, shape)
}

/// burn's `sigmoid` (`ActivationOps::sigmoid`).
pub fn sigmoid<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    <B as ActivationOps<B>>::sigmoid(x)
}

/// burn's `x * sigmoid(x)`.
pub fn silu<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    B::float_mul(x.clone(), sigmoid::<B>(x))
}

/// burn's `matmul`, `x [n, in] · weight [in, out]`.
pub fn dense_matmul<B: Backend>(x: FloatTensor<B>, weight: FloatTensor<B>) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let weight = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weight));
    let [n, _] = x.dims();
    if n == 0 {
        // burn-ndarray 0.21's matmul divides by zero on a 0-row input.
        return Tensor::<B, 2>::zeros([0, weight.dims()[1]], &x.device()).into_primitive().tensor();
    }
    x.matmul(weight).into_primitive().tensor()
}

/// [`crate::grouped_matmul`] as a [`DenseMatmul::dense_matmul`] per expert with rows.
pub fn grouped_matmul<B: DenseMatmul>(
    x: FloatTensor<B>,
    weights: FloatTensor<B>,
    counts: IntTensor<B>,
) -> FloatTensor<B> {
    let weights = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(weights));
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let [_, d_in, d_out] = weights.dims();
    per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
        let weight = weights.clone().narrow(0, expert, 1).reshape([d_in, d_out]);
        Tensor::from_primitive(TensorPrimitive::Float(B::dense_matmul(
            x.into_primitive().tensor(),
            weight.into_primitive().tensor(),
        )))
    })
    .into_primitive()
    .tensor()
}

/// [`crate::grouped_q8_matmul`] as a [`Q8Matmul::q8_matmul`] per expert with rows.
pub fn grouped_q8_matmul<B: Q8Matmul>(
    x: FloatTensor<B>,
    values: IntTensor<B>,
    scales: IntTensor<B>,
    counts: IntTensor<B>,
    bits: ActivationBits,
) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let (values, scales) = (Tensor::<B, 3, Int>::from_primitive(values), Tensor::<B, 3, Int>::from_primitive(scales));
    let d_out = values.dims()[1];
    per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
        crate::q8_matmul(x, expert_of(&values, expert), expert_of(&scales, expert), bits)
    })
    .into_primitive()
    .tensor()
}

/// [`crate::grouped_q4_matmul`] as a [`Q4Matmul::q4_matmul`] per expert with rows.
pub fn grouped_q4_matmul<B: Q4Matmul>(
    x: FloatTensor<B>,
    values: IntTensor<B>,
    scales: IntTensor<B>,
    counts: IntTensor<B>,
) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let (values, scales) = (Tensor::<B, 3, Int>::from_primitive(values), Tensor::<B, 3, Int>::from_primitive(scales));
    let d_out = values.dims()[1];
    per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
        crate::q4_matmul(x, expert_of(&values, expert), expert_of(&scales, expert))
    })
    .into_primitive()
    .tensor()
}

/// Expert `expert`'s matrix of a stack `[experts, rows, cols]`.
fn expert_of<B: Backend, K: burn::tensor::TensorKind<B> + burn::tensor::BasicOps<B>>(
    stack: &Tensor<B, 3, K>,
    expert: usize,
) -> Tensor<B, 2, K> {
    let [_, rows, cols] = stack.dims();
    stack.clone().narrow(0, expert, 1).reshape([rows, cols])
}

/// [`crate::grouped_half_matmul`] as a [`HalfMatmul::half_matmul`] per expert with rows.
pub fn grouped_half_matmul<B: HalfMatmul>(
    x: FloatTensor<B>,
    bits: IntTensor<B>,
    counts: IntTensor<B>,
    half: Half,
) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let bits = Tensor::<B, 3, Int>::from_primitive(bits);
    let d_out = bits.dims()[1];
    per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
        crate::half_matmul(x, expert_of(&bits, expert), half)
    })
    .into_primitive()
    .tensor()
}

/// [`crate::grouped_half_float_matmul`] as a [`HalfMatmul::half_float_matmul`] per expert with
/// rows.
pub fn grouped_half_float_matmul<B: HalfMatmul>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    counts: IntTensor<B>,
) -> FloatTensor<B> {
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let weight = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(weight));
    let d_out = weight.dims()[1];
    per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
        crate::half_float_matmul(x, expert_of(&weight, expert))
    })
    .into_primitive()
    .tensor()
}

/// The grouped products as a host loop: `x [rows, _]` cut into the `counts [experts]` rows of
/// each expert (read back to the host), `product(rows, expert)` for each expert with rows, the
/// results `[_, d_out]` concatenated in order.
fn per_expert<B: Backend>(
    x: Tensor<B, 2>,
    counts: Tensor<B, 1, Int>,
    d_out: usize,
    product: impl Fn(Tensor<B, 2>, usize) -> Tensor<B, 2>,
) -> Tensor<B, 2> {
    let counts: Vec<i64> = counts.into_data().iter::<i64>().collect();
    let mut outputs = Vec::new();
    let mut start = 0;
    for (expert, &count) in counts.iter().enumerate() {
        let count = usize::try_from(count).expect("expert counts are not negative");
        if count > 0 {
            outputs.push(product(x.clone().narrow(0, start, count), expert));
            start += count;
        }
    }
    let [rows, _] = x.dims();
    assert_eq!(start, rows, "grouped matmul: the expert counts sum to {start}, x has {rows} rows");
    match outputs.is_empty() {
        true => Tensor::zeros([0, d_out], &x.device()),
        false => Tensor::cat(outputs, 0),
    }
}

/// Tokens per chunk of [`chunked_gated_delta_rule`], as in transformers and FLA.
pub const CHUNK_SIZE: usize = 64;

/// The gated delta rule in chunks of [`CHUNK_SIZE`] tokens (transformers'
/// `torch_chunk_gated_delta_rule`): per chunk, the intra-chunk part as matmuls around one
/// unit-lower-triangular inverse, then the state carried from chunk to chunk. Inputs and outputs
/// as [`crate::GatedDeltaRule::gated_delta_rule`].
///
/// Batch and heads are folded into one dimension so every matmul has at most two batch
/// dimensions (candle's limit).
pub fn chunked_gated_delta_rule<B: UnitLowerInverse>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    g: Tensor<B, 3>,
    beta: Tensor<B, 3>,
    initial_state: Tensor<B, 4>,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [batch, len, heads, dv] = v.dims();
    let dk = q.dims()[3];
    let device = v.device();
    if len == 0 {
        // Nothing to scan (and burn's reshape reads a 0 in a shape as "keep this dimension").
        return (Tensor::zeros([batch, 0, heads, dv], &device), initial_state);
    }
    let c = CHUNK_SIZE;
    let chunks = len.div_ceil(c);
    let padded = chunks * c;
    let bh = batch * heads;

    // [batch * heads, chunks, C, .], right-padded with zeros: beta = 0 writes nothing and
    // g = 0 keeps the state.
    let to_chunks = |x: Tensor<B, 3>, width: usize| -> Tensor<B, 4> {
        let x =
            if padded == len { x } else { Tensor::cat(vec![x, Tensor::zeros([bh, padded - len, width], &device)], 1) };
        x.reshape([bh, chunks, c, width])
    };
    let heads_first = |x: Tensor<B, 4>, width: usize| to_chunks(x.swap_dims(1, 2).reshape([bh, len, width]), width);
    let per_token = |x: Tensor<B, 3>| to_chunks(x.swap_dims(1, 2).reshape([bh, len, 1]), 1);
    let q = heads_first(q, dk);
    let k = heads_first(k, dk);
    let v = heads_first(v, dv);
    let beta = per_token(beta); // [bh, chunks, C, 1]
    let gamma = per_token(g).cumsum(2); // cumulative log decay inside each chunk, [bh, chunks, C, 1]
    let v_beta = v * beta.clone();
    let k_beta = k.clone() * beta;

    // decay[i, j] = exp(gamma_i - gamma_j) for j <= i, else 0. The exponent is clamped at 0 (it
    // is <= 0 below the diagonal) and the upper part multiplied by 0: no infinities, which GPU
    // shading languages do not guarantee to handle.
    // Both operands are expanded explicitly: burn-wgpu 0.21 computes a subtraction that
    // broadcasts both sides ([.., C, 1] - [.., 1, C]) wrongly.
    let lower = lower_triangle::<B>(c, &device).reshape([1, 1, c, c]);
    let square = [bh, chunks, c, c];
    let diff = gamma.clone().expand(square) - gamma.clone().swap_dims(2, 3).expand(square);
    let decay = diff.clamp_max(0.0).exp() * lower;

    let gamma_exp = gamma.clone().exp();
    let system = k_beta.clone().matmul(k.clone().swap_dims(2, 3)) * decay.clone();
    let inverse = crate::unit_lower_inverse(system);
    let new_values = inverse.clone().matmul(v_beta); // U = (I + L)^-1 (beta v)
    let k_cumdecay = inverse.matmul(k_beta * gamma_exp.clone()); // W = (I + L)^-1 (beta k exp(gamma))
    let intra = q.clone().matmul(k.clone().swap_dims(2, 3)) * decay;

    let last = gamma.clone().narrow(2, c - 1, 1); // [bh, chunks, 1, 1]
    let q = q * gamma_exp;
    let k = k * (last.clone() - gamma).exp();
    let chunk_decay = last.exp();

    let mut state = initial_state.reshape([bh, dk, dv]);
    let chunk = |x: &Tensor<B, 4>, i: usize| -> Tensor<B, 3> { x.clone().narrow(1, i, 1).squeeze_dim::<3>(1) };
    let mut outputs = Vec::with_capacity(chunks);
    for i in 0..chunks {
        let v_new = chunk(&new_values, i) - chunk(&k_cumdecay, i).matmul(state.clone());
        outputs.push(chunk(&q, i).matmul(state.clone()) + chunk(&intra, i).matmul(v_new.clone()));
        state = state * chunk(&chunk_decay, i) + chunk(&k, i).swap_dims(1, 2).matmul(v_new);
    }
    let out = Tensor::cat(outputs, 1).narrow(1, 0, len).reshape([batch, heads, len, dv]).swap_dims(1, 2);
    (out, state.reshape([batch, heads, dk, dv]))
}

/// `[c, c]`: 1 on and below the diagonal, 0 above.
fn lower_triangle<B: Backend>(c: usize, device: &B::Device) -> Tensor<B, 2> {
    let values: Vec<f32> = (0..c).flat_map(|i| (0..c).map(move |j| if j <= i { 1.0 } else { 0.0 })).collect();
    Tensor::from_data(TensorData::new(values, [c, c]), device)
}
