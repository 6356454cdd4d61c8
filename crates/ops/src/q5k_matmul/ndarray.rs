//! ndarray: the CPU kernel ([`super::cpu`]) on the arrays in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorMetadata, TensorPrimitive};
use half::slice::HalfBitsSliceExt;

use crate::backends::ndarray::{float_tensor, host_counts, with_slice};

/// The kernel of [`super::cpu::q5k_matmul`] on f32 activations (the values in Q8_0's kernel
/// layout, [`crate::Q8Matmul::q8_layout`]); other dtypes take the generic form.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::Q5KMatmul for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn q5k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let ([n, d_in], [d_out, _]) = (x.shape().dims::<2>(), values.shape().dims::<2>());
        let out = match (&x, &values, &supers, &subs) {
            (NdArrayTensor::F32(x), NdArrayTensor::I8(values), NdArrayTensor::U16(supers), NdArrayTensor::U8(subs)) => {
                with_slice!(x, |x| with_slice!(values, |values| with_slice!(supers, |supers| with_slice!(
                    subs,
                    |subs| super::cpu::q5k_matmul(x, n, values, supers.reinterpret_cast(), subs, d_out, d_in)
                ))))
            }
            _ => {
                let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
                let [values, supers, subs] = [values, supers, subs].map(Tensor::<Self, 2, Int>::from_primitive);
                return super::generic::q5k_matmul(x, values, supers, subs).into_primitive().tensor();
            }
        };
        float_tensor::<Self, 2>(out, [n, d_out])
    }

    fn grouped_q5k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let [rows, d_in] = x.shape().dims::<2>();
        let [_, d_out, _] = values.shape().dims::<3>();
        let out = match (&x, &values, &supers, &subs, host_counts(&counts)) {
            (
                NdArrayTensor::F32(x),
                NdArrayTensor::I8(values),
                NdArrayTensor::U16(supers),
                NdArrayTensor::U8(subs),
                Some(counts),
            ) => with_slice!(x, |x| with_slice!(values, |values| with_slice!(supers, |supers| with_slice!(
                subs,
                |subs| super::cpu::grouped_q5k_matmul(x, &counts, values, supers.reinterpret_cast(), subs, d_out, d_in)
            )))),
            _ => return super::generic::grouped_q5k_matmul::<Self>(x, values, supers, subs, counts),
        };
        float_tensor::<Self, 2>(out, [rows, d_out])
    }
}
