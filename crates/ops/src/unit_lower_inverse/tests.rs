//! `unit_lower_inverse` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{generic, reference, unit_lower_inverse};
use burn::tensor::{Tensor, TensorData};

/// Forward substitution `X = (I + L)^-1`, entry by entry, in f64.
fn naive_inverse(a: &[f32], n: usize) -> Vec<f64> {
    let mut x = vec![0.0f64; n * n];
    for i in 0..n {
        x[i * n + i] = 1.0;
        for j in 0..i {
            let s: f64 = (j..i).map(|m| a[i * n + m] as f64 * x[m * n + j]).sum();
            x[i * n + j] = -s;
        }
    }
    x
}

/// Matrices built like the delta rule's systems: `(beta k) k^T * decay`, strictly lower, with
/// unit-norm, strongly aligned keys, so the entries are close to 1.
fn delta_rule_like(rng: &mut Rng, n: usize) -> Vec<f32> {
    let d = 16;
    let keys: Vec<Vec<f32>> = (0..n)
        .map(|_| {
            let base: Vec<f32> = (0..d).map(|c| if c == 0 { 4.0 } else { rng.next_f32() - 0.5 }).collect();
            let norm = base.iter().map(|v| v * v).sum::<f32>().sqrt();
            base.iter().map(|v| v / norm).collect()
        })
        .collect();
    let beta: Vec<f32> = (0..n).map(|_| 0.5 + 0.5 * rng.next_f32()).collect();
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..i {
            let dot: f32 = keys[i].iter().zip(&keys[j]).map(|(x, y)| x * y).sum();
            a[i * n + j] = beta[i] * dot * (-0.001 * (i - j) as f32).exp();
        }
    }
    a
}

fn inverse_cases() -> Vec<(&'static str, usize, Vec<Vec<f32>>, f64)> {
    let mut rng = Rng(11);
    let mut cases = vec![("n = 1", 1, vec![vec![0.7], vec![-3.0]], 0.0)];
    for n in [2, 3, 5, 17, 64] {
        let random = (0..3).map(|_| (0..n * n).map(|_| rng.next_f32() - 0.5).collect()).collect();
        cases.push(("random", n, random, 1e-5));
    }
    // Entries near 1, as in real delta-rule chunks (32 heads x 2 chunks): the inverse grows.
    cases.push(("delta-rule-like n = 64", 64, (0..64).map(|_| delta_rule_like(&mut rng, 64)).collect(), 1e-4));
    cases
}

/// `with_by_rows`: also hold the naive per-row tensor-op baseline to the loops. It is off on
/// wgpu, where burn-wgpu 0.21 computes that chain of small ops wrongly from row 32 on (an
/// upstream bug this suite found; the kernel and the generic implementation are right there).
fn check_inverses<B: Ops>(device: &B::Device, with_by_rows: bool) {
    for (case, n, matrices, tolerance) in inverse_cases() {
        let flat: Vec<f32> = matrices.iter().flatten().copied().collect();
        let a = Tensor::<B, 3>::from_data(TensorData::new(flat, [matrices.len(), n, n]), device);
        let mut implementations =
            vec![("kernel", unit_lower_inverse(a.clone())), ("generic", generic::unit_lower_inverse(a.clone()))];
        if with_by_rows {
            implementations.push(("by rows", reference::unit_lower_inverse_by_rows(a.clone())));
        }
        for (name, x) in implementations {
            let x: Vec<f32> = x.into_data().convert::<f32>().to_vec().unwrap();
            for (b, m) in matrices.iter().enumerate() {
                for (k, e) in naive_inverse(m, n).iter().enumerate() {
                    let got = x[b * n * n + k] as f64;
                    assert!(
                        (got - e).abs() <= tolerance * e.abs().max(1.0),
                        "{name}, {case}, matrix {b} entry {k}: {got} vs {e}"
                    );
                }
            }
        }
    }
}

fn inverse_reads_only_the_strictly_lower_part<B: Ops>(device: &B::Device) {
    let lower = [0.0, 0.0, 0.0, 0.5, 0.0, 0.0, -1.0, 2.0, 0.0];
    let noisy = [9.0, 7.0, -3.0, 0.5, 4.0, 6.0, -1.0, 2.0, 8.0];
    let inverse = |m: [f32; 9]| -> Vec<f32> {
        unit_lower_inverse(Tensor::<B, 2>::from_data(TensorData::new(m.to_vec(), [3, 3]), device))
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap()
    };
    // (I + L)^-1 of this L, by hand.
    let expected = vec![1.0, 0.0, 0.0, -0.5, 1.0, 0.0, 2.0, -2.0, 1.0];
    assert_eq!(inverse(lower), expected);
    assert_eq!(inverse(noisy), expected);
}

fn inverse_of_an_empty_batch_is_empty<B: Ops>(device: &B::Device) {
    let a = Tensor::<B, 4>::zeros([0, 3, 4, 4], device);
    assert_eq!(unit_lower_inverse(a).dims(), [0, 3, 4, 4]);
}

/// [`check_inverses`], with the naive per-row baseline held to the loops except on wgpu.
fn inverse_matches_forward_substitution<B: Ops>(device: &B::Device) {
    check_inverses::<B>(device, !on_wgpu::<B>(device));
}

crate::test_support::backend_tests!(
    inverse_matches_forward_substitution,
    inverse_reads_only_the_strictly_lower_part,
    inverse_of_an_empty_batch_is_empty
);

/// The inverse's backward against central finite differences, on `Autodiff<NdArray>` (f64 is
/// not needed: the perturbation is large enough for f32 and the tolerance is relative).
#[cfg(all(feature = "ndarray", feature = "autodiff"))]
mod gradient {
    use crate::unit_lower_inverse;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::{Distribution, Tensor, TensorData};

    type B = Autodiff<NdArray>;

    /// A fixed scalar function of the inverse, so every entry of `dX` matters.
    fn loss(a: Tensor<B, 3>, weights: &Tensor<B, 3>) -> Tensor<B, 1> {
        (unit_lower_inverse(a) * weights.clone()).sum()
    }

    #[test]
    fn inverse_gradient_matches_finite_differences() {
        let device = Default::default();
        let (batch, n) = (2, 6);
        let a = Tensor::<B, 3>::random([batch, n, n], Distribution::Uniform(-0.5, 0.5), &device);
        let weights = Tensor::<B, 3>::random([batch, n, n], Distribution::Normal(0.0, 1.0), &device);
        let a = a.require_grad();
        let grads = loss(a.clone(), &weights).backward();
        let analytic: Vec<f32> = a.grad(&grads).unwrap().into_data().to_vec().unwrap();

        let base: Vec<f32> = a.clone().into_data().to_vec().unwrap();
        let eps = 1e-2f32;
        for k in 0..base.len() {
            let shifted = |delta: f32| {
                let mut values = base.clone();
                values[k] += delta;
                let a = Tensor::<B, 3>::from_data(TensorData::new(values, [batch, n, n]), &device);
                loss(a, &weights).into_scalar() as f64
            };
            let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * eps as f64);
            let (row, col) = ((k / n) % n, k % n);
            if col >= row {
                assert_eq!(analytic[k], 0.0, "entry {k} is on or above the diagonal: it is never read");
            }
            let diff = (analytic[k] as f64 - numeric).abs();
            assert!(diff <= 1e-2 * numeric.abs().max(1.0), "entry {k}: analytic {} vs numeric {numeric}", analytic[k]);
        }
    }
}
