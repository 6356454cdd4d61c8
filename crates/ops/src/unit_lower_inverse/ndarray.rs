//! ndarray: forward substitution per matrix ([`super::cpu`]), in parallel over the batch.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::UnitLowerInverse;
use crate::backends::ndarray::with_slice;

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> UnitLowerInverse for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let shape: Shape = a.shape();
        let n = shape[2];
        let inverse = match &a {
            NdArrayTensor::F32(s) => with_slice!(s, |a| TensorData::new(super::cpu::unit_lower_inverse(a, n), shape)),
            NdArrayTensor::F64(s) => with_slice!(s, |a| TensorData::new(super::cpu::unit_lower_inverse(a, n), shape)),
            _ => {
                let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
                return super::generic::unit_lower_inverse(a).into_primitive().tensor();
            }
        };
        Tensor::<Self, 3>::from_data(inverse, &Default::default()).into_primitive().tensor()
    }
}
