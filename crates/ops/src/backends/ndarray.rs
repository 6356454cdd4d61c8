//! ndarray: the plain-Rust kernels of [`crate::cpu`], run directly on the tensors' arrays.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Shape, Tensor, TensorData, TensorMetadata, TensorPrimitive};
use half::slice::HalfBitsSliceExt;

use crate::{
    ActivationBits, CausalConv1d, DenseMatmul, ExpertCount, GatedDeltaRule, Gating, Half, Reshape, UnitLowerInverse,
    cpu, generic,
};

/// Calls `f` on the contiguous values of an ndarray storage (copied only if not in standard
/// layout). Going through `TensorData` instead copies element by element whenever the array is
/// shared, which cost more than the kernels themselves.
macro_rules! with_slice {
    ($storage:expr, |$slice:ident| $body:expr) => {{
        let view = $storage.view();
        let standard = view.as_standard_layout();
        let $slice = standard.as_slice().expect("standard layout is contiguous");
        $body
    }};
}

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> ExpertCount for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let counts = match &ids {
            NdArrayTensor::I64(s) => with_slice!(s, |ids| cpu::expert_count(ids.iter().copied(), num_experts)),
            NdArrayTensor::I32(s) => {
                with_slice!(s, |ids| cpu::expert_count(ids.iter().map(|&id| id as i64), num_experts))
            }
            _ => {
                return generic::expert_count(Tensor::<Self, 1, Int>::from_primitive(ids), num_experts)
                    .into_primitive();
            }
        };
        let device = Default::default();
        Tensor::<Self, 1, Int>::from_data(TensorData::new(counts, [num_experts]).convert::<I>(), &device)
            .into_primitive()
    }
}

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> UnitLowerInverse for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let shape: Shape = a.shape();
        let n = shape[2];
        let inverse = match &a {
            NdArrayTensor::F32(s) => with_slice!(s, |a| TensorData::new(cpu::unit_lower_inverse(a, n), shape)),
            NdArrayTensor::F64(s) => with_slice!(s, |a| TensorData::new(cpu::unit_lower_inverse(a, n), shape)),
            _ => {
                let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
                return generic::unit_lower_inverse(a).into_primitive().tensor();
            }
        };
        Tensor::<Self, 3>::from_data(inverse, &Default::default()).into_primitive().tensor()
    }
}

/// The kernel of [`cpu::q8_matmul`] on f32 activations and i8 values (the integer dot where the
/// CPU has one); other dtypes take the generic form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::Q8Matmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn block_storage() -> crate::BlockStorage {
        crate::BlockStorage::OwnWidth
    }

    /// The kernel's order where it runs: with f32 activations (other float types take the
    /// generic form, which reads the values as they are).
    fn q8_layout(values: Vec<i8>, d_out: usize, d_in: usize) -> Vec<i8> {
        match E::dtype() {
            DType::F32 => cpu::q8_layout(values, d_out, d_in),
            _ => values,
        }
    }

    fn q8_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), values.shape().dims::<2>());
        let out = match (&x, &values, &scales) {
            (NdArrayTensor::F32(x), NdArrayTensor::I8(values), NdArrayTensor::U16(scales)) => {
                with_slice!(x, |x| with_slice!(values, |values| with_slice!(scales, |scales| {
                    cpu::q8_matmul(x, n, values, scales.reinterpret_cast(), d_out, d_in, bits)
                })))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                let values = Tensor::<Self, 2, Int>::from_primitive(values);
                let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
                return generic::q8_matmul(x, values, scales, bits).into_primitive().tensor();
            }
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_q8_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        counts: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        let ([rows, _], [_, d_out, d_in]) = (x.shape().dims::<2>(), values.shape().dims::<3>());
        let out = match (&x, &values, &scales, host_counts(&counts)) {
            (NdArrayTensor::F32(x), NdArrayTensor::I8(values), NdArrayTensor::U16(scales), Some(counts)) => {
                with_slice!(x, |x| with_slice!(values, |values| with_slice!(scales, |scales| {
                    cpu::grouped_q8_matmul(x, &counts, values, scales.reinterpret_cast(), d_out, d_in, bits)
                })))
            }
            _ => return generic::grouped_q8_matmul::<Self>(x, values, scales, counts, bits),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}

/// The kernel of [`cpu::q4_matmul`] on f32 activations and u8 packed bytes, as for Q8_0.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::Q4Matmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    /// The kernel's order where it runs: with f32 activations.
    fn q4_layout(packed: Vec<u8>, d_out: usize, d_in: usize) -> Vec<u8> {
        match E::dtype() {
            DType::F32 => cpu::q4_layout(packed, d_out, d_in),
            _ => packed,
        }
    }

    fn q4_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: IntTensor<Self>) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), values.shape().dims::<2>());
        let out = match (&x, &values, &scales) {
            (NdArrayTensor::F32(x), NdArrayTensor::U8(packed), NdArrayTensor::U16(scales)) => {
                with_slice!(x, |x| with_slice!(packed, |packed| with_slice!(scales, |scales| {
                    cpu::q4_matmul(x, n, packed, scales.reinterpret_cast(), d_out, d_in)
                })))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                let values = Tensor::<Self, 2, Int>::from_primitive(values);
                let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
                return generic::q4_matmul(x, values, scales).into_primitive().tensor();
            }
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_q4_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let [rows, d_in] = x.shape().dims::<2>();
        let [_, d_out, _] = values.shape().dims::<3>();
        let out = match (&x, &values, &scales, host_counts(&counts)) {
            (NdArrayTensor::F32(x), NdArrayTensor::U8(packed), NdArrayTensor::U16(scales), Some(counts)) => {
                with_slice!(x, |x| with_slice!(packed, |packed| with_slice!(scales, |scales| {
                    cpu::grouped_q4_matmul(x, &counts, packed, scales.reinterpret_cast(), d_out, d_in)
                })))
            }
            _ => return generic::grouped_q4_matmul::<Self>(x, values, scales, counts),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}

/// [`cpu::half_matmul`] on f32 activations and u16 patterns; other dtypes take the generic form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::HalfMatmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn half_bits_dtype() -> DType {
        DType::U16
    }

    fn half_matmul(x: FloatTensor<Self>, bits: IntTensor<Self>, half: Half) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), bits.shape().dims::<2>());
        let out = match (&x, &bits) {
            (NdArrayTensor::F32(x), NdArrayTensor::U16(bits)) => {
                with_slice!(x, |x| with_slice!(bits, |bits| cpu::half_matmul(x, n, bits, half, d_out, d_in)))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                return generic::half_matmul(x, Tensor::from_primitive(bits), half).into_primitive().tensor();
            }
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_half_matmul(
        x: FloatTensor<Self>,
        bits: IntTensor<Self>,
        counts: IntTensor<Self>,
        half: Half,
    ) -> FloatTensor<Self> {
        let ([rows, _], [_, d_out, d_in]) = (x.shape().dims::<2>(), bits.shape().dims::<3>());
        let out = match (&x, &bits, host_counts(&counts)) {
            (NdArrayTensor::F32(x), NdArrayTensor::U16(bits), Some(counts)) => {
                with_slice!(x, |x| with_slice!(bits, |bits| cpu::grouped_half_matmul(
                    x, &counts, bits, half, d_out, d_in
                )))
            }
            _ => return generic::grouped_half_matmul::<Self>(x, bits, counts, half),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}

/// [`cpu::dense_matmul`] and [`cpu::grouped_matmul`] on f32 operands read in place; other
/// dtypes take the generic forms.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> DenseMatmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn dense_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let ([n, d_in], [_, d_out]) = (x.shape().dims::<2>(), weight.shape().dims::<2>());
        let out = match (&x, &weight) {
            (NdArrayTensor::F32(x), NdArrayTensor::F32(weight)) => {
                with_slice!(x, |x| with_slice!(weight, |weight| cpu::dense_matmul(x, n, weight, d_in, d_out)))
            }
            _ => return generic::dense_matmul::<Self>(x, weight),
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_matmul(x: FloatTensor<Self>, weights: FloatTensor<Self>, counts: IntTensor<Self>) -> FloatTensor<Self> {
        let ([rows, _], [_, d_in, d_out]) = (x.shape().dims::<2>(), weights.shape().dims::<3>());
        let out = match (&x, &weights, host_counts(&counts)) {
            (NdArrayTensor::F32(x), NdArrayTensor::F32(weights), Some(counts)) => {
                with_slice!(x, |x| with_slice!(weights, |weights| cpu::grouped_matmul(
                    x, &counts, weights, d_in, d_out
                )))
            }
            _ => return generic::grouped_matmul::<Self>(x, weights, counts),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}

/// The expert counts as host numbers (`None` for an int type the kernels do not read).
fn host_counts(counts: &NdArrayTensor) -> Option<Vec<usize>> {
    let count = |c: i64| usize::try_from(c).expect("expert counts are not negative");
    match counts {
        NdArrayTensor::I64(s) => Some(with_slice!(s, |c| c.iter().map(|&c| count(c)).collect())),
        NdArrayTensor::I32(s) => Some(with_slice!(s, |c| c.iter().map(|&c| count(c as i64)).collect())),
        _ => None,
    }
}

/// A float tensor of a backend from row-major f32 values.
fn float_tensor<B: burn::tensor::backend::Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
) -> FloatTensor<B> {
    Tensor::<B, D>::from_data(TensorData::new(values, shape), &Default::default()).into_primitive().tensor()
}

/// [`cpu::sigmoid`] and [`cpu::silu`] on f32 values read in place (one parallel pass); other
/// dtypes take burn's forms.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> Gating for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn sigmoid(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match &x {
            NdArrayTensor::F32(values) => {
                let shape = x.shape();
                with_slice!(values, |values| shaped::<Self>(cpu::sigmoid(values), shape))
            }
            _ => generic::sigmoid::<Self>(x),
        }
    }

    fn silu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match &x {
            NdArrayTensor::F32(values) => {
                let shape = x.shape();
                with_slice!(values, |values| shaped::<Self>(cpu::silu(values), shape))
            }
            _ => generic::silu::<Self>(x),
        }
    }
}

/// [`cpu::causal_conv1d::causal_conv1d`] on f32 inputs read in place; other dtypes take the
/// generic form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> CausalConv1d for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn causal_conv1d(
        x: FloatTensor<Self>,
        history: FloatTensor<Self>,
        weight: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let ([batch, len, channels], [channels_w, kernel]) = (x.shape().dims::<3>(), weight.shape().dims::<2>());
        let (out, state) = match (&x, &history, &weight) {
            (NdArrayTensor::F32(x), NdArrayTensor::F32(history), NdArrayTensor::F32(weight))
                if channels_w == channels =>
            {
                with_slice!(x, |x| with_slice!(history, |history| with_slice!(weight, |weight| {
                    cpu::causal_conv1d::causal_conv1d(x, history, weight, batch, channels, kernel)
                })))
            }
            _ => return crate::causal_conv1d::by_tensor_ops::<Self>(x, history, weight),
        };
        (
            shaped::<Self>(out, Shape::from([batch, len, channels])),
            shaped::<Self>(state, Shape::from([batch, kernel - 1, channels])),
        )
    }

    fn causal_conv1d_workspace() -> usize {
        if E::dtype() == DType::F32 { 0 } else { crate::causal_conv1d::GENERIC_WORKSPACE }
    }
}

/// An f32 array it owns in row-major order takes the new shape in place; other tensors (borrowed
/// storage, strided views, other dtypes) take burn's reshape, which copies.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> Reshape for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn reshape(x: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        match x {
            NdArrayTensor::F32(storage) if !storage.is_borrowed() && storage.view().is_standard_layout() => {
                let array = storage
                    .into_shared()
                    .into_shape_with_order(shape.to_vec())
                    .expect("a row-major array takes any shape with as many elements");
                NdArrayTensor::from(array)
            }
            x => generic::reshape::<Self>(x, shape),
        }
    }
}

/// f32 `values` as a float tensor of any rank.
fn shaped<B: burn::tensor::backend::Backend>(values: Vec<f32>, shape: Shape) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(values, shape), &Default::default())
}

/// [`cpu::delta_rule`] (token by token, the state in cache) on f32 inputs read in place; other
/// dtypes take the generic chunked form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> GatedDeltaRule for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn gated_delta_rule(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        state: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let ([batch, len, heads, dk], [.., dv]) = (q.shape().dims::<4>(), v.shape().dims::<4>());
        let dims = cpu::delta_rule::Dims { batch, len, heads, dk, dv };
        let (out, state) = match (&q, &k, &v, &g, &beta, &state) {
            (
                NdArrayTensor::F32(q),
                NdArrayTensor::F32(k),
                NdArrayTensor::F32(v),
                NdArrayTensor::F32(g),
                NdArrayTensor::F32(beta),
                NdArrayTensor::F32(state),
            ) => {
                with_slice!(q, |q| with_slice!(k, |k| with_slice!(v, |v| with_slice!(g, |g| with_slice!(
                    beta,
                    |beta| with_slice!(state, |state| {
                        cpu::delta_rule::gated_delta_rule([q, k, v, g, beta, state], dims, cpu::Isa::best())
                    })
                )))))
            }
            _ => return crate::gated_delta_rule::chunked::<Self>(q, k, v, g, beta, state),
        };
        let device = Default::default();
        let tensor = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::<Self, 4>::from_data(TensorData::new(values, shape), &device).into_primitive().tensor()
        };
        (tensor(out, [batch, len, heads, dv]), tensor(state, [batch, heads, dk, dv]))
    }

    fn gated_delta_rule_workspace(heads: usize, dk: usize, dv: usize) -> usize {
        if E::dtype() == DType::F32 { 0 } else { crate::gated_delta_rule::chunked_workspace(heads, dk, dv) }
    }
}
