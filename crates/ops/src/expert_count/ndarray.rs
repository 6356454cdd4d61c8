//! ndarray: one pass over the ids in plain Rust ([`super::cpu`]).

use burn::backend::NdArray;
use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};
use burn::tensor::ops::IntTensor;
use burn::tensor::{Int, Tensor, TensorData};

use crate::ExpertCount;
use crate::backends::ndarray::with_slice;

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> ExpertCount for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let counts = match &ids {
            NdArrayTensor::I64(s) => with_slice!(s, |ids| super::cpu::expert_count(ids.iter().copied(), num_experts)),
            NdArrayTensor::I32(s) => {
                with_slice!(s, |ids| super::cpu::expert_count(ids.iter().map(|&id| id as i64), num_experts))
            }
            _ => {
                return super::generic::expert_count(Tensor::<Self, 1, Int>::from_primitive(ids), num_experts)
                    .into_primitive();
            }
        };
        let device = Default::default();
        Tensor::<Self, 1, Int>::from_data(TensorData::new(counts, [num_experts]).convert::<I>(), &device)
            .into_primitive()
    }
}
