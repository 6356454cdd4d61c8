//! A model folder's small files (`config.json`, `tokenizer.json`, `decider_config.json`, the
//! shard index), read whole: each must be a regular file within a size bound, checked before it
//! is read, so that a device, a pipe or a link to one (`/dev/zero`) is refused at once instead of
//! read until memory runs out, and a file that grows while it is read stops at the bound.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// `config.json` and `decider_config.json`: a few KiB in every released model.
pub const CONFIG_BYTES: u64 = 1 << 20;

/// `model.safetensors.index.json`: about 3 MiB for decider-35b-a3b's 40,000 tensors.
pub const INDEX_BYTES: u64 = 64 << 20;

/// `tokenizer.json`: about 11 MiB for the Qwen3.5 vocabulary.
pub const TOKENIZER_BYTES: u64 = 256 << 20;

/// The bytes of `path`, a regular file of at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let len = check_regular(&file)?;
    if len > limit {
        return Err(too_long(len, limit));
    }
    // Also bounded as it is read: a file that grows meanwhile stops at the bound.
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// The text of `path`, a regular UTF-8 file of at most `limit` bytes.
pub fn read_bounded_text(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The length of `file`, an error unless it is a regular file.
pub fn check_regular(file: &File) -> io::Result<u64> {
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a device, a pipe or a link to one)",
        ));
    }
    Ok(metadata.len())
}

fn too_long(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{len} bytes or more, over the {limit} bytes such a file may have"),
    )
}
