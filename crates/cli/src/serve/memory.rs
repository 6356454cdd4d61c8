//! The memory budget of requests in flight (`--max-memory`): bytes of bodies being read and of
//! the JSON values they parse to, then of their plans and the model's working memory for them,
//! reserved before they are allocated.
//!
//! A body's bytes are reserved as they arrive; its parse is reserved from a scan of the body
//! before it is parsed (`decider::python_json::loads`). Parsing can take a hundred times the
//! body's size (a 72-byte value and its allocations for each `1,` of a list), so the body limit
//! alone does not bound memory: `parse_bytes` does. Tokenizing is reserved before each text is
//! tokenized, from its length (`decider::plan_budget`). A request that could never fit is a 413;
//! one that does not fit now, beside the others in flight, is a 503 to retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;

use super::error::ApiError;

/// Bytes a parsed JSON value may take per structural character (`[`, `{`, `,` or `:` outside a
/// string) of its text, at most. Measured with a counting allocator, the costliest shapes take
/// 200 (`[[1],[1],…]`); `tests/cli/serve.rs` checks the bound on the real server's peak memory.
const BYTES_PER_STRUCTURAL: usize = 256;

/// An upper bound of the bytes parsing `body` (UTF-8) into a `Json` value allocates: the text of
/// its strings once more, and `BYTES_PER_STRUCTURAL` for each value and key.
pub(super) fn parse_bytes(body: &[u8]) -> usize {
    let (mut structurals, mut in_string, mut escaped) = (1usize, false, false);
    for &byte in body {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' | b',' | b':' => structurals += 1,
                _ => {}
            }
        }
    }
    body.len().saturating_add(structurals.saturating_mul(BYTES_PER_STRUCTURAL))
}

/// The budget, shared by all requests.
#[derive(Clone)]
pub(super) struct MemoryBudget {
    limit: usize,
    used: Arc<AtomicUsize>,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Self {
        Self { limit, used: Arc::default() }
    }

    /// An empty reservation, to grow as the request needs.
    pub fn reservation(&self) -> Reservation {
        Reservation { budget: self.clone(), bytes: 0 }
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }
}

/// Bytes reserved for one request; released when dropped.
pub(super) struct Reservation {
    budget: MemoryBudget,
    bytes: usize,
}

impl Reservation {
    /// Reserves `more` bytes for `what`: a 413 if the request would need more than the whole
    /// budget, a 503 if the budget is taken by other requests now.
    pub fn grow(&mut self, more: usize, what: &str) -> Result<(), ApiError> {
        let MemoryBudget { limit, used } = &self.budget;
        let needed = self.bytes.saturating_add(more);
        if needed > *limit {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request too large for memory: {what} needs {} MiB, the limit is {} MiB (--max-memory, DECIDER_MAX_MEMORY)",
                    mib(needed),
                    mib(*limit)
                ),
            ));
        }
        used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| now.checked_add(more).filter(|total| total <= limit)).map_err(|now| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("server busy: requests in flight hold {} MiB of the {} MiB memory limit (DECIDER_MAX_MEMORY); retry later", mib(now), mib(*limit)),
            )
        })?;
        self.bytes = needed;
        Ok(())
    }
}

impl Reservation {
    /// Grows the reservation to `bytes` for `what` if it holds less (as [`Reservation::grow`]).
    pub fn grow_to(&mut self, bytes: usize, what: &str) -> Result<(), ApiError> {
        if bytes <= self.bytes { Ok(()) } else { self.grow(bytes - self.bytes, what) }
    }

    /// Grows the reservation to `bytes` if it holds less, when the budget has room now; false
    /// when it has not (nothing is reserved then).
    pub fn try_grow_to(&mut self, bytes: usize) -> bool {
        self.grow_to(bytes, "").is_ok()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Bytes in MiB, rounded up.
pub(super) fn mib(bytes: usize) -> usize {
    bytes.div_ceil(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_is_counted_outside_strings_only() {
        let text = br#""a, b: [c] {d} \" , e""#;
        assert_eq!(parse_bytes(text), text.len() + BYTES_PER_STRUCTURAL);
        assert_eq!(parse_bytes(b"[1,2,3]"), 7 + 4 * BYTES_PER_STRUCTURAL);
    }

    #[test]
    fn a_reservation_is_refused_past_the_limit_and_released_when_dropped() {
        let budget = MemoryBudget::new(1000);
        let mut first = budget.reservation();
        first.grow(600, "the body").unwrap();
        let mut second = budget.reservation();
        assert_eq!(second.grow(1001, "the body").err().map(|e| e.0), Some(StatusCode::PAYLOAD_TOO_LARGE));
        assert_eq!(second.grow(500, "the body").err().map(|e| e.0), Some(StatusCode::SERVICE_UNAVAILABLE));
        drop(first);
        second.grow(500, "the body").unwrap();
        assert_eq!(budget.used(), 500);
        let mut third = budget.reservation();
        assert!(!third.try_grow_to(501), "past the limit beside the others");
        assert!(third.try_grow_to(300) && third.try_grow_to(200), "a smaller size keeps what is held");
        assert_eq!(budget.used(), 800);
    }
}
