//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};

use crate::BlockStorage;
use crate::backends::candle::{host_i8, host_scales};

/// In bytes ([`BlockStorage::Bytes`]): burn-candle 0.21 stores u8 but no i8 or u16. On the CPU
/// device the product is [`super::cpu::q8_matmul`] on the weight's host values, put in the kernel's
/// order per call (the values are held in row order, which the generic form on other devices
/// reads); the grouped default runs it per expert with rows, so only their weights are copied.
impl<F: FloatCandleElement, I: IntCandleElement> crate::Q8Matmul for Candle<F, I> {
    fn block_storage() -> BlockStorage {
        BlockStorage::Bytes
    }

    fn q8_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        bits: crate::ActivationBits,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let (values, scales) =
            (Tensor::<Self, 2, Int>::from_primitive(values), Tensor::<Self, 2, Int>::from_primitive(scales));
        let (CandleDevice::Cpu, DType::F32, DType::U8, DType::U8) =
            (x.device(), x.dtype(), values.dtype(), scales.dtype())
        else {
            return super::generic::q8_matmul(x, values, scales, bits).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), values.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let values = host_i8(values.into_data());
        let out = super::cpu::q8_matmul(
            &x,
            n,
            &super::cpu::q8_layout(values, d_out, d_in),
            &host_scales(scales.into_data()),
            d_out,
            d_in,
            bits,
        );
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}
