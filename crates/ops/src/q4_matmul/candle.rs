//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};

use crate::backends::candle::host_scales;

/// On the CPU device [`super::cpu::q4_matmul`], as for Q8_0.
impl<F: FloatCandleElement, I: IntCandleElement> crate::Q4Matmul for Candle<F, I> {
    fn q4_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: IntTensor<Self>) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let (values, scales) =
            (Tensor::<Self, 2, Int>::from_primitive(values), Tensor::<Self, 2, Int>::from_primitive(scales));
        let (CandleDevice::Cpu, DType::F32, DType::U8, DType::U8) =
            (x.device(), x.dtype(), values.dtype(), scales.dtype())
        else {
            return super::generic::q4_matmul(x, values, scales).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), values.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let packed = values.into_data().into_vec::<u8>().expect("u8 bytes");
        let out = super::cpu::q4_matmul(
            &x,
            n,
            &super::cpu::q4_layout(packed, d_out, d_in),
            &host_scales(scales.into_data()),
            d_out,
            d_in,
        );
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}
