//! candle: on the CPU device the host kernel ([`super::cpu`]); elsewhere the generic form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};

use crate::ActivationBits;
use crate::backends::candle::{host_i8, host_scales};

/// On the CPU device [`super::cpu::q6k_matmul`] on the weight's host values, put in Q8_0's kernel
/// order per call, as for Q8_0 (candle holds i8 as bytes plus 128, in row order); the grouped
/// default runs it per expert with rows.
impl<F: FloatCandleElement, I: IntCandleElement> crate::Q6KMatmul for Candle<F, I> {
    fn q6k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<Self, 2, Int>::from_primitive);
        let (CandleDevice::Cpu, DType::F32, [DType::U8, DType::U8, DType::U8]) =
            (x.device(), x.dtype(), [values.dtype(), supers.dtype(), subs.dtype()])
        else {
            return super::generic::q6k_matmul(x, values, supers, subs, bits).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), values.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let out = super::cpu::q6k_matmul(
            &x,
            n,
            &crate::q8_matmul::cpu::q8_layout(host_i8(values.into_data()), d_out, d_in),
            &host_scales(supers.into_data()),
            &host_i8(subs.into_data()),
            d_out,
            d_in,
            bits,
        );
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}
