//! candle: on the CPU device, the plain-Rust kernels of [`crate::cpu`] on the tensor's host
//! values; on CUDA/Metal devices, the generic implementation (which stays on the device).
//!
//! burn-candle 0.21 keeps the inner `candle_core::Tensor` crate-private, so a candle `CustomOp`
//! cannot be attached to it; the values go through `TensorData` instead (a copy in and out,
//! O(n^2) against the kernel's O(n^3) for the inverse).
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; this project still targets it.

use burn::backend::Candle;
use burn::backend::candle::{CandleDevice, FloatCandleElement, IntCandleElement};
use burn::tensor::ops::{FloatTensor, FloatTensorOps, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use half::{bf16, f16};

use crate::{BlockStorage, ExpertCount, GatedDeltaRule, Half, UnitLowerInverse, cpu, generic};

impl<F: FloatCandleElement, I: IntCandleElement> ExpertCount for Candle<F, I> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let ids = Tensor::<Self, 1, Int>::from_primitive(ids);
        let device = ids.device();
        if !matches!(device, CandleDevice::Cpu) {
            return generic::expert_count(ids, num_experts).into_primitive();
        }
        let data = ids.into_data();
        let counts = match data.dtype {
            DType::I64 => cpu::expert_count(data.as_slice::<i64>().expect("i64 ids").iter().copied(), num_experts),
            _ => cpu::expert_count(data.iter::<i64>(), num_experts),
        };
        Tensor::<Self, 1, Int>::from_data(TensorData::new(counts, [num_experts]).convert::<I>(), &device)
            .into_primitive()
    }
}

impl<F: FloatCandleElement, I: IntCandleElement> UnitLowerInverse for Candle<F, I> {
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
        let (shape, device) = (a.dims(), a.device());
        let n = shape[2];
        if !matches!(device, CandleDevice::Cpu) {
            return generic::unit_lower_inverse(a).into_primitive().tensor();
        }
        let data = a.into_data();
        let inverse = match data.dtype {
            DType::F32 => TensorData::new(cpu::unit_lower_inverse(data.as_slice::<f32>().expect("f32 data"), n), shape),
            DType::F64 => TensorData::new(cpu::unit_lower_inverse(data.as_slice::<f64>().expect("f64 data"), n), shape),
            _ => {
                return generic::unit_lower_inverse(Tensor::<Self, 3>::from_data(data, &device))
                    .into_primitive()
                    .tensor();
            }
        };
        Tensor::<Self, 3>::from_data(inverse, &device).into_primitive().tensor()
    }
}

/// In bytes ([`BlockStorage::Bytes`]): burn-candle 0.21 stores u8 but no i8 or u16. On the CPU
/// device the product is [`cpu::q8_matmul`] on the weight's host values, put in the kernel's
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
            return generic::q8_matmul(x, values, scales, bits).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), values.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        // Held plus 128: flipping the top bit gives the value's two's complement byte.
        let values =
            values.into_data().into_vec::<u8>().expect("u8 values").into_iter().map(|v| (v ^ 0x80) as i8).collect();
        let out = cpu::q8_matmul(
            &x,
            n,
            &cpu::q8_layout(values, d_out, d_in),
            &host_scales(scales.into_data()),
            d_out,
            d_in,
            bits,
        );
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}

/// On the CPU device [`cpu::q4_matmul`], as for Q8_0.
impl<F: FloatCandleElement, I: IntCandleElement> crate::Q4Matmul for Candle<F, I> {
    fn q4_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: IntTensor<Self>) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let (values, scales) =
            (Tensor::<Self, 2, Int>::from_primitive(values), Tensor::<Self, 2, Int>::from_primitive(scales));
        let (CandleDevice::Cpu, DType::F32, DType::U8, DType::U8) =
            (x.device(), x.dtype(), values.dtype(), scales.dtype())
        else {
            return generic::q4_matmul(x, values, scales).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), values.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let packed = values.into_data().into_vec::<u8>().expect("u8 bytes");
        let out =
            cpu::q4_matmul(&x, n, &cpu::q4_layout(packed, d_out, d_in), &host_scales(scales.into_data()), d_out, d_in);
        Tensor::<Self, 2>::from_data(TensorData::new(out, [n, d_out]), &CandleDevice::Cpu).into_primitive().tensor()
    }
}

/// Block scales held as the bytes of their f16 bits, low first.
fn host_scales(data: TensorData) -> Vec<f16> {
    data.into_vec::<u8>()
        .expect("u8 scales")
        .chunks_exact(2)
        .map(|bytes| f16::from_le_bytes([bytes[0], bytes[1]]))
        .collect()
}

/// On the CPU device, weights held as 16-bit float tensors go through [`cpu::half_matmul`] on
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
            return generic::half_float_matmul(x, weight).into_primitive().tensor();
        };
        let ([n, d_in], [d_out, _]) = (x.dims(), weight.dims());
        let x = x.into_data().into_vec::<f32>().expect("f32 activations");
        let out = cpu::half_matmul(&x, n, &half_bits_of(weight.into_data()), half, d_out, d_in);
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

/// On the CPU device, [`cpu::delta_rule`] on the host values (f32); elsewhere the generic
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
            return crate::gated_delta_rule::chunked::<Self>(q, k, v, g, beta, state);
        }
        let float4 = |x| Tensor::<Self, 4>::from_primitive(TensorPrimitive::Float(x));
        let float3 = |x| Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(x));
        let (q, k, v, g, beta, state) = (float4(q), float4(k), float4(v), float3(g), float3(beta), float4(state));
        let ([batch, len, heads, dk], [.., dv]) = (q.dims(), v.dims());
        let host = |data: TensorData| data.into_vec::<f32>().expect("f32 values");
        let (q, k, v) = (host(q.into_data()), host(k.into_data()), host(v.into_data()));
        let (g, beta, state) = (host(g.into_data()), host(beta.into_data()), host(state.into_data()));
        let dims = cpu::delta_rule::Dims { batch, len, heads, dk, dv };
        let (out, state) = cpu::delta_rule::gated_delta_rule([&q, &k, &v, &g, &beta, &state], dims, cpu::Isa::best());
        let tensor = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::<Self, 4>::from_data(TensorData::new(values, shape), &device).into_primitive().tensor()
        };
        (tensor(out, [batch, len, heads, dv]), tensor(state, [batch, heads, dk, dv]))
    }
}

// The generic f32 products, and burn's gates, reshape (in place for a contiguous tensor) and
// conv, on candle's own kernels.
generic_forms!([F: FloatCandleElement, I: IntCandleElement] Candle<F, I>:
    crate::DenseMatmul, crate::Gating, crate::Reshape, crate::CausalConv1d,
);
