//! The inverse's backward against central finite differences, on `Autodiff<NdArray>` (f64 is
//! not needed: the perturbation is large enough for f32 and the tolerance is relative).
#![cfg(all(feature = "ndarray", feature = "autodiff"))]

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Distribution, Tensor, TensorData};
use decider_ops::unit_lower_inverse;

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
