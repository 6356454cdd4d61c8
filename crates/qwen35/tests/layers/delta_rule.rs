//! The delta rule's scan equals the token-by-token recurrence in tensor ops (algebraically
//! identical; transformers' own kernels agree to < 1e-6), across chunk boundaries, with grouped
//! value heads, and with an initial state; and splitting a sequence in two calls with the state
//! carried over equals one call. Both scans: ndarray's token-by-token kernel, and the generic
//! chunked form (which `Autodiff<NdArray>` runs).

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, ElementConversion, Tensor};
use qwen35::Qwen35Ops;
use qwen35::delta_rule::{gated_delta_rule, recurrent_gated_delta_rule};

struct Inputs<B: Qwen35Ops> {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    g: Tensor<B, 3>,
    beta: Tensor<B, 3>,
    state: Tensor<B, 4>,
}

fn inputs<B: Qwen35Ops>(len: usize, key_heads: usize, value_heads: usize) -> Inputs<B> {
    let device = Default::default();
    let (batch, dk, dv) = (2, 16, 8);
    let normal = Distribution::Normal(0.0, 1.0);
    Inputs {
        q: Tensor::random([batch, len, key_heads, dk], normal, &device),
        k: Tensor::random([batch, len, key_heads, dk], normal, &device),
        v: Tensor::random([batch, len, value_heads, dv], normal, &device),
        // Log decays in [-1, 0): strong enough that chunk-level cumulative decays span e^-64.
        g: Tensor::random([batch, len, value_heads], Distribution::Uniform(-1.0, 0.0), &device),
        beta: Tensor::random([batch, len, value_heads], Distribution::Uniform(0.0, 1.0), &device),
        state: Tensor::random([batch, value_heads, dk, dv], normal, &device),
    }
}

/// max |a - b| / max(1, max |b|).
fn relative_error<B: Qwen35Ops, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f32 {
    let scale = b.clone().abs().max().into_scalar().elem::<f32>().max(1.0);
    (a - b).abs().max().into_scalar().elem::<f32>() / scale
}

fn check_scan_equals_recurrent<B: Qwen35Ops>() {
    for len in [1, 7, 63, 64, 65, 130, 200] {
        for (key_heads, value_heads) in [(2, 2), (2, 4)] {
            for with_state in [false, true] {
                let x = inputs::<B>(len, key_heads, value_heads);
                let initial = with_state.then(|| x.state.clone());
                let (out_c, state_c) = gated_delta_rule(
                    x.q.clone(),
                    x.k.clone(),
                    x.v.clone(),
                    x.g.clone(),
                    x.beta.clone(),
                    initial.clone(),
                );
                let (out_r, state_r) = recurrent_gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, initial);
                assert_eq!(out_c.dims(), [2, len, value_heads, 8]);
                let (e_out, e_state) = (relative_error(out_c, out_r), relative_error(state_c, state_r));
                let case = format!("len {len}, heads {key_heads}/{value_heads}, initial state {with_state}");
                assert!(e_out <= 1e-5, "{case}: output differs by {e_out}");
                assert!(e_state <= 1e-5, "{case}: state differs by {e_state}");
            }
        }
    }
}

fn check_two_calls_equal_one<B: Qwen35Ops>() {
    let x = inputs::<B>(150, 2, 4);
    let (full, full_state) = gated_delta_rule(x.q.clone(), x.k.clone(), x.v.clone(), x.g.clone(), x.beta.clone(), None);
    let split = 70;
    let part = |t: &Tensor<B, 4>, s: usize, n: usize| t.clone().narrow(1, s, n);
    let part3 = |t: &Tensor<B, 3>, s: usize, n: usize| t.clone().narrow(1, s, n);
    let (first, state) = gated_delta_rule(
        part(&x.q, 0, split),
        part(&x.k, 0, split),
        part(&x.v, 0, split),
        part3(&x.g, 0, split),
        part3(&x.beta, 0, split),
        None,
    );
    let rest = 150 - split;
    let (second, final_state) = gated_delta_rule(
        part(&x.q, split, rest),
        part(&x.k, split, rest),
        part(&x.v, split, rest),
        part3(&x.g, split, rest),
        part3(&x.beta, split, rest),
        Some(state),
    );
    let joined = Tensor::cat(vec![first, second], 1);
    assert!(relative_error(joined, full) <= 1e-5);
    assert!(relative_error(final_state, full_state) <= 1e-5);
}

#[test]
fn token_by_token_kernel_equals_recurrent() {
    check_scan_equals_recurrent::<NdArray>();
}

#[test]
fn chunked_form_equals_recurrent() {
    check_scan_equals_recurrent::<Autodiff<NdArray>>();
}

#[test]
fn two_calls_with_carried_state_equal_one_call() {
    check_two_calls_equal_one::<NdArray>();
    check_two_calls_equal_one::<Autodiff<NdArray>>();
}
