//! A GGUF tensor's stored values in the format a weight is held in: blocks as they are where the
//! format is their type's (the k-quants taken apart into their parts), Q4_0 and Q5_0 widened to
//! Q8_0 exactly, Q3_K held as Q6_K exactly, floats converted as a checkpoint's are, and blocks
//! never rounded again into other blocks or 16-bit floats.

use decider_ops::{GgmlType, q5_0_values};
use half::f16;

use super::file::dequantized;
use crate::error::LoadError;
use crate::weight::WeightValues;
use crate::weight_format::WeightFormat;

/// The weight stored as `ggml_type` in `bytes` (rows of `d_in`) in `format`.
pub fn values_in(
    name: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    d_in: usize,
    format: WeightFormat,
) -> Result<WeightValues, LoadError> {
    let is_float = matches!(ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
    match (format, ggml_type) {
        (WeightFormat::F32, _) => Ok(WeightValues::F32(finite(name, dequantized(ggml_type, bytes))?)),
        (WeightFormat::F16, GgmlType::F16) | (WeightFormat::Bf16, GgmlType::Bf16) => {
            let half = format.half().expect("a 16-bit format");
            let bits: Vec<u16> = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
            let mut bad = bits.iter().enumerate().filter(|(_, b)| !half.is_finite(**b)).map(|(i, _)| i);
            match bad.next() {
                None => Ok(WeightValues::Half(half, bits)),
                Some(first) => Err(LoadError::NonFinite { name: name.to_owned(), count: 1 + bad.count(), first }),
            }
        }
        (WeightFormat::Q8, GgmlType::Q8_0) => blocks(name, ggml_type, bytes, |block, values: &mut Vec<i8>| {
            values.extend(block[2..].iter().map(|&q| q as i8));
        })
        .map(|(values, scales)| WeightValues::Q8(values, scales)),
        (WeightFormat::Q4, GgmlType::Q4_0) => {
            blocks(name, ggml_type, bytes, |block, packed: &mut Vec<u8>| packed.extend_from_slice(&block[2..]))
                .map(|(packed, scales)| WeightValues::Q4(packed, scales))
        }
        (WeightFormat::Q4K, GgmlType::Q4K) => WeightValues::from_q4_k(name, bytes),
        (WeightFormat::Q5K, GgmlType::Q5K) => WeightValues::from_q5_k(name, bytes),
        (WeightFormat::Q6K, GgmlType::Q6K) => WeightValues::from_q6_k(name, bytes),
        (WeightFormat::Q6K, GgmlType::Q3K) => WeightValues::from_q3_k(name, bytes),
        (WeightFormat::Q8, GgmlType::Q5_0) => blocks(name, ggml_type, bytes, |block, values: &mut Vec<i8>| {
            values.extend(q5_0_values(block));
        })
        .map(|(values, scales)| WeightValues::Q8(values, scales)),
        // Q4_0's values are Q8_0 values of the same scale: `q - 8` in -8..=7.
        (WeightFormat::Q8, GgmlType::Q4_0) => blocks(name, ggml_type, bytes, |block, values: &mut Vec<i8>| {
            let nibbles = &block[2..];
            values.extend(nibbles.iter().map(|&b| (b & 0x0f) as i8 - 8));
            values.extend(nibbles.iter().map(|&b| (b >> 4) as i8 - 8));
        })
        .map(|(values, scales)| WeightValues::Q8(values, scales)),
        _ if is_float => {
            let values = finite(name, dequantized(ggml_type, bytes))?;
            if let Some(half) = format.half() {
                let mut beyond =
                    values.iter().enumerate().filter(|(_, v)| half.from_f32(**v).is_none()).map(|(i, _)| i);
                if let Some(first) = beyond.next() {
                    return Err(LoadError::OutOfRange {
                        name: name.to_owned(),
                        count: 1 + beyond.count(),
                        first,
                        format,
                    });
                }
            }
            Ok(WeightValues::from_f32(values, d_in, format).expect("the values are within the format's range"))
        }
        _ => Err(LoadError::Blocks {
            name: name.to_owned(),
            reason: format!(
                "stored in {} blocks, asked for {format}: load it with `--weights auto` (each weight as stored) or `f32` ({})",
                ggml_type.name(),
                match format.half() {
                    Some(_) => "16-bit floats would round the blocks' values",
                    None => "rounding blocks into other blocks would round twice",
                }
            ),
        }),
    }
}

/// The blocks of a Q8_0, Q4_0 or Q5_0 tensor (each an f16 scale, then its values) split into their
/// values, as `take` appends a block's, and their scales, which must be finite.
fn blocks<T>(
    name: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    take: impl Fn(&[u8], &mut Vec<T>),
) -> Result<(Vec<T>, Vec<f16>), LoadError> {
    let count = bytes.len() / ggml_type.block_bytes();
    let (mut values, mut scales) = (Vec::with_capacity(count * ggml_type.block_values()), Vec::with_capacity(count));
    for (i, block) in bytes.chunks_exact(ggml_type.block_bytes()).enumerate() {
        let d = f16::from_le_bytes([block[0], block[1]]);
        if !d.is_finite() {
            return Err(LoadError::Blocks { name: name.to_owned(), reason: format!("the scale of block {i} is {d}") });
        }
        scales.push(d);
        take(block, &mut values);
    }
    Ok((values, scales))
}

/// `values`, unless one is NaN or infinite (a NaN weight would make every answer NaN).
pub fn finite(name: &str, values: Vec<f32>) -> Result<Vec<f32>, LoadError> {
    let mut bad = values.iter().enumerate().filter(|(_, v)| !v.is_finite()).map(|(i, _)| i);
    match bad.next() {
        None => Ok(values),
        Some(first) => Err(LoadError::NonFinite { name: name.to_owned(), count: 1 + bad.count(), first }),
    }
}

/// Each expert's gate rows, then its up rows: the checkpoint's fused `gate_up_proj`.
pub fn fuse_experts(gate: WeightValues, up: WeightValues, experts: usize) -> WeightValues {
    fn zip<T: Copy>(a: Vec<T>, b: Vec<T>, experts: usize) -> Vec<T> {
        let (each_a, each_b) = (a.len() / experts.max(1), b.len() / experts.max(1));
        let mut fused = Vec::with_capacity(a.len() + b.len());
        for (a, b) in a.chunks_exact(each_a.max(1)).zip(b.chunks_exact(each_b.max(1))) {
            fused.extend_from_slice(a);
            fused.extend_from_slice(b);
        }
        fused
    }
    match (gate, up) {
        (WeightValues::F32(a), WeightValues::F32(b)) => WeightValues::F32(zip(a, b, experts)),
        (WeightValues::Half(half, a), WeightValues::Half(_, b)) => WeightValues::Half(half, zip(a, b, experts)),
        (WeightValues::Q8(a, sa), WeightValues::Q8(b, sb)) => {
            WeightValues::Q8(zip(a, b, experts), zip(sa, sb, experts))
        }
        (WeightValues::Q4(a, sa), WeightValues::Q4(b, sb)) => {
            WeightValues::Q4(zip(a, b, experts), zip(sa, sb, experts))
        }
        (WeightValues::Q4K(a, da, sa), WeightValues::Q4K(b, db, sb)) => {
            WeightValues::Q4K(zip(a, b, experts), zip(da, db, experts), zip(sa, sb, experts))
        }
        (WeightValues::Q5K(a, da, sa), WeightValues::Q5K(b, db, sb)) => {
            WeightValues::Q5K(zip(a, b, experts), zip(da, db, experts), zip(sa, sb, experts))
        }
        (WeightValues::Q6K(a, da, sa), WeightValues::Q6K(b, db, sb)) => {
            WeightValues::Q6K(zip(a, b, experts), zip(da, db, experts), zip(sa, sb, experts))
        }
        _ => unreachable!("the parts of a weight are read in one format"),
    }
}
