//! ndarray: one parallel pass over tokens ([`super::cpu`]) reading the window in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};

use crate::CausalConv1d;
use crate::backends::ndarray::{shaped, with_slice};

/// [`super::cpu::causal_conv1d`] on f32 inputs read in place; other dtypes take the
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
                    super::cpu::causal_conv1d(x, history, weight, batch, channels, kernel)
                })))
            }
            _ => return super::by_tensor_ops::<Self>(x, history, weight),
        };
        (
            shaped::<Self>(out, Shape::from([batch, len, channels])),
            shaped::<Self>(state, Shape::from([batch, kernel - 1, channels])),
        )
    }

    fn causal_conv1d_workspace() -> usize {
        if E::dtype() == DType::F32 { 0 } else { super::GENERIC_WORKSPACE }
    }
}
