//! Helpers shared by the integration tests: fixture paths and tolerance checks.

use std::path::PathBuf;

/// Path of a file under `tests/fixtures/`.
pub fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(relative)
}
