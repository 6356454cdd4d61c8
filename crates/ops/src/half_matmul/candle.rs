//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use half::{bf16, f16};

use crate::Half;

/// On the CPU device, weights held as 16-bit float tensors go through [`super::cpu::half_matmul`] on
/// their host values (a copy of 2 bytes a weight, where candle's own cast to f32 converts one
/// value at a time; the grouped default runs it per expert with rows, so only their weights are
/// copied); elsewhere, and for patterns, the generic forms.
impl<F: FloatCandleElement, I: IntCandleElement> crate::HalfMatmul for Candle<F, I> {
    fn half_bits_dtype() -> DType {
        DType::U32
    }

    fn half_float_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let float = |t| Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(t));
        let (x, weight) = (float(x), float(weight));
        let (Some(half), CandleDevice::Cpu, DType::F32) = (Half::of_dtype(weight.dtype()), x.device(), x.dtype())
        else {
            return super::generic::half_float_matmul(x, weight).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), weight.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let out = super::cpu::half_matmul(&x, n, &half_bits_of(weight.into_data()), half, d_out, d_in);
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}

/// The patterns of 16-bit float data.
fn half_bits_of(data: TensorData) -> Vec<u16> {
    match data.dtype {
        DType::F16 => data.into_vec::<f16>().expect("f16 data").into_iter().map(f16::to_bits).collect(),
        _ => data.into_vec::<bf16>().expect("bf16 data").into_iter().map(bf16::to_bits).collect(),
    }
}
