//! `WorkingMemory::bytes`, the bound a server checks against its memory budget before it runs
//! a request, against the bytes a run really allocates: this test binary's global allocator
//! counts every live byte, and each run's peak beyond what was live before it is the measure.
//! On ndarray every tensor lives on the heap, so nothing escapes the count.
//!
//! Shapes: the demo model, and 4-layer slices of decider-2b's widths (f32 and q8) and of
//! decider-35b-a3b's (32 experts instead of 256: only the router's width depends on the count)
//! with small segments and key blocks so that prefixes span several of each. Requests: one row
//! alone, a long state shared by several question rows, and sixteen one-row requests of
//! unequal lengths scored together.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::NdArray;
use decider::demo::random_model;
use decider::{Decider, Plan, Prompter, Row, SystemOneRequest};
use qwen35::{PrefillBlocks, Qwen35Config, WeightFormat};
use serde_json::{Map, Value, json};

type B = NdArray<f32>;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, size) };
        if !q.is_null() {
            // Old and new blocks may both be live during the move.
            grew(size);
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `run`, beyond those live before it.
fn peak_of(run: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    run();
    PEAK.load(Ordering::SeqCst) - before
}

/// A `/v1/systemone` request's rows: a state of about `words` words and `questions` questions.
fn rows(prompter: &Prompter, words: usize, questions: usize) -> Plan {
    let state: String = (0..words).map(|i| format!("w{} ", i % 97)).collect();
    let questions: Map<String, Value> =
        (0..questions).map(|i| (format!("q{i}"), json!({"type": "choice", "instructions": format!("Pick {i}?"), "options": ["a", "b", "c"]}))).collect();
    prompter.plan(&SystemOneRequest::new(Value::String(state), questions)).expect("a valid request")
}

/// Runs `requests` and checks that the bound holds, and is within 3.5x of the peak (it covers
/// the GPUs' chunked delta rule too, which keeps more per token than the CPUs' scan).
fn check(decider: &Decider<B>, name: &str, requests: &[&[Row]]) {
    let estimate = decider.working_memory().bytes(requests);
    let measured = peak_of(|| {
        let answers = decider.slot_probabilities_of(requests);
        assert!(answers.iter().all(Result::is_ok), "{name}: answered");
    });
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    eprintln!("{name}: measured {:.1} MiB, bound {:.1} MiB ({:.2}x)", mib(measured), mib(estimate), estimate as f64 / measured as f64);
    assert!(measured <= estimate, "{name}: {measured} bytes allocated, more than the bound of {estimate}");
    assert!(estimate <= 7 * measured / 2, "{name}: the bound of {estimate} bytes is more than 3.5x the {measured} allocated");
}

/// A request of one row (a state of about `words / 4` words), one of a state of `words` shared
/// by 3 question rows, and sixteen one-row requests of unequal lengths scored together.
fn requests(prompter: &Prompter, words: usize) -> Vec<(&'static str, Vec<Plan>)> {
    vec![
        ("one row", vec![rows(prompter, words / 4, 1)]),
        ("a state shared by 3 rows", vec![rows(prompter, words, 3)]),
        ("16 requests together", (0..16).map(|i| rows(prompter, 8 + 4 * i, 1)).collect()),
    ]
}

/// A Qwen3.5 config of decider-2b's widths (or decider-35b-a3b's with `experts`), 4 layers.
fn real_widths(experts: Option<usize>) -> Qwen35Config {
    let mut text = json!({
        "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 4, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 16,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
    });
    if let Some(experts) = experts {
        let moe = json!({"model_type": "qwen3_5_moe_text", "num_attention_heads": 16, "linear_num_value_heads": 32,
            "num_experts": experts, "num_experts_per_tok": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512});
        text.as_object_mut().unwrap().extend(moe.as_object().unwrap().clone());
    }
    Qwen35Config::from_json(&text.to_string()).expect("a valid config")
}

#[test]
fn the_working_memory_bound_holds_and_is_tight() {
    let device = Default::default();
    let demo = Decider::<B>::demo(&device);
    for (kind, plans) in requests(demo.prompter(), 6000) {
        check(&demo, &format!("demo, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
    }
    drop(demo);
    // Real widths, with segments and key blocks of 256 so that a 600-word state spans several.
    let blocks = PrefillBlocks { segment: 256, key_block: 256 };
    for (name, experts, weights) in [("2B widths f32", None, WeightFormat::F32), ("2B widths q8", None, WeightFormat::Q8), ("35B-A3B widths q8", Some(32), WeightFormat::Q8)] {
        let model = random_model::<B>(&real_widths(experts), weights, &device).with_blocks(blocks);
        let decider = Decider::new(model, Prompter::demo(), &device, name.into()).expect("the tokenizer fits");
        for (kind, plans) in requests(decider.prompter(), 600) {
            check(&decider, &format!("{name}, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
        }
    }
}
