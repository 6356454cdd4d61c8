//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::IntTensor;
use burn::tensor::{DType, Int, Tensor, TensorData};

use crate::ExpertCount;

impl<F: FloatCandleElement, I: IntCandleElement> ExpertCount for Candle<F, I> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let ids = Tensor::<Self, 1, Int>::from_primitive(ids);
        let device = ids.device();
        if !matches!(device, CandleDevice::Cpu) {
            return super::generic::expert_count(ids, num_experts).into_primitive();
        }
        let data = ids.into_data();
        let counts = match data.dtype {
            DType::I64 => {
                super::cpu::expert_count(data.as_slice::<i64>().expect("i64 ids").iter().copied(), num_experts)
            }
            _ => super::cpu::expert_count(data.iter::<i64>(), num_experts),
        };
        Tensor::<Self, 1, Int>::from_data(TensorData::new(counts, [num_experts]).convert::<I>(), &device)
            .into_primitive()
    }
}
