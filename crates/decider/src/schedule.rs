//! The order the rows of requests scored together run in, written once for running them
//! (`engine.rs`) and for sizing their memory beforehand (`working_memory.rs`).
//!
//! A request whose rows share a state prefix runs it once, then its rows after it; the rows of
//! the other requests run together from scratch. Either way rows run in the batches
//! [`plan_batches`] groups them in.

use crate::batch::plan_batches;
use crate::prompt::{Row, common_prefix};

/// A row of one of several requests: the request's index and the row's.
pub(crate) type RowKey = (usize, usize);

pub(crate) struct Schedule<'a> {
    /// Per request whose rows share a state prefix: its length, and the rows run after it.
    pub prefixed: Vec<(usize, Vec<(RowKey, &'a Row)>)>,
    /// The rows of the other requests, run together from scratch.
    pub unshared: Vec<(RowKey, &'a Row)>,
}

/// How the scored rows (those with slots) of `requests` run; `share` off runs every row alone
/// from scratch.
pub(crate) fn schedule<'a>(requests: &[&'a [Row]], share: bool) -> Schedule<'a> {
    let mut schedule = Schedule { prefixed: Vec::new(), unshared: Vec::new() };
    for (r, rows) in requests.iter().enumerate() {
        let scored: Vec<_> =
            rows.iter().enumerate().filter(|(_, row)| !row.slots.is_empty()).map(|(i, row)| ((r, i), row)).collect();
        match shared_prefix(rows, share) {
            prefix if prefix > 0 && !scored.is_empty() => schedule.prefixed.push((prefix, scored)),
            _ => schedule.unshared.extend(scored),
        }
    }
    schedule
}

/// Tokens every row of `rows` starts with that run once for all of them: their common prefix,
/// ending at least one token before the shortest row so that every row runs its own last token
/// (its slot) past the fork; 0 for one row or when sharing is off.
fn shared_prefix(rows: &[Row], share: bool) -> usize {
    if !share || rows.len() < 2 {
        return 0;
    }
    let shortest = rows.iter().map(|r| r.ids.len()).min().unwrap_or(0);
    common_prefix(rows).min(shortest.saturating_sub(1))
}

/// The batches rows of these lengths run in: [`plan_batches`]' groups, or each row alone when
/// sharing is off.
pub(crate) fn batches(lengths: &[usize], share: bool) -> Vec<Vec<usize>> {
    if share { plan_batches(lengths) } else { (0..lengths.len()).map(|i| vec![i]).collect() }
}
