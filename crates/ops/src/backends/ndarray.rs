//! ndarray: the plain-Rust kernels of [`crate::cpu`] on the tensor's host data.

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};

use crate::{ExpertCount, UnitLowerInverse, cpu, generic};

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> ExpertCount for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let ids = Tensor::<Self, 1, Int>::from_primitive(ids);
        let device = ids.device();
        let counts = cpu::expert_count(ids.into_data().iter::<i64>(), num_experts);
        Tensor::<Self, 1, Int>::from_data(TensorData::new(counts, [num_experts]).convert::<I>(), &device).into_primitive()
    }
}

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> UnitLowerInverse for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
        let (shape, device) = (a.dims(), a.device());
        let n = shape[2];
        let data = a.into_data();
        let inverse = match data.dtype {
            DType::F32 => TensorData::new(cpu::unit_lower_inverse(data.as_slice::<f32>().expect("f32 data"), n), shape),
            DType::F64 => TensorData::new(cpu::unit_lower_inverse(data.as_slice::<f64>().expect("f64 data"), n), shape),
            _ => return generic::unit_lower_inverse(Tensor::<Self, 3>::from_data(data, &device)).into_primitive().tensor(),
        };
        Tensor::<Self, 3>::from_data(inverse, &device).into_primitive().tensor()
    }
}
