//! `gated_delta_rule` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{gated_delta_rule, generic};
use burn::tensor::{Tensor, TensorData};

/// Every CPU form of the delta rule's steps this CPU runs (the test says which it cannot): in
/// AVX-512 registers, the portable loops compiled for AVX2 and for the baseline, against the
/// definition.
#[cfg(feature = "cpu-kernels")]
#[test]
fn every_cpu_delta_rule_form_matches_the_definition() {
    use super::cpu::{Dims, gated_delta_rule};
    use crate::cpu::Isa;
    let mut rng = Rng(43);
    for dims in DELTA_SHAPES {
        let [batch, len, heads, dk, dv] = dims;
        let (q, k, v, g, beta, state) = delta_case(&mut rng, dims);
        let (expected_out, expected_state) = naive_delta_rule(&q, &k, &v, &g, &beta, &state, dims);
        for isa in Isa::ALL {
            if !isa.available() {
                println!("this CPU does not run {isa:?}: that form is not checked here");
                continue;
            }
            let (out, final_state) =
                gated_delta_rule([&q, &k, &v, &g, &beta, &state], Dims { batch, len, heads, dk, dv }, isa);
            check_delta_outputs(&format!("{isa:?}"), dims, &out, &expected_out, &final_state, &expected_state);
        }
    }
}

/// The gated delta rule by its definition, token by token in f64: per batch element and head,
/// `S <- S exp(g)`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`. Returns the outputs
/// `[batch, len, heads, dv]` and the final state `[batch, heads, dk, dv]`.
#[allow(clippy::too_many_arguments)]
fn naive_delta_rule(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    [batch, len, heads, dk, dv]: [usize; 5],
) -> (Vec<f64>, Vec<f64>) {
    let mut state: Vec<f64> = state.iter().map(|&x| x as f64).collect();
    let mut out = vec![0.0; batch * len * heads * dv];
    for b in 0..batch {
        for h in 0..heads {
            let s = &mut state[(b * heads + h) * dk * dv..][..dk * dv];
            for t in 0..len {
                let token = (b * len + t) * heads + h;
                let decay = (g[token] as f64).exp();
                s.iter_mut().for_each(|x| *x *= decay);
                for j in 0..dv {
                    let predicted: f64 = (0..dk).map(|i| s[i * dv + j] * k[token * dk + i] as f64).sum();
                    let delta = (v[token * dv + j] as f64 - predicted) * beta[token] as f64;
                    (0..dk).for_each(|i| s[i * dv + j] += k[token * dk + i] as f64 * delta);
                    out[token * dv + j] = (0..dk).map(|i| s[i * dv + j] * q[token * dk + i] as f64).sum();
                }
            }
        }
    }
    (out, state)
}

/// `[batch, len, heads, dk, dv]`: one of everything, several heads and batch elements, a
/// length across three 64-token chunks, no tokens, the 2B model's head width.
const DELTA_SHAPES: [[usize; 5]; 5] =
    [[1, 1, 1, 4, 3], [2, 7, 3, 8, 5], [1, 130, 2, 16, 8], [2, 0, 2, 4, 4], [1, 70, 1, 128, 128]];

/// Inputs shaped like the layer's: unit-norm keys, queries scaled by `dk^-0.5`, `beta` in `[0,
/// 1)`, log decays in `(-0.2, 0]`, and a nonzero state: `(q, k, v, g, beta, state)`.
fn delta_case(
    rng: &mut Rng,
    [batch, len, heads, dk, dv]: [usize; 5],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let tokens = batch * len * heads;
    let mut unit_rows = |scale: f32| -> Vec<f32> {
        let mut x: Vec<f32> = (0..tokens * dk).map(|_| rng.next_f32() - 0.5).collect();
        for row in x.chunks_mut(dk) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter_mut().for_each(|v| *v *= scale / norm);
        }
        x
    };
    let (q, k) = (unit_rows((dk as f32).powf(-0.5)), unit_rows(1.0));
    let v: Vec<f32> = (0..tokens * dv).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
    let g: Vec<f32> = (0..tokens).map(|_| -0.2 * rng.next_f32()).collect();
    let beta: Vec<f32> = (0..tokens).map(|_| rng.next_f32()).collect();
    let state: Vec<f32> = (0..batch * heads * dk * dv).map(|_| rng.next_f32() - 0.5).collect();
    (q, k, v, g, beta, state)
}

/// Outputs and final state within `1e-4 (1 + |expected|)` of the definition's.
fn check_delta_outputs(
    name: &str,
    dims: [usize; 5],
    out: &[f32],
    expected_out: &[f64],
    state: &[f32],
    expected_state: &[f64],
) {
    for (part, got, want) in [("out", out, expected_out), ("state", state, expected_state)] {
        assert_eq!(got.len(), want.len(), "{name} {dims:?} {part}");
        for (i, (a, e)) in got.iter().zip(want).enumerate() {
            assert!((*a as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()), "{name} {dims:?} {part}[{i}]: {a} vs {e}");
        }
    }
}

/// The backend's scan and the generic chunked form against the definition.
fn delta_rule_matches_its_definition<B: Ops>(device: &B::Device) {
    let mut rng = Rng(41);
    for dims in DELTA_SHAPES {
        let [batch, len, heads, dk, dv] = dims;
        let (q, k, v, g, beta, state) = delta_case(&mut rng, dims);
        let (expected_out, expected_state) = naive_delta_rule(&q, &k, &v, &g, &beta, &state, dims);
        let t4 = |x: &[f32], shape: [usize; 4]| Tensor::<B, 4>::from_data(TensorData::new(x.to_vec(), shape), device);
        let t3 = |x: &[f32]| Tensor::<B, 3>::from_data(TensorData::new(x.to_vec(), [batch, len, heads]), device);
        let inputs = || {
            (
                t4(&q, [batch, len, heads, dk]),
                t4(&k, [batch, len, heads, dk]),
                t4(&v, [batch, len, heads, dv]),
                t3(&g),
                t3(&beta),
                t4(&state, [batch, heads, dk, dv]),
            )
        };
        let (q_t, k_t, v_t, g_t, beta_t, state_t) = inputs();
        let kernel = gated_delta_rule(q_t, k_t, v_t, g_t, beta_t, state_t);
        let (q_t, k_t, v_t, g_t, beta_t, state_t) = inputs();
        let chunked = generic::chunked_gated_delta_rule(q_t, k_t, v_t, g_t, beta_t, state_t);
        for (name, (out, final_state)) in [("kernel", kernel), ("generic chunked", chunked)] {
            assert_eq!(out.dims(), [batch, len, heads, dv], "{name} {dims:?}");
            assert_eq!(final_state.dims(), [batch, heads, dk, dv], "{name} {dims:?}");
            let values = |x: Tensor<B, 4>| -> Vec<f32> { x.into_data().convert::<f32>().to_vec().unwrap() };
            check_delta_outputs(name, dims, &values(out), &expected_out, &values(final_state), &expected_state);
        }
    }
}

crate::test_support::backend_tests!(delta_rule_matches_its_definition);
