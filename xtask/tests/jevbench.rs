//! `cargo xtask jevbench` end to end on the demo model: all 231 public items in-process, and
//! the `--endpoint` path against our own server giving the same per-item answers.

use std::path::Path;

use burn::backend::NdArray;
use decider::Decider;
use decider_cli::model_source::{ModelSource, WeightsArg};
use decider_cli::serve::{ServeArgs, serve};
use serde_json::Value;
use xtask::jevbench::client::{Endpoint, Failure, Http, InProcess};
use xtask::jevbench::{JevbenchArgs, assets_dir, run_and_report, select_items};

fn args(out: &Path, limit: Option<usize>) -> JevbenchArgs {
    JevbenchArgs {
        model: ModelSource::Demo,
        weights: WeightsArg { choice: Default::default() },
        backend: decider_cli::backend::BackendName::default_name(),
        tiers: vec!["easy".into(), "standard".into(), "hard".into()],
        endpoint: None,
        request_model: "decider".into(),
        out: out.to_path_buf(),
        limit,
        quiet: true,
    }
}

fn records(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_public_items_are_the_published_ones() {
    // load_tier checks each file's SHA-256 against the manifest and its row count.
    let items = select_items(&assets_dir(), &["easy".into(), "standard".into(), "hard".into()], None).unwrap();
    assert_eq!(items.len(), 231);
    let counts: Vec<usize> =
        ["easy", "standard", "hard"].iter().map(|t| items.iter().filter(|i| i.tier == *t).count()).collect();
    assert_eq!(counts, [48, 72, 111]);
    let mut ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 231, "ids are unique");
    // Choice criteria keep the file's (alphabetical) key order, which decides the option letters.
    let first = &items[0].question["criteria"];
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_ne!(items[0].labels.iter().collect::<Vec<_>>(), keys, "labels keep the author's order, criteria the file's");
}

#[test]
fn all_231_items_on_the_demo_model() {
    let out = tempfile::tempdir().unwrap();
    let args = args(out.path(), None);
    let decider = Decider::<NdArray>::demo(&Default::default());
    let weights = Some(decider.model().format.to_string());
    let meta = xtask::jevbench::meta(&args, decider.name(), decider.source(), weights, true);
    let summary = run_and_report(&args, &mut InProcess(&decider), meta).unwrap();
    assert_eq!((summary.attempted, summary.selected, summary.stopped_early.as_deref()), (231, 231, None));
    assert_eq!(
        summary.tiers.iter().map(|t| (t.tier, t.items)).collect::<Vec<_>>(),
        [("easy", 48), ("standard", 72), ("hard", 111)]
    );
    assert_eq!(
        summary.overall.schema_validity_strict, 1.0,
        "every answer is a valid distribution over the exact labels"
    );
    assert_eq!(summary.families.len(), 18);
    assert_eq!(summary.paraphrase.pairs, 36);
    let records = records(out.path());
    assert_eq!(records.len(), 231);
    let correct = records.iter().filter(|r| r["correct"] == true).count();
    assert_eq!(correct, summary.overall.correct);
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 4, "tier bars, reliability diagram, family bars, latency histogram");
    for title in ["Accuracy per tier", "Reliability", "Accuracy per family", "Latency per item"] {
        assert!(html.contains(&format!(">{title}</text>")), "the chart {title} has its title");
    }
    assert!(
        html.contains("p50 ") && html.contains("p95 ") && html.contains("log scale"),
        "the latency chart marks p50 and p95 on a log axis"
    );
    let wrong = 231 - summary.overall.correct;
    assert!(html.contains(&format!("Items answered wrongly ({wrong} of 231)")));
    let wrong_table = &html[html.find("<table class=\"wrong\">").expect("the wrong items' table")..];
    let wrong_table = &wrong_table[..wrong_table.find("</table>").unwrap()];
    assert_eq!(wrong_table.matches("<tr>").count(), wrong + 1, "a header and one row per item answered wrongly");
    assert!(!wrong_table.contains("note"), "no note column when every wrong item simply had another label ahead");
    // The most confidently wrong first: p(answered) - p(expected) never grows down the table.
    let margins: Vec<f64> = wrong_table
        .split("<tr>")
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split("<td>").skip(1).map(|c| c.split("</td>").next().unwrap()).collect();
            cells[6].parse::<f64>().unwrap() - cells[4].parse::<f64>().unwrap()
        })
        .collect();
    // (Each printed p is rounded to 3 places, so a printed margin is within 0.001 of the sorted one.)
    assert!(margins.windows(2).all(|m| m[0] >= m[1] - 0.0011), "{margins:?}");
    // The tier chart has an accuracy axis with its ticks.
    assert!(html.contains(">accuracy</text>") && html.contains(">0.00</text>"), "the tier chart's y axis");
    // The header names the weight format and the machine.
    assert!(html.contains("weights <b>f32</b>") && html.contains("compute threads"), "the run's header");
    assert!(html.contains("random weights"));
    assert!(!html.contains("model card"), "the demo model has no model card");
    // A run of a known release shows its model card's figures beside the run's.
    let mut known = summary;
    known.meta["model"] = "decider-2b-v10".into();
    let html = xtask::jevbench::report::html(&known, &[]);
    assert!(
        html.contains("<th>model card (decider-2b v10)</th>")
            && html.contains("<td>61/72 (0.847)</td>")
            && html.contains("<td>51/111 (0.459)</td>"),
        "{html}"
    );
    assert!(
        xtask::jevbench::report::table(&known)
            .contains("model card (decider-2b v10): easy 48/48, standard 61/72, hard 51/111")
    );
    let summary = known;
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(results["attempted"], 231);
    assert_eq!(results["meta"]["weights"], "f32");
    let machine = &results["meta"]["machine"];
    assert!(
        machine["cpu"].as_str().is_some_and(|cpu| !cpu.is_empty()) && machine["threads"].as_u64() >= Some(1),
        "{machine}"
    );
    print!("{}", xtask::jevbench::report::table(&summary));
    // A second run into the same folder is refused before its first request, and the first
    // run's files are kept.
    let again = run_and_report(&args, &mut NeverCalled, Value::Null);
    assert!(again.unwrap_err().to_string().contains("already holds a run"));
    assert_eq!(crate::records(out.path()), records);
}

/// An endpoint for runs that must not start.
struct NeverCalled;

impl Endpoint for NeverCalled {
    fn post(&mut self, _: &Value) -> Result<Value, Failure> {
        panic!("a request was sent")
    }
}

#[test]
fn endpoint_against_our_server_gives_the_in_process_answers() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        serve::<NdArray>(
            &ServeArgs::new(ModelSource::Demo),
            &Default::default(),
            async { stopped.await.unwrap_or(()) },
            |_, addr| ready_tx.send(addr).unwrap(),
        )
    });
    let addr = ready.recv().expect("the server starts");

    let http_out = tempfile::tempdir().unwrap();
    let local_out = tempfile::tempdir().unwrap();
    let mut http_args = args(http_out.path(), Some(4));
    // The route's full URL, as other JevBench clients take it (a base URL works too).
    http_args.endpoint = Some(format!("http://{addr}/v1/systemone"));
    run_and_report(&http_args, &mut Http::new(http_args.endpoint.as_deref().unwrap()), Value::Null).unwrap();
    let decider = Decider::<NdArray>::demo(&Default::default());
    run_and_report(&args(local_out.path(), Some(4)), &mut InProcess(&decider), Value::Null).unwrap();

    let (over_http, local) = (records(http_out.path()), records(local_out.path()));
    assert_eq!(over_http.len(), 12);
    for (h, l) in over_http.iter().zip(&local) {
        assert_eq!(h["task_id"], l["task_id"]);
        assert_eq!(h["probs_as_returned"], l["probs_as_returned"], "{}", h["task_id"]);
        assert_eq!((&h["predicted"], &h["correct"], &h["usage"]), (&l["predicted"], &l["correct"], &l["usage"]));
    }
    stop.send(()).unwrap();
    server.join().unwrap().unwrap();
}
