//! The RMSNorms against an f64 computation of their definitions, to f32 precision. (A backend's
//! approximate `recip`, 5e-5 relative on ndarray's SIMD path, fails this.)

use burn::backend::NdArray;
use burn::module::Param;
use burn::tensor::{Distribution, Tensor};
use qwen35::norm::RmsNormConfig;

type B = NdArray;

fn values(t: Tensor<B, 2>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}

fn rms(row: &[f32]) -> f64 {
    (row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / row.len() as f64 + 1e-6).sqrt()
}

fn assert_close(actual: &[f32], expected: &[f64]) {
    for (a, e) in actual.iter().zip(expected) {
        assert!((*a as f64 - e).abs() <= 1e-6 * e.abs().max(1.0), "{a} vs {e}");
    }
}

#[test]
fn zero_centred_norm_scales_by_one_plus_weight() {
    let device = Default::default();
    let (rows, size) = (512, 256); // enough rows for the SIMD paths of CPU backends
    let x = Tensor::<B, 2>::random([rows, size], Distribution::Normal(0.0, 3.0), &device);
    let w = Tensor::<B, 1>::random([size], Distribution::Normal(0.0, 0.3), &device);
    let mut norm = RmsNormConfig::new(size).init::<B>(&device);
    norm.weight = Param::from_tensor(w.clone());
    let actual = values(norm.forward(x.clone()));
    let (x, w): (Vec<f32>, Vec<f32>) = (values(x), w.into_data().to_vec().unwrap());
    let expected: Vec<f64> = x
        .chunks(size)
        .flat_map(|row| {
            let r = rms(row);
            row.iter().zip(&w).map(move |(v, w)| *v as f64 / r * (1.0 + *w as f64)).collect::<Vec<_>>()
        })
        .collect();
    assert_close(&actual, &expected);
}

#[test]
fn gated_norm_uses_the_weight_as_is_and_gates_with_silu() {
    let device = Default::default();
    let (rows, size) = (512, 128);
    let x = Tensor::<B, 2>::random([rows, size], Distribution::Normal(0.0, 3.0), &device);
    let z = Tensor::<B, 2>::random([rows, size], Distribution::Normal(0.0, 2.0), &device);
    let w = Tensor::<B, 1>::random([size], Distribution::Normal(1.0, 0.3), &device);
    let mut norm = RmsNormConfig::new(size).init_gated::<B>(&device);
    norm.weight = Param::from_tensor(w.clone());
    let actual = values(norm.forward(x.clone(), z.clone()));
    let (x, z, w): (Vec<f32>, Vec<f32>, Vec<f32>) = (values(x), values(z), w.into_data().to_vec().unwrap());
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let expected: Vec<f64> = x
        .chunks(size)
        .zip(z.chunks(size))
        .flat_map(|(row, gate)| {
            let r = rms(row);
            (0..size).map(|i| w[i] as f64 * (row[i] as f64 / r) * silu(gate[i] as f64)).collect::<Vec<_>>()
        })
        .collect();
    assert_close(&actual, &expected);
}
