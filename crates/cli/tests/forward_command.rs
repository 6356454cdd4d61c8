//! `decider forward` end to end: the binary loads a fixture folder, writes the logits as .npy,
//! and they equal transformers' reference logits; bad input gives a clear error and exit code.

use std::process::Command;

use integration_tests::{Reference, fixture_path, relative_check};

fn decider() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_decider"));
    command.env("RUST_BACKTRACE", "0");
    command
}

#[test]
fn forward_writes_the_reference_logits() {
    let reference = Reference::open("moe");
    let ids = reference.input_ids::<burn::backend::NdArray>("len7", &Default::default());
    let ids: Vec<String> = ids.into_data().iter::<i64>().map(|id| id.to_string()).collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.npy");
    let status = decider()
        .args(["forward", "--model"])
        .arg(fixture_path("moe/hf_layout"))
        .args(["--ids", &ids.join(","), "--backend", "ndarray", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.contains("loaded") && stdout.contains("tokens/s"), "prints load and forward times: {stdout}");

    let bytes = std::fs::read(&out).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[7, 256]);
    let logits: Vec<f32> = npy.into_vec().unwrap();
    let (expected, _) = reference.f32("len7.logits");
    relative_check("decider forward logits", &logits, &expected, 1e-4);
}

#[test]
fn bad_input_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.npy");
    let cases: [(&[&str], &str); 3] = [
        (&["--ids", "1,2,256"], "token id 256 is out of range for this model's vocab_size 256"),
        (&["--ids", "1,x"], "invalid value 'x'"),
        (&["--ids", "1", "--backend", "tpu"], "possible values"),
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
    let output = decider().args(["forward", "--model", "/no/such/model", "--ids", "1", "--out"]).arg(&out).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("/no/such/model/config.json"));
}
