//! The generic implementations against naive reference loops, on NdArray.

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use decider_ops::{expert_count, unit_lower_inverse};

type B = NdArray;

/// A tiny deterministic generator (xorshift), so the tests need no RNG crate.
struct Rng(u64);
impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next_f32() as f64 * n as f64) as i64
    }
}

fn naive_count(ids: &[i64], experts: usize) -> Vec<i64> {
    let mut counts = vec![0; experts];
    for &id in ids {
        if id >= 0 && (id as usize) < experts {
            counts[id as usize] += 1;
        }
    }
    counts
}

fn count(ids: &[i64], experts: usize) -> Vec<i64> {
    let device = Default::default();
    let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.to_vec(), [ids.len()]), &device);
    expert_count(ids, experts).into_data().to_vec::<i64>().unwrap()
}

#[test]
fn expert_count_matches_naive_histogram() {
    let mut rng = Rng(7);
    let cases: Vec<(Vec<i64>, usize)> = vec![
        ((0..8).map(|_| rng.below(64)).collect(), 64),
        ((0..1024).map(|_| rng.below(128)).collect(), 128),
        ((0..65_536).map(|_| rng.below(256)).collect(), 256),
        (vec![3; 100], 8),          // all on one expert
        (vec![], 16),               // no ids
        (vec![0, 5, 8, 9, 100, 7], 8), // ids >= E are dropped (EP sentinels)
    ];
    for (ids, experts) in cases {
        assert_eq!(count(&ids, experts), naive_count(&ids, experts), "{} ids into {experts}", ids.len());
    }
}

/// Forward substitution: `X = (I + L)^-1` row by row, in f64.
fn naive_inverse(a: &[f32], n: usize) -> Vec<f64> {
    let mut x = vec![0.0f64; n * n];
    for i in 0..n {
        x[i * n + i] = 1.0;
        for j in 0..i {
            // Row i of (I + L) X = I: X[i, j] = -sum_{m in j..i} L[i, m] X[m, j].
            let s: f64 = (j..i).map(|m| a[i * n + m] as f64 * x[m * n + j]).sum();
            x[i * n + j] = -s;
        }
    }
    x
}

/// Matrices built like the delta rule's systems: `(beta k) k^T * decay`, strictly lower, with
/// unit-norm keys and entries close to 1.
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

fn check_inverse(matrices: &[Vec<f32>], n: usize, tolerance: f64) {
    let device = Default::default();
    let flat: Vec<f32> = matrices.iter().flatten().copied().collect();
    let a = Tensor::<B, 3>::from_data(TensorData::new(flat, [matrices.len(), n, n]), &device);
    let x = unit_lower_inverse(a).into_data().to_vec::<f32>().unwrap();
    for (b, m) in matrices.iter().enumerate() {
        let expected = naive_inverse(m, n);
        for (k, e) in expected.iter().enumerate() {
            let got = x[b * n * n + k] as f64;
            let scale = e.abs().max(1.0);
            assert!((got - e).abs() <= tolerance * scale, "matrix {b} entry {k}: got {got}, expected {e}");
        }
    }
}

#[test]
fn inverse_matches_forward_substitution() {
    let mut rng = Rng(11);
    for n in [1, 2, 3, 5, 8, 17, 64] {
        let random: Vec<Vec<f32>> = (0..3).map(|_| (0..n * n).map(|_| rng.next_f32() - 0.5).collect()).collect();
        check_inverse(&random, n, 1e-5);
    }
    // Entries near 1, as in real delta-rule chunks: the inverse grows but stays exact-ish.
    let systems: Vec<Vec<f32>> = (0..4).map(|_| delta_rule_like(&mut rng, 64)).collect();
    check_inverse(&systems, 64, 1e-4);
}

#[test]
fn inverse_reads_only_the_strictly_lower_part() {
    let device = Default::default();
    let lower = [0.0, 0.0, 0.0, 0.5, 0.0, 0.0, -1.0, 2.0, 0.0];
    let noisy = [9.0, 7.0, -3.0, 0.5, 4.0, 6.0, -1.0, 2.0, 8.0];
    let inv = |m: [f32; 9]| {
        unit_lower_inverse(Tensor::<B, 2>::from_data(TensorData::new(m.to_vec(), [3, 3]), &device))
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    };
    assert_eq!(inv(lower), inv(noisy));
    // (I + L)^-1 of this L, by hand: [[1,0,0],[-0.5,1,0],[2,-2,1]].
    assert_eq!(inv(lower), vec![1.0, 0.0, 0.0, -0.5, 1.0, 0.0, 2.0, -2.0, 1.0]);
}

#[test]
fn inverse_of_an_empty_batch_is_empty() {
    let device = Default::default();
    let a = Tensor::<B, 4>::zeros([0, 3, 4, 4], &device);
    assert_eq!(unit_lower_inverse(a).dims(), [0, 3, 4, 4]);
}
