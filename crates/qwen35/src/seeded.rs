//! Seeded random weights as a [`TensorSource`]: the same model on every backend and platform,
//! for offline demos and for speed and memory measurements at real widths without a checkpoint.

use std::cell::Cell;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::LoadError;
use crate::loader::TensorSource;
use crate::weight::{WeightValues, stack_dims};
use crate::weight_format::{WeightFormat, WeightUse};

/// Uniform values, each tensor from its own ChaCha8 stream of one seed, the streams taken in the
/// order the tensors are read: a weight read by a matmul `[..., out, in]` in ±1/√in, a table `[rows, width]` in ±1/√rows, a vector in ±0.5, any
/// other tensor in ±1/√(its first dimension). A weight in another format is the rounding of the
/// f32 weight the same stream gives ([`WeightValues::from_f32`]).
pub struct SeededSource {
    seed: u64,
    next_stream: Cell<u64>,
}

impl SeededSource {
    pub fn new(seed: u64) -> Self {
        Self { seed, next_stream: Cell::new(0) }
    }

    /// `count` values in ±`bound` from the next stream.
    fn draw(&self, count: usize, bound: f32) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(self.next_stream.get());
        self.next_stream.set(self.next_stream.get() + 1);
        (0..count).map(|_| rng.random_range(-bound..bound)).collect()
    }
}

impl TensorSource for SeededSource {
    fn text_prefix(&self) -> &str {
        "model"
    }

    fn f32(&self, _name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let bound = match *shape {
            [_] => 0.5,
            [rows, ..] => 1.0 / (rows as f32).sqrt(),
            [] => 0.5,
        };
        Ok(self.draw(shape.iter().product(), bound))
    }

    fn weight(
        &self,
        _name: &str,
        dims: &[usize],
        format: WeightFormat,
        usage: WeightUse,
    ) -> Result<WeightValues, LoadError> {
        let (batch, d_out, d_in) = stack_dims(dims);
        // Drawn in the order a checkpoint stores the weight, which the weight holds as it needs.
        let bound = match usage {
            WeightUse::Matmul(_) => 1.0 / (d_in as f32).sqrt(),
            WeightUse::Rows => 1.0 / (d_out as f32).sqrt(),
        };
        let values = self.draw(batch * d_out * d_in, bound);
        Ok(WeightValues::from_f32(values, d_in, format).expect("values within ±1 are in every format's range"))
    }
}
