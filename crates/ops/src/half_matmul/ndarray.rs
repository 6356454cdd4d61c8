//! ndarray: the CPU kernel ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};

use crate::Half;
use crate::backends::ndarray::{float_tensor, host_counts, with_slice};

/// [`super::cpu::half_matmul`] on f32 activations and u16 patterns; other dtypes take the generic form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::HalfMatmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn half_bits_dtype() -> DType {
        DType::U16
    }

    fn rounds_activations(half: Half) -> bool {
        half == Half::Bf16 && E::dtype() == DType::F32
    }

    fn half_matmul(x: FloatTensor<Self>, bits: IntTensor<Self>, half: Half) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), bits.shape().dims::<2>());
        let out = match (&x, &bits) {
            (NdArrayTensor::F32(x), NdArrayTensor::U16(bits)) => {
                with_slice!(x, |x| with_slice!(bits, |bits| super::cpu::half_matmul(x, n, bits, half, d_out, d_in)))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                return super::generic::half_matmul(x, Tensor::from_primitive(bits), half).into_primitive().tensor();
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
                with_slice!(x, |x| with_slice!(bits, |bits| super::cpu::grouped_half_matmul(
                    x, &counts, bits, half, d_out, d_in
                )))
            }
            _ => return super::generic::grouped_half_matmul::<Self>(x, bits, counts, half),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}
