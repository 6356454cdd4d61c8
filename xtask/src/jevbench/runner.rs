//! The serial run with JevBench's stop rules: a 401, 403 or 429, or three
//! failed requests in a row (a 422 does not count), stops the run; the rest is unattempted.
//! Each record is written out as soon as its item is scored, so an interrupted run keeps them.

use std::io::Write;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::client::{Endpoint, Failure, request_body};
use super::items::Item;
use super::record::Record;

/// The records of the items attempted, in item order, and why the run stopped early (if it did).
pub struct RunOutcome {
    pub records: Vec<Record>,
    pub stopped: Option<String>,
}

/// Runs `items` in order, writing each record to `sink` as a JSON line when it is scored.
pub fn run(
    endpoint: &mut dyn Endpoint,
    items: &[Item],
    model: &str,
    progress: bool,
    sink: &mut dyn Write,
) -> std::io::Result<RunOutcome> {
    let bar = if progress { ProgressBar::new(items.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed} elapsed, ETA {eta}]")
            .expect("valid template"),
    );
    let mut records = Vec::with_capacity(items.len());
    let mut failures_in_a_row = 0;
    let mut stopped = None;
    for item in items {
        let body = request_body(item, model);
        let start = Instant::now();
        let response = endpoint.post(&body);
        let latency = start.elapsed().as_secs_f64();
        let stop = match &response {
            Err(Failure::Status(code @ (401 | 403 | 429), _)) => Some(format!("HTTP {code} on {}", item.id)),
            Ok(_) => {
                failures_in_a_row = 0;
                None
            }
            // A refused question is the answer's failure, not the endpoint's: it neither counts
            // towards the three nor resets them.
            Err(Failure::Status(422, _)) => None,
            Err(_) => {
                failures_in_a_row += 1;
                (failures_in_a_row >= 3).then(|| format!("three failed requests in a row, the last on {}", item.id))
            }
        };
        let record = Record::score(item, response.map_err(|f| f.to_string()), latency);
        writeln!(sink, "{}", serde_json::to_string(&record)?)?;
        sink.flush()?;
        records.push(record);
        let correct = records.iter().filter(|r| r.correct).count();
        bar.set_message(format!(
            "{correct}/{} correct ({:.1} %) {}",
            records.len(),
            100.0 * correct as f64 / records.len() as f64,
            item.tier
        ));
        bar.inc(1);
        if stop.is_some() {
            stopped = stop;
            break;
        }
    }
    bar.finish_and_clear();
    Ok(RunOutcome { records, stopped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// An endpoint that replays canned outcomes.
    struct Replay(Vec<Result<Value, Failure>>);

    impl Endpoint for Replay {
        fn post(&mut self, _: &Value) -> Result<Value, Failure> {
            self.0.remove(0)
        }
    }

    fn items(n: usize) -> Vec<Item> {
        (0..n)
            .map(|i| Item {
                tier: "easy",
                id: format!("item-{i}"),
                family: "f".into(),
                split: "public".into(),
                group: None,
                state: json!("s"),
                question: json!({"type": "noul", "instructions": "q"}),
                labels: vec!["no".into(), "yes".into()],
                expected: "yes".into(),
            })
            .collect()
    }

    fn ok() -> Result<Value, Failure> {
        Ok(json!({"answers": {"decision": {"type": "noul", "noul": 0.9}}}))
    }

    fn down() -> Result<Value, Failure> {
        Err(Failure::Transport("connection refused".into()))
    }

    #[test]
    fn three_failures_in_a_row_stop_the_run_and_422_does_not_count() {
        let unprocessable = || Err(Failure::Status(422, "bad".into()));
        let outcomes = vec![ok(), down(), down(), unprocessable(), down(), ok(), ok()];
        let mut lines = Vec::new();
        let outcome = run(&mut Replay(outcomes), &items(7), "m", false, &mut lines).unwrap();
        assert_eq!(outcome.records.len(), 5, "stopped after the third failure");
        let written: Vec<Value> =
            String::from_utf8(lines).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(written.len(), 5, "one line per record");
        assert_eq!(written[4]["task_id"], "item-4");
        assert!(outcome.stopped.unwrap().contains("item-4"));
        assert_eq!(outcome.records.iter().filter(|r| r.correct).count(), 1);
    }

    #[test]
    fn rate_limits_and_auth_errors_stop_at_once() {
        for code in [401, 403, 429] {
            let outcome = run(
                &mut Replay(vec![ok(), Err(Failure::Status(code, String::new())), ok()]),
                &items(3),
                "m",
                false,
                &mut Vec::new(),
            )
            .unwrap();
            assert_eq!(outcome.records.len(), 2, "HTTP {code}");
        }
        let outcome =
            run(&mut Replay(vec![ok(), down(), ok(), down(), ok()]), &items(5), "m", false, &mut Vec::new()).unwrap();
        assert_eq!(
            (outcome.records.len(), outcome.stopped),
            (5, None),
            "failures that are not in a row do not stop it"
        );
    }
}
