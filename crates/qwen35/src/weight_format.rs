//! The weight formats a model can be held in, and the one policy that says which format each
//! weight of a model gets ([`held_format`]).
//!
//! The policy, as llama.cpp and mlx-lm quantize: the large matrices take the format asked for
//! (DeltaNet `in_proj_qkv`, `in_proj_z`, `out_proj`; attention `q/k/v/o_proj`; the MLP, shared
//! expert and routed experts; the token tables), all but a fraction of a percent of the weights.
//! The gates stay f32 whatever the format: the MoE router (`mlp.gate`) and the shared expert's
//! gate, and the DeltaNet's `in_proj_a`/`in_proj_b` (their outputs set the decay and the write
//! strength of the recurrent state). A token table asked for in `q4` or `q4_k` is held in `q8`:
//! its rows are the label logits themselves. A weight whose input width is not a whole number of
//! blocks takes the next format whose blocks fit: `q4_k` (super-blocks of 256) then `q4` (blocks
//! of 32), `q8` and `q4` then f32. Everything that is not a matrix (norms, `A_log`, `dt_bias`,
//! the conv kernel) is f32 and is not a [`crate::weight::Weight`] at all.
//!
//! A GGUF file loaded with `auto` holds each weight in its stored type's format where the policy
//! gives that format, or one that holds its values exactly (Q4_0 as Q8_0), a token table stored
//! in Q4_K in Q4_K, and in f32 elsewhere ([`held_as_stored`]): blocks are never rounded into
//! other blocks.

use std::fmt;
use std::str::FromStr;

use decider_ops::ggml_type::QK_K;
use decider_ops::{
    ActivationBits, Half, HalfMatmul, Q4_BLOCK, Q4KMatmul, Q4Matmul, Q5KMatmul, Q6KMatmul, Q8_BLOCK, Q8Matmul,
    holds_half_floats,
};
use serde::{Deserialize, Serialize};

/// How the projections, experts and token tables are held in memory.
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
    /// llama.cpp's Q4_K: 4-bit values in super-blocks of 256 with a 6-bit scale and min a block
    /// of 32, held in 0.58 bytes a weight (see [`decider_ops::q4k_matmul`]): a GGUF file's blocks
    /// as stored, or quantized as llama.cpp does ([`decider_ops::quantize_q4_k`]).
    #[serde(rename = "q4_k")]
    Q4K,
    /// llama.cpp's Q6_K, a GGUF file's blocks as stored: 6-bit values in super-blocks of 256 with
    /// an 8-bit scale a block of 16, held in 1.07 bytes a weight (see
    /// [`decider_ops::q6k_matmul`]). Held only from a GGUF file (`auto`): nothing is quantized to
    /// it.
    #[serde(rename = "q6_k")]
    Q6K,
    /// llama.cpp's Q5_K, a GGUF file's blocks as stored: Q4_K with a fifth bit a value, held in
    /// 1.08 bytes a weight (see [`decider_ops::q5k_matmul`]). Held only from a GGUF file
    /// (`auto`): nothing is quantized to it.
    #[serde(rename = "q5_k")]
    Q5K,
}

impl WeightFormat {
    /// Every format a load can be asked for, by its command-line name (Q5_K and Q6_K are held
    /// only as a GGUF file stores them, with `auto`).
    pub const ALL: [(&'static str, WeightFormat); 6] = [
        ("f32", WeightFormat::F32),
        ("q8", WeightFormat::Q8),
        ("q4", WeightFormat::Q4),
        ("f16", WeightFormat::F16),
        ("bf16", WeightFormat::Bf16),
        ("q4_k", WeightFormat::Q4K),
    ];

    /// llama.cpp's names of the formats whose blocks are its own (what its users type), read as
    /// ours.
    pub const LLAMA_CPP_NAMES: [(&'static str, WeightFormat); 2] =
        [("q8_0", WeightFormat::Q8), ("q4_0", WeightFormat::Q4)];

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

    /// The 16-bit float of a 16-bit format.
    pub fn half(self) -> Option<Half> {
        match self {
            WeightFormat::F16 => Some(Half::F16),
            WeightFormat::Bf16 => Some(Half::Bf16),
            WeightFormat::F32
            | WeightFormat::Q8
            | WeightFormat::Q4
            | WeightFormat::Q4K
            | WeightFormat::Q5K
            | WeightFormat::Q6K => None,
        }
    }

    /// Its name: the command-line name of [`WeightFormat::ALL`], llama.cpp's for Q5_K and Q6_K.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Q5K => "q5_k",
            WeightFormat::Q6K => "q6_k",
            _ => Self::ALL
                .iter()
                .find(|(_, format)| *format == self)
                .map(|(name, _)| *name)
                .expect("every other format is in ALL"),
        }
    }
}

/// What a projection's input is: it sets how finely a Q8_0 weight's integer dot rounds that input
/// ([`ActivationBits`], whose doc gives the measured effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectionInput {
    /// An RMSNorm's output (the layer's `input_layernorm` or `post_attention_layernorm`): values
    /// of one size, rounded to 8 bits, as llama.cpp does.
    Normed,
    /// A product of activations (`silu(gate) · up`, attention's output times its gate, the
    /// DeltaNet's gated norm): a few values far above the rest, rounded to 16 bits.
    Product,
}

impl ProjectionInput {
    /// The integers a Q8_0 weight's integer dot rounds this input to.
    pub fn activation_bits(self) -> ActivationBits {
        match self {
            ProjectionInput::Normed => ActivationBits::Eight,
            ProjectionInput::Product => ActivationBits::Sixteen,
        }
    }
}

/// How a weight is read, which sets the layout it is held in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightUse {
    /// Multiplied by inputs of this kind (`x · Wᵀ`: projections and experts): held as the
    /// matmul kernels read it (f32 `[..., in, out]`, blocks in the backend's kernel layout).
    Matmul(ProjectionInput),
    /// Read a row at a time by token (the embeddings, the output head): held in row order
    /// `[rows, width]`, and widened to f32 a row at a time when read.
    Rows,
}

/// Matrices that stay f32 in every format, by their module's name in the checkpoint.
pub const GATES: [&str; 4] = ["in_proj_a", "in_proj_b", "gate", "shared_expert_gate"];

/// The format the weight `name` (its checkpoint name) of `dims` (`[..., out, in]`), read as
/// `usage`, is held in when the model is loaded in `requested`: the policy in this file's doc.
pub fn held_format(requested: WeightFormat, name: &str, dims: &[usize], usage: WeightUse) -> WeightFormat {
    let module = name.strip_suffix(".weight").unwrap_or(name);
    let module = module.rsplit('.').next().unwrap_or(module);
    let d_in = dims.last().copied().unwrap_or(0);
    match requested {
        _ if GATES.contains(&module) => WeightFormat::F32,
        WeightFormat::Q4 | WeightFormat::Q4K if usage == WeightUse::Rows => {
            held_format(WeightFormat::Q8, name, dims, usage)
        }
        WeightFormat::Q8 if !d_in.is_multiple_of(Q8_BLOCK) => WeightFormat::F32,
        WeightFormat::Q4 if !d_in.is_multiple_of(Q4_BLOCK) => WeightFormat::F32,
        WeightFormat::Q4K if !d_in.is_multiple_of(QK_K) => held_format(WeightFormat::Q4, name, dims, usage),
        WeightFormat::Q5K | WeightFormat::Q6K if !d_in.is_multiple_of(QK_K) => WeightFormat::F32,
        format => format,
    }
}

/// The format a weight stored in `stored` (a GGUF tensor's type, with each weight held as
/// stored) is held in: the policy's ([`held_format`]) where that holds the stored values exactly
/// (the stored format itself, f32, or Q8_0 for Q4_0's values), Q4_K for a token table stored in
/// Q4_K, else f32.
pub fn held_as_stored(stored: WeightFormat, name: &str, dims: &[usize], usage: WeightUse) -> WeightFormat {
    match held_format(stored, name, dims, usage) {
        format if format == stored || (format, stored) == (WeightFormat::Q8, WeightFormat::Q4) => format,
        // A table asked for in Q4_K is quantized to 8 bits, for accuracy; stored in Q4_K, its
        // own values are held (exact, and an eighth of f32's bytes).
        WeightFormat::Q8 if stored == WeightFormat::Q4K && usage == WeightUse::Rows => stored,
        _ => WeightFormat::F32,
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WeightFormat {
    type Err = String;

    /// A name of [`WeightFormat::ALL`] or [`WeightFormat::LLAMA_CPP_NAMES`], in any case.
    fn from_str(name: &str) -> Result<Self, String> {
        let known = Self::ALL.iter().chain(&Self::LLAMA_CPP_NAMES);
        known.clone().find(|(known, _)| known.eq_ignore_ascii_case(name)).map(|(_, format)| *format).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(name, _)| *name).collect();
            format!("unknown weight format `{name}` (expected one of: {})", names.join(", "))
        })
    }
}

/// What the weight formats compute with: each backend's Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and 16-bit
/// matmuls (and the layouts a loader puts their weights in).
pub trait FormatOps: Q8Matmul + Q4Matmul + Q4KMatmul + Q5KMatmul + Q6KMatmul + HalfMatmul {}

impl<B: Q8Matmul + Q4Matmul + Q4KMatmul + Q5KMatmul + Q6KMatmul + HalfMatmul> FormatOps for B {}
