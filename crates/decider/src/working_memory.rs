//! The memory scoring requests takes beyond the model's weights, bounded before they run: what
//! a server checks against its memory budget so that no request can make it allocate past it.

use qwen35::CallMemory;

use crate::prompt::Row;
use crate::schedule::{RowKey, batches, schedule};
use crate::tokenizer::MAX_OPTIONS;

/// A decider's sizes for that bound ([`crate::Decider::working_memory`]); no tensors, so the
/// HTTP side can size requests while the model runs.
#[derive(Debug, Clone)]
pub struct WorkingMemory {
    pub(crate) call: CallMemory,
    pub(crate) share_prefix: bool,
}

impl WorkingMemory {
    /// An upper bound of the bytes [`crate::Decider::slot_probabilities_of`] allocates for
    /// `requests` at its peak: a state prefix with its cache and hidden states while its rows'
    /// batches run after it, or one batch of rows run from scratch. Checked against the bytes
    /// really allocated in `tests/working_memory.rs`.
    pub fn bytes(&self, requests: &[&[Row]]) -> usize {
        let call = &self.call;
        let schedule = schedule(requests, self.share_prefix);
        // Per batch: its rows, their width and their slots.
        let batch_shapes = |rows: &[(RowKey, &Row)], start: usize| {
            let lengths: Vec<usize> = rows.iter().map(|(_, row)| row.ids.len() - start).collect();
            let slots: Vec<usize> = rows.iter().map(|(_, row)| row.slots.len()).collect();
            batches(&lengths, self.share_prefix).into_iter().map(move |group| {
                (
                    group.len(),
                    group.iter().map(|&i| lengths[i]).max().unwrap_or(0),
                    group.iter().map(|&i| slots[i]).sum::<usize>(),
                )
            })
        };
        // A batch's call, its token ids, and its slots' hidden states and label logits.
        let batch_bytes = |(rows, width, slots): (usize, usize, usize), past: usize| {
            call.call_bytes(rows, width, past)
                + rows * width * size_of::<i64>()
                + slots * (call.hidden() + MAX_OPTIONS) * size_of::<f32>()
        };
        let prefixed = schedule.prefixed.iter().map(|(prefix, rows)| {
            let held = call.cache_bytes(1, *prefix) + prefix * call.hidden() * size_of::<f32>();
            let after = batch_shapes(rows, *prefix).map(|batch| held + batch_bytes(batch, *prefix)).max().unwrap_or(0);
            batch_bytes((1, *prefix, 0), 0).max(after)
        });
        let unshared = batch_shapes(&schedule.unshared, 0).map(|batch| batch_bytes(batch, 0));
        prefixed.chain(unshared).max().unwrap_or(0)
    }
}
