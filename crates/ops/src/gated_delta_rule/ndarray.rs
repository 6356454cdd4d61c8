//! ndarray: the token-by-token scan ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorMetadata};

use crate::GatedDeltaRule;
use crate::backends::ndarray::with_slice;

/// [`super::cpu::delta_rule`] (token by token, the state in cache) on f32 inputs read in place; other
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
        let dims = super::cpu::Dims { batch, len, heads, dk, dv };
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
                        super::cpu::gated_delta_rule([q, k, v, g, beta, state], dims, crate::cpu::Isa::best())
                    })
                )))))
            }
            _ => return super::chunked::<Self>(q, k, v, g, beta, state),
        };
        let device = Default::default();
        let tensor = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::<Self, 4>::from_data(TensorData::new(values, shape), &device).into_primitive().tensor()
        };
        (tensor(out, [batch, len, heads, dv]), tensor(state, [batch, heads, dk, dv]))
    }

    fn gated_delta_rule_workspace(heads: usize, dk: usize, dv: usize) -> usize {
        if E::dtype() == DType::F32 { 0 } else { super::chunked_workspace(heads, dk, dv) }
    }
}
