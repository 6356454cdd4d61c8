//! `gating` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{sigmoid, silu};
use burn::tensor::{Tensor, TensorData};

/// `sigmoid` and `silu` against their definitions in f64, on a `[2, 3, len]` tensor (rank 3, so
/// the shape must survive) of values from -100 to 100 (past `exp`'s f32 range both ways), zeros of
/// both signs, tiny values and more values than one parallel task takes. `on_gpu`: allow the
/// looser `exp` and `log` a GPU may have (below).
fn check_gating<B: Ops>(device: &B::Device, on_gpu: bool) {
    let mut rng = Rng(53);
    let len = 6_000;
    let mut x: Vec<f32> = (0..6 * len).map(|_| 200.0 * rng.next_f32() - 100.0).collect();
    x[..8].copy_from_slice(&[0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 100.0, -100.0]);
    let x_t = Tensor::<B, 3>::from_data(TensorData::new(x.clone(), [2, 3, len]), device);
    let sigmoid_of = |v: f32| 1.0 / (1.0 + (-(v as f64)).exp());
    let cases: [(&str, Tensor<B, 3>, &dyn Fn(f32) -> f64); 2] =
        [("sigmoid", sigmoid(x_t.clone()), &sigmoid_of), ("silu", silu(x_t), &|v: f32| v as f64 * sigmoid_of(v))];
    for (name, out, definition) in cases {
        assert_eq!(out.dims(), [2, 3, len], "{name}");
        let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
        for (k, (&got, &v)) in out.iter().zip(&x).enumerate() {
            // Within a few roundings of an `exp` whose argument has the size of `x`: burn's
            // default form, `exp(-log(1 + exp(-x)))`, rounds `log(..)` to f32 first, an error of
            // `|x| ε` relative in the result. A GPU's `exp` and `log` may each be a few ulps off
            // besides (Vulkan allows `exp` 3 + 2|x| ulps, `log` 3). Where the exact sigmoid is
            // below f32's smallest normal value (x < -87.4), a device may give 0 (`exp(-x)`
            // overflows, or subnormals are flushed, as on GPUs): silu's exact value there is at
            // most 87.4 times that smallest value.
            let e = definition(v);
            let roundings = if on_gpu { 8.0 + 3.0 * v.abs() as f64 } else { 2.0 + v.abs() as f64 };
            let bound = roundings * f32::EPSILON as f64 * e.abs();
            assert!(
                (got as f64 - e).abs() <= bound + 88.0 * f32::MIN_POSITIVE as f64,
                "{name}({v}), entry {k}: {got} vs {e}"
            );
        }
    }
}

/// [`check_gating`], allowing a GPU's looser `exp` and `log` on wgpu.
fn sigmoid_and_silu_match_their_definitions<B: Ops>(device: &B::Device) {
    check_gating::<B>(device, on_wgpu::<B>(device));
}

crate::test_support::backend_tests!(sigmoid_and_silu_match_their_definitions);
