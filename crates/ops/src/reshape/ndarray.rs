//! ndarray: a new shape in place where the array allows it.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;

use crate::Reshape;

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
            x => super::generic::reshape::<Self>(x, shape),
        }
    }
}
