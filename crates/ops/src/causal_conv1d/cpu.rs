//! The causal depthwise conv and its SiLU ([`crate::CausalConv1d`]) in one parallel pass over
//! tokens: each output row reads its `K` window rows (from the history or from `x`) in place.

use rayon::prelude::*;

/// Output tokens a parallel task takes (a decider-2b row is 6,144 channels).
const TOKENS: usize = 8;

/// `x [batch, len, channels]`, `history [batch, K - 1, channels]`, `weight [channels, K]`, all
/// row-major; returns `silu` of the conv `[batch, len, channels]` and the window's last `K - 1`
/// rows `[batch, K - 1, channels]`, as [`crate::CausalConv1d::causal_conv1d`].
///
/// # Panics
/// If the slices do not match the shapes.
pub fn causal_conv1d(
    x: &[f32],
    history: &[f32],
    weight: &[f32],
    batch: usize,
    channels: usize,
    kernel: usize,
) -> (Vec<f32>, Vec<f32>) {
    let past = kernel - 1;
    assert!(
        kernel >= 1
            && channels > 0
            && x.len().is_multiple_of((batch * channels).max(1))
            && history.len() == batch * past * channels
            && weight.len() == channels * kernel,
        "causal_conv1d: {} inputs, {} history values and {} weights do not match batch {batch}, {channels} channels, K = {kernel}",
        x.len(),
        history.len(),
        weight.len()
    );
    let len = if batch == 0 { 0 } else { x.len() / (batch * channels) };
    // Row `i` of a batch element's window: history row `i`, then x row `i - (K - 1)`.
    let window = |b: usize, i: usize| -> &[f32] {
        let (values, row) = if i < past { (history, b * past + i) } else { (x, b * len + i - past) };
        &values[row * channels..(row + 1) * channels]
    };
    // Tap-major, so that each tap's weights are contiguous across channels like the rows.
    let taps: Vec<f32> = (0..kernel).flat_map(|j| (0..channels).map(move |c| weight[c * kernel + j])).collect();

    let mut out = Vec::<f32>::with_capacity(batch * len * channels);
    out.spare_capacity_mut().par_chunks_mut(TOKENS * channels).enumerate().for_each(|(chunk, rows)| {
        let mut sum = vec![0f32; channels];
        for (r, row) in rows.chunks_exact_mut(channels).enumerate() {
            let (b, t) = ((chunk * TOKENS + r) / len, (chunk * TOKENS + r) % len);
            sum.fill(0.0);
            for (j, tap) in taps.chunks_exact(channels).enumerate() {
                for ((s, &w), &v) in sum.iter_mut().zip(tap).zip(window(b, t + j)) {
                    *s += w * v;
                }
            }
            for (o, &s) in row.iter_mut().zip(&sum) {
                o.write(crate::gating::cpu::silu_of(s));
            }
        }
    });
    // SAFETY: the chunks cover all `batch × len` rows, and each row wrote each of its channels.
    unsafe { out.set_len(batch * len * channels) };

    let state = (0..batch).flat_map(|b| (len..len + past).flat_map(move |i| window(b, i).iter().copied())).collect();
    (out, state)
}
