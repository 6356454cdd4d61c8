//! The JevBench public items (assets/jevbench, MIT): 48 easy, 72 standard ("original"), 111 hard.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A tier: its name, file and the SHA-256 recorded in the items' manifest.
pub struct Tier {
    pub name: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    pub count: usize,
    /// Chance accuracy of the board's frozen tier (public + held-out items), for Intelligence.
    pub board_chance: f64,
}

pub const TIERS: [Tier; 3] = [
    Tier {
        name: "easy",
        file: "easy.jsonl",
        sha256: "3b8afa6e55e4decf1c8e116910443215690951dd51e15b7a6e4b813bc83c1eae",
        count: 48,
        board_chance: 0.28403,
    },
    Tier {
        name: "standard",
        file: "original.jsonl",
        sha256: "157c355d5d07fba47d516acdb048607a5ee4ef14347bbf87cf67dac73d1a193e",
        count: 72,
        board_chance: 0.31667,
    },
    Tier {
        name: "hard",
        file: "hard.jsonl",
        sha256: "5ed49f0a43a468993747a22b007fe65fc1187ed433d3c3a95ff9b69a293a8e34",
        count: 111,
        board_chance: 0.33644,
    },
];

/// One public item. `question` and `state` keep the file's key order.
#[derive(Clone, Debug)]
pub struct Item {
    pub tier: &'static str,
    pub id: String,
    pub family: String,
    pub split: String,
    pub group: Option<String>,
    pub state: Value,
    pub question: Value,
    pub labels: Vec<String>,
    /// The gold label (a score's level index as a string).
    pub expected: String,
}

impl Item {
    pub fn kind(&self) -> &str {
        self.question["type"].as_str().unwrap_or("choice")
    }
}

/// Reads a tier file, checking its SHA-256 and row count.
pub fn load_tier(dir: &Path, tier: &Tier) -> anyhow::Result<Vec<Item>> {
    let path = dir.join(tier.file);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let digest = format!("{:x}", Sha256::digest(&bytes));
    if digest != tier.sha256 {
        bail!("{}: sha256 {digest}, expected {} (the JevBench public items as published)", path.display(), tier.sha256);
    }
    let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))?;
    let items = text
        .lines()
        .enumerate()
        .map(|(n, line)| parse_item(tier.name, line).with_context(|| format!("{} line {}", path.display(), n + 1)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if items.len() != tier.count {
        bail!("{}: {} items, expected {}", path.display(), items.len(), tier.count);
    }
    Ok(items)
}

fn parse_item(tier: &'static str, line: &str) -> anyhow::Result<Item> {
    let row: Value = serde_json::from_str(line)?;
    let text = |key: &str| row[key].as_str().map(str::to_owned).with_context(|| format!("\"{key}\" must be a string"));
    let expected = match &row["expected"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => bail!("\"expected\" must be a label or a level, got {other}"),
    };
    let labels = row["labels"]
        .as_array()
        .context("\"labels\" must be a list")?
        .iter()
        .map(|l| l.as_str().map(str::to_owned).context("labels are strings"))
        .collect::<anyhow::Result<_>>()?;
    Ok(Item {
        tier,
        id: text("id")?,
        family: text("family")?,
        split: text("split")?,
        group: row["group"].as_str().map(str::to_owned),
        state: row["state"].clone(),
        question: row["question"].clone(),
        labels,
        expected,
    })
}
