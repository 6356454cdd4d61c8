//! Property-based fuzzing of the checkpoint reader and the config parser: a model folder with
//! bytes of its safetensors header changed, its file cut short, or one `config.json` field
//! replaced by any JSON loads or fails with an error; it never panics or aborts.
//!
//! `PROPTEST_CASES` sets the cases per property (256 by default); a longer run:
//! `PROPTEST_CASES=20000 cargo test -p integration-tests --test integration --release -- fuzz_checkpoint::`.

use std::sync::LazyLock;

use burn::backend::NdArray;
use integration_tests::fixture_path;
use integration_tests::fuzz::json_value;
use proptest::prelude::*;
use serde_json::Value;

static WEIGHTS: LazyLock<Vec<u8>> =
    LazyLock::new(|| std::fs::read(fixture_path("dense/save_pretrained/model.safetensors")).unwrap());
static CONFIG: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(&std::fs::read_to_string(fixture_path("dense/save_pretrained/config.json")).unwrap()).unwrap()
});

/// Loads a folder of `config` and `weights`; `Err` is fine, a panic fails the case.
fn load(config: &Value, weights: &[u8]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), weights).unwrap();
    qwen35::load_model::<NdArray>(dir.path(), &Default::default()).map(drop).map_err(|e| e.to_string())
}

/// Where a change is likeliest to matter: the length prefix and the JSON header.
fn header_end() -> usize {
    8 + u64::from_le_bytes(WEIGHTS[..8].try_into().unwrap()) as usize
}

proptest! {
    #[test]
    fn changed_header_bytes_never_panic(changes in proptest::collection::vec((0usize..1 << 16, any::<u8>()), 1..8)) {
        let mut weights = WEIGHTS.clone();
        for (at, byte) in changes {
            let at = at % header_end();
            weights[at] = byte;
        }
        let _ = load(&CONFIG, &weights);
    }

    #[test]
    fn a_cut_file_is_an_error(len in 0usize..1 << 20) {
        let len = len % WEIGHTS.len();
        prop_assert!(load(&CONFIG, &WEIGHTS[..len]).is_err());
    }

    #[test]
    fn any_config_field_value_loads_or_errs(field in proptest::sample::select(CONFIG.as_object().unwrap().keys().cloned().collect::<Vec<_>>()), value in json_value()) {
        let mut config = CONFIG.clone();
        config[&field] = value;
        let _ = load(&config, &WEIGHTS);
    }
}
