//! `decider forward` end to end: the binary loads a fixture folder, writes the logits as .npy,
//! and they equal transformers' reference logits; bad input gives a clear error and exit code.

use std::process::Command;

use integration_tests::{Reference, fixture_copy, fixture_path, relative_check, rewrite_tensors};
use qwen35::loader::{LAYERS_DONE, LAYERS_TOTAL};

fn decider() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_decider"));
    command.env("RUST_BACKTRACE", "0");
    command
}

/// The backends of this build, as `decider backends` lists them.
fn backends() -> Vec<String> {
    let output = decider().arg("backends").output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// Runs `decider forward --weights f32` on `backend` and returns the logits it wrote, checking the shape
/// (`rows` tokens).
fn forward(backend: &str, ids: &str, rows: usize, out: &std::path::Path) -> Vec<f32> {
    let output = decider()
        .args(["forward", "--model"])
        .arg(fixture_path("moe/hf_layout"))
        .args(["--ids", ids, "--backend", backend, "--weights", "f32", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{backend}: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("loaded") && stdout.contains("tokens/s"), "prints load and forward times: {stdout}");
    let bytes = std::fs::read(out).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[rows as u64, 256]);
    npy.into_vec().unwrap()
}

/// Every backend's `decider forward` writes transformers' logits (computed in f32 from the
/// fixture's bf16 weights, so `--weights f32`; `auto` would hold them in bf16, whose CPU products
/// round the activations, tested below): 7 tokens on the CPU backends,
/// one on wgpu, whose first forward in a process compiles and tunes a kernel for every new shape
/// (a minute on CI's software driver; longer runs on wgpu are `tests/reference_parity.rs`'s).
#[test]
fn forward_writes_the_reference_logits_on_every_backend() {
    let reference = Reference::open("moe");
    let dir = tempfile::tempdir().unwrap();
    let backends = backends();
    assert!(backends.contains(&"ndarray".to_owned()), "{backends:?}");
    for backend in &backends {
        let run = if backend == "wgpu" { "len1" } else { "len7" };
        let ids = reference.input_ids::<burn::backend::NdArray>(run, &Default::default());
        let ids: Vec<String> = ids.into_data().iter::<i64>().map(|id| id.to_string()).collect();
        let (expected, _) = reference.f32(&format!("{run}.logits"));
        let logits = forward(backend, &ids.join(","), ids.len(), &dir.path().join(format!("{backend}.npy")));
        relative_check(&format!("decider forward --backend {backend}, {run}"), &logits, &expected, 1e-4);
    }
}

/// `--weights q8` and `q4` reach the model: its logits move off the f32 ones by the rounding, q4
/// more than q8, and only by that (bounds measured on this random fixture, which amplifies
/// weight noise layer by layer: 3 % and 35 % of the logits' scale; the exact comparison with
/// rounded weights is `tests/weight_formats.rs`). `--weights bf16` gives the f32 logits.
#[test]
fn forward_with_block_weights_writes_nearby_logits() {
    let dir = tempfile::tempdir().unwrap();
    let run = |weights: &str| -> Vec<f32> {
        let out = dir.path().join(format!("{weights}.npy"));
        let output = decider()
            .args(["forward", "--model"])
            .arg(fixture_path("dense/save_pretrained"))
            .args(["--ids", "1,2,3,4,5,6,7", "--weights", weights, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(output.status.success(), "{weights}: {}", String::from_utf8_lossy(&output.stderr));
        npyz::NpyFile::new(&std::fs::read(&out).unwrap()[..]).unwrap().into_vec().unwrap()
    };
    let f32_logits = run("f32");
    let scale = f32_logits.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let mut worst_of = Vec::new();
    for (weights, bound) in [("q8", 0.1), ("q4", 0.5)] {
        let logits = run(weights);
        let worst = f32_logits.iter().zip(&logits).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst > 1e-4 * scale, "{weights} logits equal f32 ones ({worst}): the format was not applied");
        assert!(worst < bound * scale, "{weights} logits are {worst} off f32 ones of scale {scale}");
        worst_of.push(worst);
    }
    assert!(worst_of[1] > worst_of[0], "q4 moves the logits less than q8: {worst_of:?}");
    // The fixture's weights are bf16 values: `--weights bf16` holds them exactly, and its CPU
    // products read the activations rounded to bf16 (8 significant bits, where q8 keeps 8 or 16
    // bits a block), which moves the logits, less than q8 does.
    let bf16 = run("bf16");
    let worst = f32_logits.iter().zip(&bf16).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst > 0.0, "bf16 logits equal f32 ones: the activations were not rounded");
    assert!(worst < worst_of[0], "bf16 logits are {worst} off f32 ones, q8's {}", worst_of[0]);
}

#[test]
fn bad_input_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.npy");
    let cases: [(&[&str], &str); 4] = [
        (&["--ids", "1,2,256"], "token id 256 is out of range for this model's vocab_size 256"),
        (&["--ids", "1,x"], "invalid value 'x'"),
        (&["--ids", "1", "--backend", "tpu"], "possible values"),
        (
            &["--ids", "1", "--weights", "q3"],
            "unknown weight format `q3` (expected one of: auto, f32, q8, q4, f16, bf16, q4_k)",
        ),
    ];
    for (args, message) in cases {
        let output = decider()
            .args(["forward", "--model"])
            .arg(fixture_path("dense/save_pretrained"))
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let output =
        decider().args(["forward", "--model", "/no/such/model", "--ids", "1", "--out"]).arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/no/such/model is not a model folder"), "{stderr}");
}

#[test]
fn logits_that_overflow_exit_non_zero_and_write_nothing() {
    // Finite weights whose product overflows f32: a final norm of 3.4e38 scales the hidden
    // state past f32's range, so the logits are infinite or NaN.
    let dir = fixture_copy("dense/save_pretrained");
    rewrite_tensors(&dir.path().join("model.safetensors"), |name, dtype, shape, mut data| {
        if name == "model.norm.weight" {
            assert_eq!(dtype, safetensors::Dtype::BF16);
            data.chunks_exact_mut(2).for_each(|b| b.copy_from_slice(&half::bf16::MAX.to_le_bytes()));
        }
        Some((dtype, shape, data))
    });

    let out = dir.path().join("logits.npy");
    let output = decider()
        .args(["forward", "--model"])
        .arg(dir.path())
        .args(["--ids", "1,2,3", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exit status {}", output.status);
    assert!(stderr.contains("logits are NaN or infinite"), "{stderr}");
    assert!(!out.exists(), "no logits file is written");
}

#[test]
fn forward_runs_the_demo_model_as_the_library_builds_it() {
    use burn::backend::NdArray;
    use burn::tensor::{Int, Tensor, TensorData};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.npy");
    let output = decider()
        .args(["forward", "--model", "demo", "--ids", "1,2,3", "--backend", "ndarray", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let vocab = decider::demo::demo_config().vocab_size;
    assert_eq!(npy.shape(), &[3, vocab as u64]);
    let written: Vec<f32> = npy.into_vec().unwrap();
    let model = decider::demo::demo_model::<NdArray>(&Default::default());
    let ids = Tensor::<NdArray, 2, Int>::from_data(TensorData::new(vec![1i64, 2, 3], [1, 3]), &Default::default());
    let expected = model.forward(ids).into_data().convert::<f32>().to_vec::<f32>().unwrap();
    relative_check("demo logits", &written, &expected, 1e-5);
}

/// `decider quantize` writes a folder that `decider forward` reads into the logits that
/// quantizing (or rounding to f16) the source at load gives; it refuses f32 and a folder that is
/// not empty.
#[test]
fn quantize_writes_a_folder_that_loads_like_quantizing_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let quantized = dir.path().join("q8");
    let quantize = |to: &str, out: &std::path::Path| {
        decider()
            .args(["quantize", "--model"])
            .arg(fixture_path("moe/save_pretrained"))
            .args(["--to", to, "--out"])
            .arg(out)
            .output()
            .unwrap()
    };
    let output = quantize("q8", &quantized);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Its progress on stderr, a line a layer for this short model, the last one when it is done.
    let layers = serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(fixture_path("moe/save_pretrained/config.json")).unwrap(),
    )
    .unwrap()["num_hidden_layers"]
        .as_u64()
        .unwrap();
    for done in 1..=layers {
        assert!(
            stderr.contains(&format!("INFO weights read {LAYERS_DONE}={done} {LAYERS_TOTAL}={layers}")),
            "{stderr}"
        );
    }
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("tensors in q8"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let logits = |model: &std::path::Path, weights: &[&str], name: &str| -> Vec<f32> {
        let out = dir.path().join(format!("{name}.npy"));
        let output = decider()
            .args(["forward", "--model"])
            .arg(model)
            .args(["--ids", "1,2,3,4,5,6,7"])
            .args(weights)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        npyz::NpyFile::new(&std::fs::read(&out).unwrap()[..]).unwrap().into_vec().unwrap()
    };
    let at_load = logits(&fixture_path("moe/save_pretrained"), &["--weights", "q8"], "at-load");
    assert_eq!(logits(&quantized, &["--weights", "q8"], "folder"), at_load);
    // `--weights auto`, the default, loads the folder in the format it is stored in.
    assert_eq!(logits(&quantized, &[], "auto"), at_load);
    // A checkpoint whose matrices are all bf16 loads in bf16 on ndarray (2 bytes a weight).
    let source_auto = logits(&fixture_path("moe/save_pretrained"), &[], "source-auto");
    assert_ne!(source_auto, at_load, "a float folder is not quantized");
    assert_eq!(source_auto, logits(&fixture_path("moe/save_pretrained"), &["--weights", "bf16"], "source-bf16"));
    // The same in q4.
    let q4 = dir.path().join("q4");
    assert!(quantize("q4", &q4).status.success());
    let at_load = logits(&fixture_path("moe/save_pretrained"), &["--weights", "q4"], "q4-at-load");
    assert_eq!(logits(&q4, &[], "q4-auto"), at_load);
    // And in 16-bit floats: the folder holds the weights as F16 tensors.
    let f16 = dir.path().join("f16");
    assert!(quantize("f16", &f16).status.success());
    let at_load = logits(&fixture_path("moe/save_pretrained"), &["--weights", "f16"], "f16-at-load");
    assert_eq!(logits(&f16, &[], "f16-auto"), at_load);
    for (to, out, message) in
        [("f32", dir.path().join("f32"), "f32 keeps the checkpoint"), ("q8", quantized.clone(), "is not empty")]
    {
        let output = quantize(to, &out);
        assert!(!output.status.success(), "{to}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{to}: {stderr}");
    }
}

/// `--cpu-kernels` forces the fallbacks on a CPU that has more: under each ceiling, `backends
/// --kernels` names the product each 16-bit and block format then runs (as this CPU's features
/// and vendor allow), and the
/// logits stay near those of the widest kernels, on the dense and the MoE fixture. Each kernel
/// equals the widest one up to summation order (their own tests; the AVX2 integer dot gives
/// VNNI's bits), but where a sum differs in its last bit (the delta rule's AVX2 kernel, the
/// dequantized sgemm), an activation can land on the other side of an 8-bit rounding step in the
/// next block product, and the random fixtures amplify that layer by layer: the bound is half
/// the format's own distance from the f32 logits (measured: q8 under avx2 a quarter of it on the
/// dense fixture, every other case under 1e-3 of it), where a wrong fallback lands as far off as
/// the format's error or further.
#[test]
fn every_cpu_kernel_ceiling_runs_its_fallbacks_with_the_same_logits() {
    let has = |features: &[&str]| features.iter().all(|f| cpu_has(f));
    let dir = tempfile::tempdir().unwrap();
    for fixture in ["dense/save_pretrained", "moe/hf_layout"] {
        let run = |ceiling: &str, weights: &str| -> Vec<f32> {
            let out = dir.path().join(format!("{}-{ceiling}-{weights}.npy", fixture.replace('/', "-")));
            let output = decider()
                .args(["--cpu-kernels", ceiling, "forward", "--model"])
                .arg(fixture_path(fixture))
                .args(["--ids", "1,2,3,4,5,6,7", "--weights", weights, "--out"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{fixture} {ceiling} {weights}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            npyz::NpyFile::new(&std::fs::read(&out).unwrap()[..]).unwrap().into_vec().unwrap()
        };
        let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let f32_logits = run("avx512", "f32");
        for weights in ["bf16", "q8", "q4"] {
            let widest = run("avx512", weights);
            let rounding = worst(&widest, &f32_logits);
            assert!(rounding > 0.0, "{fixture} {weights}: the format's logits equal f32's");
            for ceiling in ["avx2", "baseline"] {
                let forced = run(ceiling, weights);
                let off = worst(&forced, &widest);
                eprintln!(
                    "{fixture} {weights} --cpu-kernels {ceiling}: {off} off the widest kernels, the format {rounding} off f32"
                );
                assert!(
                    off <= 0.5 * rounding,
                    "{fixture} {weights}: --cpu-kernels {ceiling} is {off} off the widest kernels, the format {rounding} off f32"
                );
            }
        }
    }
    let kernels = |ceiling: &str| -> String {
        let output = decider().args(["--cpu-kernels", ceiling, "backends", "--kernels"]).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let line = |listing: &str, format: &str| -> String {
        let prefix = format!("  {format} ");
        listing
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {format} line: {listing}"))
            .to_owned()
    };
    // Under avx2 and baseline no product may name AVX-512; the 16-bit ones are sgemm on widened
    // panels, and the block formats the AVX2 dot where the CPU has it, else dequantized panels.
    let avx2_dot = has(&["avx2", "fma"]);
    for ceiling in ["baseline", "avx2"] {
        let listing = kernels(ceiling);
        assert!(listing.contains(&format!("--cpu-kernels {ceiling}")), "{listing}");
        assert!(!listing.contains("AVX-512"), "{listing}");
        for format in ["bf16", "f16"] {
            assert!(line(&listing, format).contains("panels widened to f32, then sgemm"), "{listing}");
        }
        for format in ["q8", "q4"] {
            let dot = ceiling == "avx2" && avx2_dot;
            assert_eq!(line(&listing, format).contains("AVX2 integer dot"), dot, "{listing}");
            assert_eq!(line(&listing, format).contains("dequantized to f32"), !dot, "{listing}");
        }
    }
    let widest = kernels("avx512");
    let vnni = has(&["avx512f", "avx512bw", "avx512vnni"]);
    for format in ["q8", "q4"] {
        assert_eq!(line(&widest, format).contains("AVX-512 VNNI"), vnni, "{widest}");
    }
    let bf16_dot = has(&["avx512f", "avx512bw", "avx512vl", "avx512bf16"]);
    assert_eq!(line(&widest, "bf16").contains("vdpbf16ps"), bf16_dot, "{widest}");
    let fma = has(&["avx512f", "avx512vl"]);
    assert_eq!(line(&widest, "bf16").contains("AVX-512 FMAs"), fma && (is_intel() || !bf16_dot), "{widest}");
    // A family that does not exist is refused with the ones that do.
    let bad = decider().args(["--cpu-kernels", "avx3", "backends"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("baseline, avx2, avx512"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Whether the CPU's vendor is Intel (CPUID's "GenuineIntel"; false off x86-64).
fn is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat() == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU has `feature`, as the standard library detects it (false off x86-64).
fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
            "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
            "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
            other => panic!("cpu_has: {other} is not listed"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}
