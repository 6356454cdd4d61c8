//! candle: on the CPU device the token-by-token scan ([`super::cpu`]); elsewhere the generic
//! chunked form.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{DType, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::GatedDeltaRule;

/// On the CPU device, [`super::cpu::delta_rule`] on the host values (f32); elsewhere the generic
/// chunked form.
impl<F: FloatCandleElement, I: IntCandleElement> GatedDeltaRule for Candle<F, I> {
    fn gated_delta_rule(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        state: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let device = <Self as FloatTensorOps<Self>>::float_device(&q);
        if !matches!(device, CandleDevice::Cpu) || q.dtype() != DType::F32 {
            return super::chunked::<Self>(q, k, v, g, beta, state);
        }
        let float4 = |x| Tensor::<Self, 4>::from_primitive(TensorPrimitive::Float(x));
        let float3 = |x| Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(x));
        let (q, k, v, g, beta, state) = (float4(q), float4(k), float4(v), float3(g), float3(beta), float4(state));
        let ([batch, len, heads, dk], [.., dv]) = (q.dims(), v.dims());
        let host = |data: TensorData| data.into_vec::<f32>().expect("f32 values");
        let (q, k, v) = (host(q.into_data()), host(k.into_data()), host(v.into_data()));
        let (g, beta, state) = (host(g.into_data()), host(beta.into_data()), host(state.into_data()));
        let dims = super::cpu::Dims { batch, len, heads, dk, dv };
        let (out, state) = super::cpu::gated_delta_rule([&q, &k, &v, &g, &beta, &state], dims, crate::cpu::Isa::best());
        let tensor = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::<Self, 4>::from_data(TensorData::new(values, shape), &device).into_primitive().tensor()
        };
        (tensor(out, [batch, len, heads, dv]), tensor(state, [batch, heads, dk, dv]))
    }
}
