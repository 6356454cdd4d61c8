//! ndarray: one parallel pass ([`super::cpu`]) on the array in place.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::Gating;
use crate::backends::ndarray::{shaped, with_slice};

/// [`super::cpu::sigmoid`] and [`super::cpu::silu`] on f32 values read in place (one parallel pass); other
/// dtypes take burn's forms.
impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> Gating for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn sigmoid(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match &x {
            NdArrayTensor::F32(values) => {
                let shape = x.shape();
                with_slice!(values, |values| shaped::<Self>(super::cpu::sigmoid(values), shape))
            }
            _ => super::generic::sigmoid::<Self>(x),
        }
    }

    fn silu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match &x {
            NdArrayTensor::F32(values) => {
                let shape = x.shape();
                with_slice!(values, |values| shaped::<Self>(super::cpu::silu(values), shape))
            }
            _ => super::generic::silu::<Self>(x),
        }
    }
}
