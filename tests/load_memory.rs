//! Loading holds the model plus at most one tensor in flight: the bytes allocated at the peak of
//! a load are at most the loaded model's plus its largest parameter's, and the model holds what
//! `Qwen35Model::weight_bytes` says from its shapes alone, in f32, q8, q4, bf16 and f16 (where a
//! bf16 tensor is quantized or rounded as it is read, with no f32 copy of it). The checkpoint is the
//! dense fixture with a 131,072-row embedding, so that one tensor dominates as the embeddings of
//! the real models do, and an extra f32 copy of it would show.

use integration_tests::counting::{Counting, peak_of};
use integration_tests::dense_with_vocab;
use qwen35::{Qwen35Config, WeightFormat};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

type B = burn::backend::NdArray<f32>;

const VOCAB: usize = 131_072;

/// Bytes allocated beyond the model and its largest parameter: the checkpoint's index, names,
/// module paths.
const SLACK: usize = 1 << 20;

#[test]
fn loading_peaks_at_the_model_plus_one_tensor() {
    let dir = dense_with_vocab(VOCAB, None);
    let hidden = Qwen35Config::from_file(dir.path().join("config.json")).unwrap().hidden_size;
    let mut kept = Vec::new();
    // The largest parameter is the embeddings: f32, Q8_0 (in q4 too) with f16 scales, or 16-bit.
    let formats = [
        (WeightFormat::F32, 4.0),
        (WeightFormat::Q8, 1.0 + 2.0 / 32.0),
        (WeightFormat::Q4, 1.0 + 2.0 / 32.0),
        (WeightFormat::Bf16, 2.0),
        (WeightFormat::F16, 2.0),
    ];
    for (weights, bytes_per_value) in formats {
        let (model, live, peak) =
            peak_of(|| qwen35::load_model_with_weights::<B>(dir.path(), weights, &Default::default()).unwrap());
        let largest = (VOCAB as f64 * hidden as f64 * bytes_per_value) as usize;
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        eprintln!(
            "{weights}: model {:.1} MiB, peak {:.1} MiB, largest parameter {:.1} MiB",
            mib(live),
            mib(peak),
            mib(largest)
        );
        assert!(
            peak <= live + largest + SLACK,
            "{weights}: loading peaked at {peak} bytes, more than the model's {live} + {largest} + {SLACK}"
        );
        assert!(live >= largest, "{weights}: the model ({live} bytes) is smaller than its embeddings ({largest})");
        let sized = model.1.weight_bytes();
        assert!(
            sized <= live && live <= sized + SLACK,
            "{weights}: the model holds {live} bytes, its weights are sized at {sized}"
        );
        let lazy = model.0.init_with_weights::<B>(weights, &Default::default()).weight_bytes();
        assert_eq!(lazy, sized, "{weights}: a lazily built model is sized as the loaded one");
        kept.push(live);
        drop(model);
    }
    assert!(
        kept[1] * 3 < kept[0],
        "the q8 model ({} bytes) is not under a third of the f32 one ({})",
        kept[1],
        kept[0]
    );
    assert!(kept[2] < kept[1], "the q4 model ({} bytes) is not smaller than the q8 one ({})", kept[2], kept[1]);
    for (half, bytes) in [("bf16", kept[3]), ("f16", kept[4])] {
        // Half the f32 model's bytes, its norms and gates (f32 in every format) aside.
        assert!(
            bytes * 2 <= kept[0] + SLACK,
            "the {half} model ({bytes} bytes) is more than half the f32 one ({})",
            kept[0]
        );
    }
}
