//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use half::{bf16, f16};

use crate::Half;

/// On the CPU device, weights go through [`super::cpu::half_matmul`] on their host values (a copy
/// of 2 bytes a weight as a float tensor, where candle's own cast to f32 converts one value at a
/// time, 4 as patterns; the grouped defaults run it per expert with rows, so only their weights
/// are copied); elsewhere the generic forms.
impl<F: FloatCandleElement, I: IntCandleElement> crate::HalfMatmul for Candle<F, I> {
    fn half_bits_dtype() -> DType {
        DType::U32
    }

    /// On the CPU device with f32 activations, the one this project builds candle for.
    fn rounds_activations(half: Half) -> bool {
        half == Half::Bf16 && F::dtype() == DType::F32
    }

    fn half_matmul(x: FloatTensor<Self>, bits: IntTensor<Self>, half: Half) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let bits = Tensor::<Self, 2, Int>::from_primitive(bits);
        let (CandleDevice::Cpu, DType::F32) = (x.device(), x.dtype()) else {
            return super::generic::half_matmul(x, bits, half).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), bits.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let bits: Vec<u16> = bits
            .into_data()
            .convert::<u32>()
            .into_vec::<u32>()
            .expect("u32 patterns")
            .into_iter()
            .map(|b| b as u16)
            .collect();
        let out = super::cpu::half_matmul(&x, n, &bits, half, d_out, d_in);
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
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
