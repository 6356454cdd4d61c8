//! Partial rotary position embedding (transformers `models/qwen3_5/modeling_qwen3_5.py`): rotate-half (NeoX) form on the first
//! `rotary_dim` channels of each head; the other channels pass through.
//!
//! Text-only input makes Qwen3.5's M-RoPE (three position rows) exactly plain 1-D RoPE, so the
//! sections are not needed here.

use burn::tensor::{Tensor, TensorData, backend::Backend};

/// The rotary frequencies of one model.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    /// `1 / theta^(2j / rotary_dim)` for `j < rotary_dim / 2`, in f32 as transformers computes it.
    inv_freq: Vec<f32>,
}

impl RotaryEmbedding {
    pub fn new(rotary_dim: usize, theta: f64) -> Self {
        let inv_freq =
            (0..rotary_dim / 2).map(|j| 1.0 / (theta as f32).powf((2 * j) as f32 / rotary_dim as f32)).collect();
        Self { inv_freq }
    }

    /// Channels rotated per head.
    pub fn rotary_dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `(cos, sin)` tables `[len, rotary_dim]` for positions `start..start + len`.
    pub fn tables<B: Backend>(&self, start: usize, len: usize, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let dim = self.rotary_dim();
        let mut cos = Vec::with_capacity(len * dim);
        let mut sin = Vec::with_capacity(len * dim);
        for position in start..start + len {
            // f32 angles like the reference, then the frequencies repeated for both halves.
            let angles: Vec<f32> = self.inv_freq.iter().map(|f| position as f32 * f).collect();
            for _ in 0..2 {
                cos.extend(angles.iter().map(|a| a.cos()));
                sin.extend(angles.iter().map(|a| a.sin()));
            }
        }
        (
            Tensor::from_data(TensorData::new(cos, [len, dim]), device),
            Tensor::from_data(TensorData::new(sin, [len, dim]), device),
        )
    }

    /// Rotates `x` `[batch, heads, len, head_dim]` by tables from [`Self::tables`].
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, cos: &Tensor<B, 2>, sin: &Tensor<B, 2>) -> Tensor<B, 4> {
        let [_, _, _, head_dim] = x.dims();
        let dim = self.rotary_dim();
        let half = dim / 2;
        let rotated = x.clone().narrow(3, 0, dim);
        let x1 = rotated.clone().narrow(3, 0, half);
        let x2 = rotated.clone().narrow(3, half, half);
        let rotate_half = Tensor::cat(vec![x2.neg(), x1], 3);
        let cos = cos.clone().unsqueeze::<4>();
        let sin = sin.clone().unsqueeze::<4>();
        let rotated = rotated * cos + rotate_half * sin;
        if dim == head_dim { rotated } else { Tensor::cat(vec![rotated, x.narrow(3, dim, head_dim - dim)], 3) }
    }
}
