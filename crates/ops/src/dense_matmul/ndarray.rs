//! ndarray: sgemm and the grouped kernel ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::TensorMetadata;
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::DenseMatmul;
use crate::backends::ndarray::{float_tensor, host_counts, with_slice};

/// [`super::cpu::dense_matmul`] and [`super::cpu::grouped_matmul`] on f32 operands read in place; other
/// dtypes take the generic forms.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> DenseMatmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn dense_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let ([n, d_in], [_, d_out]) = (x.shape().dims::<2>(), weight.shape().dims::<2>());
        let out = match (&x, &weight) {
            (NdArrayTensor::F32(x), NdArrayTensor::F32(weight)) => {
                with_slice!(x, |x| with_slice!(weight, |weight| super::cpu::dense_matmul(x, n, weight, d_in, d_out)))
            }
            _ => return super::generic::dense_matmul::<Self>(x, weight),
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_matmul(x: FloatTensor<Self>, weights: FloatTensor<Self>, counts: IntTensor<Self>) -> FloatTensor<Self> {
        let ([rows, _], [_, d_in, d_out]) = (x.shape().dims::<2>(), weights.shape().dims::<3>());
        let out = match (&x, &weights, host_counts(&counts)) {
            (NdArrayTensor::F32(x), NdArrayTensor::F32(weights), Some(counts)) => {
                with_slice!(x, |x| with_slice!(weights, |weights| super::cpu::grouped_matmul(
                    x, &counts, weights, d_in, d_out
                )))
            }
            _ => return super::generic::grouped_matmul::<Self>(x, weights, counts),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}
