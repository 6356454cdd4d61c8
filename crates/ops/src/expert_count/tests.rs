//! `expert_count` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{expert_count, generic, reference};
use burn::tensor::{Int, Tensor, TensorData};

fn naive_count(ids: &[i64], experts: usize) -> Vec<i64> {
    let mut counts = vec![0; experts];
    for &id in ids {
        if id >= 0 && (id as usize) < experts {
            counts[id as usize] += 1;
        }
    }
    counts
}

fn count_cases() -> Vec<(&'static str, Vec<i64>, usize)> {
    let mut rng = Rng(7);
    vec![
        ("8 into 64", (0..8).map(|_| rng.below(64)).collect(), 64),
        ("1024 into 128", (0..1024).map(|_| rng.below(128)).collect(), 128),
        ("944 into 256", (0..944).map(|_| rng.below(256)).collect(), 256),
        ("65536 into 256", (0..65_536).map(|_| rng.below(256)).collect(), 256),
        ("all on one expert", vec![3; 100], 8),
        ("no ids", vec![], 16),
        ("ids >= E and < 0 dropped", vec![0, 5, 8, 9, 100, 7, -1], 8),
    ]
}

fn expert_count_matches_the_naive_histogram<B: Ops>(device: &B::Device) {
    for (case, ids, experts) in count_cases() {
        let tensor = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), device);
        let expected = naive_count(&ids, experts);
        let as_vec = |t: Tensor<B, 1, Int>| t.into_data().iter::<i64>().collect::<Vec<_>>();
        assert_eq!(as_vec(expert_count(tensor.clone(), experts)), expected, "kernel, {case}");
        assert_eq!(as_vec(generic::expert_count(tensor.clone(), experts)), expected, "generic, {case}");
        assert_eq!(as_vec(reference::expert_count_per_bin(tensor, experts)), expected, "per-bin, {case}");
    }
}

crate::test_support::backend_tests!(expert_count_matches_the_naive_histogram);
