//! candle: on the CPU device the host kernel ([`super::cpu`]) on the values copied through
//! `TensorData` (O(n^2) against the kernel's O(n^3)); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};

use crate::UnitLowerInverse;

impl<F: FloatCandleElement, I: IntCandleElement> UnitLowerInverse for Candle<F, I> {
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
        let (shape, device) = (a.dims(), a.device());
        let n = shape[2];
        if !matches!(device, CandleDevice::Cpu) {
            return super::generic::unit_lower_inverse(a).into_primitive().tensor();
        }
        let data = a.into_data();
        let inverse = match data.dtype {
            DType::F32 => {
                TensorData::new(super::cpu::unit_lower_inverse(data.as_slice::<f32>().expect("f32 data"), n), shape)
            }
            DType::F64 => {
                TensorData::new(super::cpu::unit_lower_inverse(data.as_slice::<f64>().expect("f64 data"), n), shape)
            }
            _ => {
                return super::generic::unit_lower_inverse(Tensor::<Self, 3>::from_data(data, &device))
                    .into_primitive()
                    .tensor();
            }
        };
        Tensor::<Self, 3>::from_data(inverse, &device).into_primitive().tensor()
    }
}
