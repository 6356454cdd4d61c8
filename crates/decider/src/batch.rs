//! Which rows run together in one forward pass.
//!
//! Rows of unequal length run as one right-padded batch, so a batch costs about its rows times
//! its longest row, plus a fixed cost per forward pass. As decider-ai's server does
//! (`decider/batching.py`, `plan_batches`), rows are sorted by length and cut into consecutive
//! groups by an exact dynamic program minimising Σ (overhead + rows × longest row). Sorting
//! loses nothing: for any partition, the one with the same group sizes over the sorted rows
//! has no group with a longer longest row, so the best partition is among the consecutive ones.

/// The fixed cost of one forward pass, in padded tokens (decider-ai's
/// `DECIDER_MERGE_OVERHEAD_TOKENS`).
pub const MERGE_OVERHEAD_TOKENS: usize = 512;

/// Most rows in one batch.
pub const MAX_BATCH_ROWS: usize = 16;

/// Most padded tokens (rows × longest row) in one batch of several rows: a batch's activations
/// grow with it, so it bounds the working memory a batch adds over one row (a longer row runs
/// alone, in the model's prefill segments). Past a few hundred tokens per call the CPU matmuls
/// run no faster per token, so a larger bound would buy memory use, not speed.
pub const MAX_BATCH_TOKENS: usize = 4096;

/// The indices of rows of `lengths` tokens, grouped into batches: each group at most
/// [`MAX_BATCH_ROWS`] rows and (unless it is one row) [`MAX_BATCH_TOKENS`] padded tokens, the
/// total cost least. Groups come shortest rows first; a group's rows in ascending length.
pub fn plan_batches(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let sorted: Vec<usize> = order.iter().map(|&i| lengths[i]).collect();
    // best[i]: the least cost of the first i sorted rows, and where its last group starts.
    let mut best: Vec<(usize, usize)> = vec![(0, 0); sorted.len() + 1];
    for end in 1..=sorted.len() {
        let longest = sorted[end - 1];
        best[end] = (1..=MAX_BATCH_ROWS.min(end))
            .filter(|&rows| rows == 1 || rows * longest <= MAX_BATCH_TOKENS)
            .map(|rows| (best[end - rows].0 + MERGE_OVERHEAD_TOKENS + rows * longest, end - rows))
            .min()
            .expect("a row alone is always a batch");
    }
    let mut groups = Vec::new();
    let mut end = sorted.len();
    while end > 0 {
        let start = best[end].1;
        groups.push(order[start..end].to_vec());
        end = start;
    }
    groups.reverse();
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cost(lengths: &[usize], group: &[usize]) -> usize {
        MERGE_OVERHEAD_TOKENS + group.len() * group.iter().map(|&i| lengths[i]).max().unwrap()
    }

    fn allowed(lengths: &[usize], group: &[usize]) -> bool {
        !group.is_empty()
            && group.len() <= MAX_BATCH_ROWS
            && (group.len() == 1 || cost(lengths, group) - MERGE_OVERHEAD_TOKENS <= MAX_BATCH_TOKENS)
    }

    /// The least cost over every partition of the rows into allowed groups (all set
    /// partitions, not only consecutive ones).
    fn brute_force(lengths: &[usize]) -> usize {
        fn search(lengths: &[usize], next: usize, groups: &mut Vec<Vec<usize>>, best: &mut usize) {
            if next == lengths.len() {
                if groups.iter().all(|g| allowed(lengths, g)) {
                    *best = (*best).min(groups.iter().map(|g| cost(lengths, g)).sum());
                }
                return;
            }
            for g in 0..=groups.len() {
                if g == groups.len() {
                    groups.push(vec![next]);
                } else {
                    groups[g].push(next);
                }
                search(lengths, next + 1, groups, best);
                if groups[g].len() == 1 {
                    groups.pop();
                } else {
                    groups[g].pop();
                }
            }
        }
        let mut best = usize::MAX;
        search(lengths, 0, &mut Vec::new(), &mut best);
        best
    }

    fn check_partition(lengths: &[usize], groups: &[Vec<usize>]) {
        let mut seen: Vec<usize> = groups.concat();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>(), "every row exactly once: {groups:?}");
        for group in groups {
            assert!(allowed(lengths, group), "group {group:?} of lengths {lengths:?} breaks a bound");
        }
    }

    proptest! {
        /// The groups are a partition within the bounds, and no partition at all costs less.
        #[test]
        fn groups_are_an_optimal_partition(lengths in prop::collection::vec(prop_oneof![1..64usize, 1..1024usize, 2000..6000usize], 0..8)) {
            let groups = plan_batches(&lengths);
            check_partition(&lengths, &groups);
            let total: usize = groups.iter().map(|g| cost(&lengths, g)).sum();
            prop_assert_eq!(total, brute_force(&lengths));
        }

        /// Many rows (more than a batch holds) stay a partition within the bounds.
        #[test]
        fn many_rows_stay_within_the_bounds(lengths in prop::collection::vec(1..40_000usize, 0..300)) {
            check_partition(&lengths, &plan_batches(&lengths));
        }
    }

    #[test]
    fn equal_short_rows_fill_batches_and_a_long_row_runs_alone() {
        let mut lengths = vec![128; 40];
        lengths.push(30_000);
        let groups = plan_batches(&lengths);
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        // 40 rows of 128: three batches (16 + 16 + 8 costs the same as any split into three).
        assert_eq!(sizes.len(), 4, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 41);
        assert_eq!(groups.last().unwrap(), &vec![40]);
    }
}
