//! The serial run with JevBench's stop rules (jevbench.md §3.3): a 401, 403 or 429, or three
//! failed requests in a row (a 422 does not count), stops the run; the rest is unattempted.

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

pub fn run(endpoint: &mut dyn Endpoint, items: &[Item], model: &str, progress: bool) -> RunOutcome {
    let bar = if progress { ProgressBar::new(items.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed} elapsed, ETA {eta}]").expect("valid template"),
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
            Err(Failure::Status(422, _)) | Ok(_) => {
                failures_in_a_row = 0;
                None
            }
            Err(_) => {
                failures_in_a_row += 1;
                (failures_in_a_row >= 3).then(|| format!("three failed requests in a row, the last on {}", item.id))
            }
        };
        records.push(Record::score(item, response.map_err(|f| f.to_string()), latency));
        let correct = records.iter().filter(|r| r.correct).count();
        bar.set_message(format!("{correct}/{} correct ({:.1} %) {}", records.len(), 100.0 * correct as f64 / records.len() as f64, item.tier));
        bar.inc(1);
        if stop.is_some() {
            stopped = stop;
            break;
        }
    }
    bar.finish_and_clear();
    RunOutcome { records, stopped }
}
