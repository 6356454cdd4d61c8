//! `dense_matmul` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{dense_matmul, generic, grouped_matmul};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

/// `(n, d_in, d_out)`: no tokens, one of everything, a wide output, a 2B-model width, a long row.
const DENSE_SHAPES: [(usize, usize, usize); 6] =
    [(0, 4, 3), (1, 1, 1), (3, 5, 257), (7, 33, 65), (130, 2048, 96), (1, 4096, 5)];

/// `x · W` for `W [in, out]`, and `x · W[e]` for each slice of stacked `[3, in, out]` weights,
/// against plain f64 loops.
fn dense_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(29);
    for (n, d_in, d_out) in DENSE_SHAPES {
        let experts = 3;
        let weights: Vec<f32> = (0..experts * d_in * d_out).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..n * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let naive = |e: usize| -> Vec<f64> {
            let w = &weights[e * d_in * d_out..];
            (0..n * d_out)
                .map(|k| (0..d_in).map(|i| x[k / d_out * d_in + i] as f64 * w[i * d_out + k % d_out] as f64).sum())
                .collect()
        };
        let check = |name: String, out: Tensor<B, 2>, expected: Vec<f64>| {
            assert_eq!(out.dims(), [n, d_out], "{name}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            for (k, (got, e)) in out.iter().zip(&expected).enumerate() {
                assert!(
                    (*got as f64 - e).abs() <= 1e-5 * (d_in as f64).sqrt() + 1e-6,
                    "{name}, entry {k}: {got} vs {e}"
                );
            }
        };
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, d_in]), device);
        let first = Tensor::<B, 2>::from_data(TensorData::new(weights[..d_in * d_out].to_vec(), [d_in, d_out]), device);
        check(format!("{n}x{d_in}x{d_out}"), dense_matmul(x_t.clone(), first), naive(0));
    }
}

fn grouped_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(31);
    for (name, counts, d_in, d_out) in GROUPED_CASES {
        let rows: usize = counts.iter().sum();
        let weights: Vec<f32> = (0..counts.len() * d_in * d_out).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..rows * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let expected = naive_grouped(&x, counts, &weights, d_in, d_out);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let w_t = Tensor::<B, 3>::from_data(TensorData::new(weights, [counts.len(), d_in, d_out]), device);
        let counts_t = counts_tensor::<B>(counts, device);
        let generic = generic::grouped_matmul::<B>(
            x_t.clone().into_primitive().tensor(),
            w_t.clone().into_primitive().tensor(),
            counts_t.clone().into_primitive(),
        );
        for (form, out) in [
            ("kernel", grouped_matmul(x_t, w_t, counts_t)),
            ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic))),
        ] {
            assert_eq!(out.dims(), [rows, d_out], "{form}, {name}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            for (k, (got, e)) in out.iter().zip(&expected).enumerate() {
                assert!(
                    (*got as f64 - e).abs() <= 1e-5 * (d_in as f64).sqrt() + 1e-6,
                    "{form}, {name}, entry {k}: {got} vs {e}"
                );
            }
        }
    }
}

/// Every tile width of the CPU's few-row kernel this CPU runs (the test says which it cannot),
/// on whole and partial tiles of rows and columns, against plain loops.
#[cfg(feature = "cpu-kernels")]
#[test]
fn every_cpu_few_row_tile_matches_plain_loops() {
    use super::few_rows::matmul_in;
    use crate::cpu::Isa;
    let mut rng = Rng(41);
    for (m, k, n, columns) in
        [(1, 1, 1, 0..1), (4, 33, 64, 0..64), (5, 70, 200, 7..200), (9, 3, 130, 0..130), (3, 0, 16, 0..16)]
    {
        let w: Vec<f32> = (0..k * n).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..m * k).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let full = naive_grouped(&x, &[m], &w, k, n);
        for isa in Isa::ALL {
            if !isa.available() {
                println!("this CPU does not run {isa:?}: those tiles are not checked here");
                continue;
            }
            let mut out = vec![f32::NAN; m * columns.len()];
            matmul_in(isa, &x, m, &w, k, n, columns.clone(), &mut out);
            for (r, row) in out.chunks(columns.len().max(1)).enumerate().take(m) {
                for (c, got) in columns.clone().zip(row) {
                    let e = full[r * n + c];
                    assert!(
                        (*got as f64 - e).abs() <= 1e-5 * (k as f64).sqrt() + 1e-6,
                        "{isa:?}, {m}x{k}x{n} {columns:?}, row {r} column {c}: {got} vs {e}"
                    );
                }
            }
        }
    }
}

crate::test_support::backend_tests!(dense_matmul_matches_plain_loops, grouped_matmul_matches_plain_loops);
