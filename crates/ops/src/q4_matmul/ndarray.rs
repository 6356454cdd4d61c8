//! ndarray: the CPU kernel ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorMetadata, TensorPrimitive};
use half::slice::HalfBitsSliceExt;

use crate::backends::ndarray::{float_tensor, host_counts, with_slice};

/// The kernel of [`super::cpu::q4_matmul`] on f32 activations and u8 packed bytes, as for Q8_0.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::Q4Matmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    /// The kernel's order where it runs: with f32 activations.
    fn q4_layout(packed: Vec<u8>, d_out: usize, d_in: usize) -> Vec<u8> {
        match E::dtype() {
            DType::F32 => super::cpu::q4_layout(packed, d_out, d_in),
            _ => packed,
        }
    }

    fn q4_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: IntTensor<Self>) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), values.shape().dims::<2>());
        let out = match (&x, &values, &scales) {
            (NdArrayTensor::F32(x), NdArrayTensor::U8(packed), NdArrayTensor::U16(scales)) => {
                with_slice!(x, |x| with_slice!(packed, |packed| with_slice!(scales, |scales| {
                    super::cpu::q4_matmul(x, n, packed, scales.reinterpret_cast(), d_out, d_in)
                })))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                let values = Tensor::<Self, 2, Int>::from_primitive(values);
                let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
                return super::generic::q4_matmul(x, values, scales).into_primitive().tensor();
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
                    super::cpu::grouped_q4_matmul(x, &counts, packed, scales.reinterpret_cast(), d_out, d_in)
                })))
            }
            _ => return super::generic::grouped_q4_matmul::<Self>(x, values, scales, counts),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}
