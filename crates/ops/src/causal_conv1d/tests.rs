//! `causal_conv1d` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::causal_conv1d;
use crate::test_support::*;
use burn::tensor::{Tensor, TensorData};

/// `(batch, len, channels, K)`: no tokens, one token after a history (decoding), fewer tokens
/// than the history (the new history mixes both), several parallel tasks with a partial last one,
/// no history at all (`K = 1`).
const CONV_SHAPES: [(usize, usize, usize, usize); 5] =
    [(1, 0, 5, 4), (1, 1, 3, 4), (2, 2, 7, 4), (2, 37, 100, 4), (2, 9, 16, 1)];

/// The causal conv against its definition in f64: `silu(Σ_j window[t + j] w[:, j])` over the
/// window `history ++ x`, and the window's last `K - 1` rows, exactly.
fn causal_conv1d_matches_its_definition<B: Ops>(device: &B::Device) {
    let mut rng = Rng(61);
    for (batch, len, channels, kernel) in CONV_SHAPES {
        let past = kernel - 1;
        let mut values = |count: usize| -> Vec<f32> { (0..count).map(|_| 2.0 * rng.next_f32() - 1.0).collect() };
        let (x, history, weight) =
            (values(batch * len * channels), values(batch * past * channels), values(channels * kernel));
        let window = |b: usize, i: usize, c: usize| {
            if i < past { history[(b * past + i) * channels + c] } else { x[(b * len + i - past) * channels + c] }
        };
        let tensor3 = |v: &[f32], rows: usize| {
            Tensor::<B, 3>::from_data(TensorData::new(v.to_vec(), [batch, rows, channels]), device)
        };
        let weight_t = Tensor::<B, 2>::from_data(TensorData::new(weight.clone(), [channels, kernel]), device);
        let (out, state) = causal_conv1d(tensor3(&x, len), tensor3(&history, past), weight_t);
        let case = format!("batch {batch}, len {len}, {channels} channels, K = {kernel}");
        assert_eq!(out.dims(), [batch, len, channels], "{case}");
        assert_eq!(state.dims(), [batch, past, channels], "{case}");
        let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
        for b in 0..batch {
            for t in 0..len {
                for c in 0..channels {
                    let terms = (0..kernel).map(|j| weight[c * kernel + j] as f64 * window(b, t + j, c) as f64);
                    let (sum, size) = terms.fold((0.0, 0.0), |(s, m), v| (s + v, m + v.abs()));
                    let e = sum / (1.0 + (-sum).exp());
                    let got = out[(b * len + t) * channels + c] as f64;
                    assert!((got - e).abs() <= 1e-5 * (size + e.abs()), "{case}: out [{b}, {t}, {c}]: {got} vs {e}");
                }
            }
        }
        let expected: Vec<f32> = (0..batch)
            .flat_map(|b| (len..len + past).flat_map(move |i| (0..channels).map(move |c| (b, i, c))))
            .map(|(b, i, c)| window(b, i, c))
            .collect();
        assert_eq!(state.into_data().convert::<f32>().to_vec::<f32>().unwrap(), expected, "{case}: the new history");
    }
}

crate::test_support::backend_tests!(causal_conv1d_matches_its_definition);
