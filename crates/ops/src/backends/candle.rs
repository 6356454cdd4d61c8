//! What candle's kernels share. On the CPU device they run the plain-Rust kernels on the
//! tensors' host values; on CUDA/Metal devices, the generic forms (which stay on the device).
//!
//! burn-candle 0.21 keeps the inner `candle_core::Tensor` crate-private, so a candle `CustomOp`
//! cannot be attached to it; the values go through `TensorData` instead (a copy in and out).

use burn::tensor::TensorData;
use half::f16;

/// Block scales held as the bytes of their f16 bits, low first.
pub(crate) fn host_scales(data: TensorData) -> Vec<f16> {
    data.into_vec::<u8>()
        .expect("u8 scales")
        .chunks_exact(2)
        .map(|bytes| f16::from_le_bytes([bytes[0], bytes[1]]))
        .collect()
}

/// i8 values held as bytes plus 128 (burn-candle stores u8 but no i8): flipping each byte's top
/// bit gives the value's two's complement byte.
pub(crate) fn host_i8(data: TensorData) -> Vec<i8> {
    data.into_vec::<u8>().expect("u8 bytes").into_iter().map(|v| (v ^ 0x80) as i8).collect()
}
