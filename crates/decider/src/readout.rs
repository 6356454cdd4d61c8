//! From label logits to probabilities (`systemone` in decider-ai 1.10.0): options beyond the question's count
//! are masked, the rest divided by the answer type's temperature and softmaxed, in f32 as the
//! reference does. The logits themselves come from [`crate::engine`], which projects the slot's
//! final-norm hidden state onto the label rows of the output head only.

/// `softmax(masked(logits) / T)[..n]` in f32: the masked columns get exactly 0, so they are
/// left out instead of written as −∞ (which GPU backends do not handle reliably). The logits
/// must be finite.
pub fn probabilities(logits: &[f32], n_options: usize, temperature: f64) -> Vec<f32> {
    // A temperature below f32's smallest normal acts as that one (the answer is one-hot either way).
    let t = (temperature as f32).max(f32::MIN_POSITIVE);
    let logits = &logits[..n_options];
    let mut scaled: Vec<f32> = logits.iter().map(|&x| x / t).collect();
    if scaled.iter().any(|x| x.is_infinite()) {
        // A tiny temperature overflows x / T. The same softmax with the largest logit taken off
        // first keeps every exponent at or below 0.
        let top = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        scaled = logits.iter().map(|&x| (x - top) / t).collect();
    }
    let max = scaled.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = scaled.iter().map(|&x| (x - max).exp()).collect();
    let total: f32 = exp.iter().sum();
    exp.iter().map(|&e| e / total).collect()
}

#[cfg(test)]
mod tests {
    use super::probabilities;

    #[test]
    fn a_tiny_temperature_gives_the_argmax_not_nan() {
        let logits = [3.0, 30.0, -2.0, 29.5];
        for temperature in [1e-3, 1e-30, 1e-40, 1e-300, f64::MIN_POSITIVE] {
            let p = probabilities(&logits, 4, temperature);
            assert_eq!(p, [0.0, 1.0, 0.0, 0.0], "T = {temperature}");
        }
        // Ties share the mass.
        assert_eq!(probabilities(&[5.0, 5.0, 1.0], 3, 1e-40), [0.5, 0.5, 0.0]);
    }

    #[test]
    fn softmax_over_the_first_n_logits() {
        let p = probabilities(&[0.0, 2f32.ln(), 100.0], 2, 1.0);
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-6 && (p[1] - 2.0 / 3.0).abs() < 1e-6, "{p:?}");
    }
}
