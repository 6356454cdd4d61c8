//! Matmul with weights in 16-bit floats: IEEE half (`f16`) or bfloat16 (`bf16`, the type the
//! released checkpoints are stored in).
//!
//! A weight `W [out, in]` (PyTorch's orientation, as stored in a checkpoint) is held in one of two
//! ways, chosen per device by [`holds_half_floats`]:
//! - as a float tensor of that 16-bit dtype, where the device has it (candle: f16 and bf16; wgpu:
//!   f16 where the adapter has `shader-f16`, bf16 never in burn-wgpu 0.21);
//! - else as its 16-bit patterns in an int tensor ([`half_bits`]): ndarray has no 16-bit float
//!   tensors.
//!
//! Either product reads the weight back as the exact f32 values it stands for and computes
//! `x · Wᵀ` in f32. The generic forms do not round the activations, so their result is the f32
//! path's on the rounded weight (for a bf16 checkpoint loaded as `bf16`, the f32 path's
//! exactly). The CPU backends' bf16 products read the activations rounded to bf16
//! ([`round_to_bf16`], [`HalfMatmul::rounds_activations`]): that is what lets a CPU with a bf16
//! dot multiply at twice f32's rate, and they round on every CPU, so that a decision on bf16
//! weights is the same on every host.

use burn::tensor::backend::{Backend, DTypeUsage};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Element, Int, Shape, Tensor, TensorData, TensorPrimitive};
use half::{bf16, f16};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "autodiff")]
mod autodiff;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(HalfMatmul, kernels: ndarray, candle, autodiff);

/// Which 16-bit float a weight's patterns are (bf16 by default, so that a collection of patterns
/// can start empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Half {
    /// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits; largest finite 65,504.
    F16,
    /// bfloat16: f32's 8 exponent bits, 7 mantissa bits (the released checkpoints' type).
    #[default]
    Bf16,
}

impl Half {
    /// burn's dtype of this float.
    pub const fn dtype(self) -> DType {
        match self {
            Half::F16 => DType::F16,
            Half::Bf16 => DType::BF16,
        }
    }

    /// The 16-bit float of burn's `dtype`, if it is one.
    pub const fn of_dtype(dtype: DType) -> Option<Half> {
        match dtype {
            DType::F16 => Some(Half::F16),
            DType::BF16 => Some(Half::Bf16),
            _ => None,
        }
    }

    /// Mantissa bits and exponent bias.
    const fn fields(self) -> (u32, i32) {
        match self {
            Half::F16 => (10, 15),
            Half::Bf16 => (7, 127),
        }
    }

    /// The pattern nearest to `x` (ties to even), or `None` where `x` is not finite in this type
    /// (an f32 above f16's range).
    pub fn from_f32(self, x: f32) -> Option<u16> {
        let bits = match self {
            Half::F16 => f16::from_f32(x).to_bits(),
            Half::Bf16 => bf16::from_f32(x).to_bits(),
        };
        self.is_finite(bits).then_some(bits)
    }

    /// The value pattern `bits` stands for.
    pub fn to_f32(self, bits: u16) -> f32 {
        match self {
            Half::F16 => f16::from_bits(bits).to_f32(),
            Half::Bf16 => bf16::from_bits(bits).to_f32(),
        }
    }

    /// Whether `bits` is a finite value (its exponent field is not all ones).
    pub fn is_finite(self, bits: u16) -> bool {
        let (mantissa, _) = self.fields();
        let exponent_mask = (0x7fff >> mantissa) << mantissa;
        bits & exponent_mask != exponent_mask
    }
}

/// `x · Wᵀ` with `W` in 16-bit floats.
pub trait HalfMatmul: Backend {
    /// The int dtype 16-bit patterns are held in ([`half_bits`]): the backend's own int dtype,
    /// unless the backend names a smaller one it stores and computes correctly (ndarray: u16;
    /// candle, which stores no u16: u32).
    fn half_bits_dtype() -> DType {
        <Self::IntElem as Element>::dtype()
    }

    /// Whether this backend's products with `half` weights read the activations rounded to bf16
    /// ([`round_to_bf16`]): the CPU backends' do for bf16 weights (`cpu::half_matmul`); the
    /// default, the generic forms', do not.
    fn rounds_activations(half: Half) -> bool {
        let _ = half;
        false
    }

    /// `x`: `[n, in]`; `bits`: `[out, in]` patterns of `half` in the int dtype of
    /// [`HalfMatmul::half_bits_dtype`], all finite. Returns `[n, out]`. The default reads the
    /// weight as f32 ([`half_bits_f32`]) and runs the backend's matmul.
    fn half_matmul(x: FloatTensor<Self>, bits: IntTensor<Self>, half: Half) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        generic::half_matmul(x, Tensor::from_primitive(bits), half).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each; `bits [experts, out, in]`. Returns `[rows, out]`. The default
    /// is a [`HalfMatmul::half_matmul`] per expert with rows.
    fn grouped_half_matmul(
        x: FloatTensor<Self>,
        bits: IntTensor<Self>,
        counts: IntTensor<Self>,
        half: Half,
    ) -> FloatTensor<Self> {
        generic::grouped_half_matmul::<Self>(x, bits, counts, half)
    }

    /// [`HalfMatmul::half_matmul`] with the weight `[out, in]` held as a float tensor of its
    /// 16-bit dtype ([`holds_half_floats`]). The default casts it to f32 (exact) and runs the
    /// backend's matmul.
    fn half_float_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        generic::half_float_matmul(x, Tensor::from_primitive(TensorPrimitive::Float(weight))).into_primitive().tensor()
    }

    /// The grouped form of [`HalfMatmul::half_float_matmul`], `weight [experts, out, in]`. The
    /// default is a [`HalfMatmul::half_float_matmul`] per expert with rows (so only their
    /// weights are cast).
    fn grouped_half_float_matmul(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        generic::grouped_half_float_matmul::<Self>(x, weight, counts)
    }
}

/// `x` rounded to the nearest bf16, ties to even (a NaN stays a NaN, made quiet), as its bit
/// pattern: `half::bf16::from_f32`'s rule, in a form the compiler vectorises.
#[inline(always)]
pub fn bf16_of(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    if x.is_nan() { (bits >> 16) as u16 | 0x40 } else { rounded as u16 }
}

/// The values of `x` rounded to bf16 ([`bf16_of`]), as f32: the activations a bf16 product
/// reads on the CPU backends ([`HalfMatmul::rounds_activations`]).
pub fn round_to_bf16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| f32::from_bits(u32::from(bf16_of(v)) << 16)).collect()
}

/// Whether `device` holds weights of `half` as a float tensor of that dtype (it can store it and
/// cast it to f32); else they are held as patterns ([`half_bits`]).
pub fn holds_half_floats<B: Backend>(half: Half, device: &B::Device) -> bool {
    B::dtype_usage(device, half.dtype()).contains(DTypeUsage::Storage)
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` given as 16-bit patterns of `half`.
pub fn half_matmul<B: HalfMatmul>(x: Tensor<B, 2>, bits: Tensor<B, 2, Int>, half: Half) -> Tensor<B, 2> {
    let ([_, d_in], [out, w_in]) = (x.dims(), bits.dims());
    assert!(d_in == w_in, "half_matmul: x [_, {d_in}] and the weight [{out}, {w_in}] do not match");
    Tensor::from_primitive(TensorPrimitive::Float(B::half_matmul(
        x.into_primitive().tensor(),
        bits.into_primitive(),
        half,
    )))
}

/// [`half_matmul`] grouped by expert: `x [rows, in]`, sorted by expert with `counts [experts]`
/// rows each (summing to `rows`), times each row's expert's weight of `bits [experts, out, in]`.
/// Returns `[rows, out]`.
pub fn grouped_half_matmul<B: HalfMatmul>(
    x: Tensor<B, 2>,
    bits: Tensor<B, 3, Int>,
    counts: Tensor<B, 1, Int>,
    half: Half,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, w_in], [c]) = (x.dims(), bits.dims(), counts.dims());
    assert!(
        d_in == w_in && c == experts,
        "grouped_half_matmul: x [_, {d_in}], the weights [{experts}, {out}, {w_in}] and counts [{c}] do not match"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_half_matmul(
        x.into_primitive().tensor(),
        bits.into_primitive(),
        counts.into_primitive(),
        half,
    )))
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` a float tensor of a 16-bit dtype.
pub fn half_float_matmul<B: HalfMatmul>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    let ([_, d_in], [out, w_in]) = (x.dims(), weight.dims());
    assert!(d_in == w_in, "half_float_matmul: x [_, {d_in}] and the weight [{out}, {w_in}] do not match");
    Tensor::from_primitive(TensorPrimitive::Float(B::half_float_matmul(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
    )))
}

/// [`half_float_matmul`] grouped by expert, as [`grouped_half_matmul`]: `weight [experts, out,
/// in]` a float tensor of a 16-bit dtype.
pub fn grouped_half_float_matmul<B: HalfMatmul>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 3>,
    counts: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, w_in], [c]) = (x.dims(), weight.dims(), counts.dims());
    assert!(
        d_in == w_in && c == experts,
        "grouped_half_float_matmul: x [_, {d_in}], the weights [{experts}, {out}, {w_in}] and counts [{c}] do not match"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_half_float_matmul(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        counts.into_primitive(),
    )))
}

/// 16-bit patterns of `half` as a float tensor of that dtype, on a device that
/// [`holds_half_floats`].
pub fn half_floats<B: Backend, const D: usize>(
    bits: Vec<u16>,
    half: Half,
    shape: impl Into<Shape>,
    device: &B::Device,
) -> Tensor<B, D> {
    let data = match half {
        Half::F16 => TensorData::new(bits.into_iter().map(f16::from_bits).collect(), shape),
        Half::Bf16 => TensorData::new(bits.into_iter().map(bf16::from_bits).collect(), shape),
    };
    Tensor::from_data(data, (device, half.dtype()))
}

/// 16-bit patterns `[...]` as a tensor of the backend's [`HalfMatmul::half_bits_dtype`].
pub fn half_bits<B: HalfMatmul, const D: usize>(
    bits: Vec<u16>,
    shape: impl Into<Shape>,
    device: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(bits, shape), (device, B::half_bits_dtype()))
}

/// The f32 values of finite 16-bit patterns of `half`, in tensor ops on any backend whose float
/// element is f32 (every backend here), each step exact. A pattern `b` is a sign `s = b / 32768`
/// and a magnitude `b - 32768 s` of exponent field `e` and mantissa field `m` (`M` bits, bias
/// `E`). With `t = magnitude / 2^M = e + m / 2^M`, the value is `(1 + m / 2^M) · 2^(e - E)`, or
/// `(m / 2^M) · 2^(1 - E)` when `e` is 0: both `(t - max(e, 1) + 1) · 2^(max(e, 1) - E)`. The
/// powers of two are read from a table and are normal f32 numbers (a GPU that flushes subnormals
/// reads none).
pub fn half_bits_f32<B: Backend, const D: usize>(bits: Tensor<B, D, Int>, half: Half) -> Tensor<B, D> {
    half_patterns_f32(bits.float(), half)
}

/// [`half_bits_f32`] of patterns held as floats (`0..65,536`, exact in f32).
pub(crate) fn half_patterns_f32<B: Backend, const D: usize>(bits: Tensor<B, D>, half: Half) -> Tensor<B, D> {
    let (mantissa_bits, bias) = half.fields();
    let shape = bits.shape();
    let sign = bits.clone().div_scalar(32768.0).floor();
    let t = (bits - sign.clone() * 32768.0).div_scalar((1u32 << mantissa_bits) as f32);
    let exponent = t.clone().floor().clamp_min(1.0);
    let significand = t - exponent.clone() + 1.0;
    let powers: Vec<f32> = (0..1i32 << (15 - mantissa_bits)).map(|e| 2f32.powi(e.max(1) - bias)).collect();
    let powers = Tensor::<B, 1>::from_floats(powers.as_slice(), &significand.device());
    let power = powers.select(0, exponent.int().reshape([shape.num_elements()])).reshape(shape);
    significand * power * (sign * -2.0 + 1.0)
}

/// The generic 16-bit matmuls, in burn tensor ops: [`HalfMatmul`]'s defaults.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{FloatDType, Int, Tensor, TensorPrimitive, backend::Backend};

    use super::{Half, HalfMatmul};
    use crate::dense_matmul::generic::{expert_of, per_expert};

    /// `x · Wᵀ` with the 16-bit weight read as f32 first ([`crate::half_bits_f32`]), then one float
    /// matmul.
    pub fn half_matmul<B: Backend>(x: Tensor<B, 2>, bits: Tensor<B, 2, Int>, half: Half) -> Tensor<B, 2> {
        let [out, _] = bits.dims();
        let [n, _] = x.dims();
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        x.matmul(crate::half_bits_f32(bits, half).transpose())
    }

    /// `x · Wᵀ` with the 16-bit float weight cast to f32 (exact), then one float matmul.
    pub fn half_float_matmul<B: Backend>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
        let [out, _] = weight.dims();
        let [n, _] = x.dims();
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        x.matmul(weight.cast(FloatDType::F32).transpose())
    }

    /// [`crate::grouped_half_matmul`] as a [`HalfMatmul::half_matmul`] per expert with rows.
    pub fn grouped_half_matmul<B: HalfMatmul>(
        x: FloatTensor<B>,
        bits: IntTensor<B>,
        counts: IntTensor<B>,
        half: Half,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let bits = Tensor::<B, 3, Int>::from_primitive(bits);
        let d_out = bits.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::half_matmul(x, expert_of(&bits, expert), half)
        })
        .into_primitive()
        .tensor()
    }

    /// [`crate::grouped_half_float_matmul`] as a [`HalfMatmul::half_float_matmul`] per expert with
    /// rows.
    pub fn grouped_half_float_matmul<B: HalfMatmul>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        counts: IntTensor<B>,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let weight = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(weight));
        let d_out = weight.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::half_float_matmul(x, expert_of(&weight, expert))
        })
        .into_primitive()
        .tensor()
    }
}
