//! From label logits to probabilities (`systemone` in decider-ai 1.10.0): options beyond the question's count
//! are masked, the rest divided by the answer type's temperature and softmaxed, in f32 as the
//! reference does. The logits themselves come from [`crate::engine`], which projects the slot's
//! final-norm hidden state onto the label rows of the output head only.

/// `softmax(masked(logits) / T)[..n]` in f32: the masked columns get exactly 0, so they are
/// left out instead of written as −∞ (which GPU backends do not handle reliably).
pub fn probabilities(logits: &[f32], n_options: usize, temperature: f64) -> Vec<f32> {
    let t = temperature as f32;
    let scaled: Vec<f32> = logits[..n_options].iter().map(|&x| x / t).collect();
    let max = scaled.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = scaled.iter().map(|&x| (x - max).exp()).collect();
    let total: f32 = exp.iter().sum();
    exp.iter().map(|&e| e / total).collect()
}
