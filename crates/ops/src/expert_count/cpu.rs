//! The count on the host, for the CPU backends: one pass over the ids.

/// Counts of ids in `0..num_experts`; other ids are dropped.
pub fn expert_count(ids: impl Iterator<Item = i64>, num_experts: usize) -> Vec<i64> {
    let mut counts = vec![0i64; num_experts];
    for id in ids {
        if let Some(count) = usize::try_from(id).ok().and_then(|id| counts.get_mut(id)) {
            *count += 1;
        }
    }
    counts
}
