//! The gated delta rule (its chunked form, which `Autodiff` runs) is differentiable (through the triangular inverse's own
//! backward) and its gradients equal central finite differences.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Tensor, TensorData};
use qwen35::delta_rule::gated_delta_rule;

type B = Autodiff<NdArray>;

#[derive(Clone)]
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
}

const LEN: usize = 70; // crosses a 64-token chunk
const KEY_HEADS: usize = 1;
const VALUE_HEADS: usize = 2;
const DK: usize = 4;
const DV: usize = 3;

fn random(n: usize, distribution: Distribution) -> Vec<f32> {
    Tensor::<NdArray, 1>::random([n], distribution, &Default::default()).into_data().to_vec().unwrap()
}

/// `sum(out * weights)` and the input tensors (tracked).
fn run(x: &Inputs, weights: &Tensor<B, 4>) -> (Tensor<B, 1>, [Tensor<B, 4>; 3], [Tensor<B, 3>; 2]) {
    let device = Default::default();
    let t4 = |v: &Vec<f32>, heads, d| {
        Tensor::<B, 4>::from_data(TensorData::new(v.clone(), [1, LEN, heads, d]), &device).require_grad()
    };
    let t3 = |v: &Vec<f32>| {
        Tensor::<B, 3>::from_data(TensorData::new(v.clone(), [1, LEN, VALUE_HEADS]), &device).require_grad()
    };
    let (q, k, v) = (t4(&x.q, KEY_HEADS, DK), t4(&x.k, KEY_HEADS, DK), t4(&x.v, VALUE_HEADS, DV));
    let (g, beta) = (t3(&x.g), t3(&x.beta));
    let (out, _) = gated_delta_rule(q.clone(), k.clone(), v.clone(), g.clone(), beta.clone(), None);
    ((out * weights.clone()).sum(), [q, k, v], [g, beta])
}

#[test]
fn delta_rule_gradients_match_finite_differences() {
    let normal = Distribution::Normal(0.0, 1.0);
    let x = Inputs {
        q: random(LEN * KEY_HEADS * DK, normal),
        k: random(LEN * KEY_HEADS * DK, normal),
        v: random(LEN * VALUE_HEADS * DV, normal),
        g: random(LEN * VALUE_HEADS, Distribution::Uniform(-0.5, -0.05)),
        beta: random(LEN * VALUE_HEADS, Distribution::Uniform(0.1, 0.9)),
    };
    let weights = Tensor::<B, 4>::random([1, LEN, VALUE_HEADS, DV], normal, &Default::default());
    let (loss, [q, k, v], [g, beta]) = run(&x, &weights);
    let grads = loss.backward();
    let analytic = |t: Vec<f32>| t;
    let grad4 = |t: &Tensor<B, 4>| analytic(t.grad(&grads).unwrap().into_data().to_vec().unwrap());
    let grad3 = |t: &Tensor<B, 3>| analytic(t.grad(&grads).unwrap().into_data().to_vec().unwrap());
    let cases: [(&str, Vec<f32>, fn(&mut Inputs) -> &mut Vec<f32>); 5] = [
        ("q", grad4(&q), |x| &mut x.q),
        ("k", grad4(&k), |x| &mut x.k),
        ("v", grad4(&v), |x| &mut x.v),
        ("g", grad3(&g), |x| &mut x.g),
        ("beta", grad3(&beta), |x| &mut x.beta),
    ];
    let eps = 1e-2f32;
    for (name, analytic, field) in cases {
        // Entries in the first chunk, at the boundary and in the second chunk.
        let n = analytic.len();
        for k in [0, n / 3, n * 62 / 70, n * 65 / 70, n - 1] {
            let shifted = |delta: f32| {
                let mut shifted = x.clone();
                field(&mut shifted)[k] += delta;
                run(&shifted, &weights).0.into_scalar() as f64
            };
            let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * eps as f64);
            let diff = (analytic[k] as f64 - numeric).abs();
            assert!(
                diff <= 2e-2 * numeric.abs().max(1.0),
                "d/d{name}[{k}]: analytic {} vs numeric {numeric}",
                analytic[k]
            );
        }
    }
}
