//! The weight formats a model can be held in, and which parameters a format applies to.
//!
//! Which parameters a format applies to: the large projections (DeltaNet `in_proj_qkv`,
//! `in_proj_z`, `out_proj`; attention `q/k/v/o_proj`; the MLP and shared expert; the routed
//! experts) and the token tables (the embeddings and an untied output head, see
//! [`crate::token_table`]; 8-bit in `q4` too: a table's rows are the label logits themselves):
//! all but a fraction of a percent of the weights. Everything else
//! stays f32 whatever the format: the norms, the router and shared-expert gates, the DeltaNet
//! gates `in_proj_a`/`in_proj_b` (their outputs set the decay and the write strength of the
//! recurrent state), `A_log`, `dt_bias` and the conv kernel. A weight whose input width (a
//! table's hidden width) is not a whole number of blocks stays f32 in the block formats.

use std::fmt;
use std::str::FromStr;

use decider_ops::{Half, HalfMatmul, Q4_BLOCK, Q4Matmul, Q8_BLOCK, Q8Matmul, holds_half_floats};
use serde::{Deserialize, Serialize};

/// How the projection and expert weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// 32-bit floats: exact, 4 bytes a weight.
    #[default]
    F32,
    /// llama.cpp's Q8_0: 8-bit values in blocks of 32 input values with one f16 scale each,
    /// 1.0625 bytes a weight (see [`decider_ops::quantize_q8`]).
    Q8,
    /// llama.cpp's Q4_0: 4-bit values in blocks of 32 input values with one f16 scale each,
    /// 0.5625 bytes a weight, the scale chosen for the least error (see
    /// [`decider_ops::quantize_q4`]).
    Q4,
    /// IEEE half floats, 2 bytes a weight: exact for an f16 checkpoint; others are rounded to
    /// nearest, and a weight beyond f16's range (65,504) is refused at load.
    F16,
    /// bfloat16, 2 bytes a weight: exact for a bf16 checkpoint (the released ones are), so the
    /// same answers as `f32` in half its memory.
    Bf16,
}

impl WeightFormat {
    /// Every format, by its command-line name.
    pub const ALL: [(&'static str, WeightFormat); 5] = [
        ("f32", WeightFormat::F32),
        ("q8", WeightFormat::Q8),
        ("q4", WeightFormat::Q4),
        ("f16", WeightFormat::F16),
        ("bf16", WeightFormat::Bf16),
    ];

    /// The format that holds weights in `half`.
    pub fn of_half(half: Half) -> WeightFormat {
        match half {
            Half::F16 => WeightFormat::F16,
            Half::Bf16 => WeightFormat::Bf16,
        }
    }

    /// The bytes a weight of `half` takes on `device`: 2 as a float tensor of that dtype
    /// (`decider_ops::holds_half_floats`), else the size of the int its pattern is held in.
    pub fn half_bytes<B: FormatOps>(half: Half, device: &B::Device) -> usize {
        match holds_half_floats::<B>(half, device) {
            true => 2,
            false => B::half_bits_dtype().size(),
        }
    }

    /// The format a weight with `d_input` input values gets: block formats need whole blocks.
    pub fn for_input_width(self, d_input: usize) -> WeightFormat {
        match self {
            WeightFormat::Q8 if !d_input.is_multiple_of(Q8_BLOCK) => WeightFormat::F32,
            WeightFormat::Q4 if !d_input.is_multiple_of(Q4_BLOCK) => WeightFormat::F32,
            format => format,
        }
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, _) = Self::ALL.iter().find(|(_, format)| format == self).expect("every format is in ALL");
        f.write_str(name)
    }
}

impl FromStr for WeightFormat {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Self::ALL.iter().find(|(known, _)| *known == name).map(|(_, format)| *format).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(name, _)| *name).collect();
            format!("unknown weight format `{name}` (expected one of: {})", names.join(", "))
        })
    }
}

/// What the weight formats compute with: each backend's Q8_0, Q4_0 and 16-bit matmuls (and the
/// layouts a loader puts their weights in).
pub trait FormatOps: Q8Matmul + Q4Matmul + HalfMatmul {}

impl<B: Q8Matmul + Q4Matmul + HalfMatmul> FormatOps for B {}
