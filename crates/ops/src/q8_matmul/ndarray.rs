//! ndarray: the CPU kernel ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorMetadata, TensorPrimitive};
use half::slice::HalfBitsSliceExt;

use crate::ActivationBits;
use crate::backends::ndarray::{float_tensor, host_counts, with_slice};

/// The kernel of [`super::cpu::q8_matmul`] on f32 activations and i8 values (the integer dot where the
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
            DType::F32 => super::cpu::q8_layout(values, d_out, d_in),
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
                    super::cpu::q8_matmul(x, n, values, scales.reinterpret_cast(), d_out, d_in, bits)
                })))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                let values = Tensor::<Self, 2, Int>::from_primitive(values);
                let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
                return super::generic::q8_matmul(x, values, scales, bits).into_primitive().tensor();
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
                    super::cpu::grouped_q8_matmul(x, &counts, values, scales.reinterpret_cast(), d_out, d_in, bits)
                })))
            }
            _ => return super::generic::grouped_q8_matmul::<Self>(x, values, scales, counts, bits),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}
