//! The gates on the host, for the CPU backends: one parallel pass each.

use rayon::prelude::*;

/// Values a parallel task of [`sigmoid`] and [`silu`] takes.
const GATE_CHUNK: usize = 16 * 1024;

/// `1 / (1 + exp(-x))` of each value, in one parallel pass.
pub fn sigmoid(x: &[f32]) -> Vec<f32> {
    gate(x, |v| 1.0 / (1.0 + (-v).exp()))
}

/// `x / (1 + exp(-x))` (SiLU) of each value, in one parallel pass.
pub fn silu(x: &[f32]) -> Vec<f32> {
    gate(x, silu_of)
}

/// `x / (1 + exp(-x))`: one `exp`, and 0 (not NaN) where it overflows.
#[inline(always)]
pub(crate) fn silu_of(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `f` of each value, in parallel chunks, written into an output not zeroed first (a serial
/// pass on the calling thread).
fn gate(x: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = Vec::<f32>::with_capacity(x.len());
    out.spare_capacity_mut().par_chunks_mut(GATE_CHUNK).zip(x.par_chunks(GATE_CHUNK)).for_each(|(out, x)| {
        for (o, &v) in out.iter_mut().zip(x) {
            o.write(f(v));
        }
    });
    // SAFETY: the chunks cover the `x.len()` values and each chunk wrote each of its values.
    unsafe { out.set_len(x.len()) };
    out
}
