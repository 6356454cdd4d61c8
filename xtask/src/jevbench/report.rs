//! What a person reads: a terminal table per tier and family, and a self-contained
//! `report.html` with SVG charts (accuracy per tier, reliability diagram, per-family accuracy,
//! latency histogram), the model card's figures beside the run's for a known release, and the
//! items answered wrongly.

use std::fmt::Write;

use super::metrics::{EceBin, Metrics};
use super::model_card::{ModelCard, card_for};
use super::record::Record;
use super::summary::Summary;

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{:.0} ms", v * 1000.0))
}

/// The terminal tables.
pub fn table(summary: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8} {:>9} {:>9}",
        "tier", "correct", "accuracy", "I(pub)", "Brier", "ECE", "valid", "p50", "p95"
    );
    for t in &summary.tiers {
        let (name, m) = (t.tier, &t.metrics);
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>9.3} {:>8.1} {:>7} {:>7} {:>8.3} {:>9} {:>9}",
            name,
            format!("{}/{}", t.correct, t.items),
            t.accuracy,
            t.intelligence,
            opt(m.brier, 3),
            opt(m.ece, 3),
            m.schema_validity_strict,
            ms(m.latency_p50_s),
            ms(m.latency_p95_s)
        );
    }
    let o = &summary.overall;
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>9.3} {:>8} {:>7} {:>7} {:>8.3} {:>9} {:>9}",
        "overall",
        format!("{}/{}", o.correct, summary.selected),
        o.correct as f64 / summary.selected.max(1) as f64,
        opt(summary.intelligence_public_only.weighted, 1),
        opt(o.brier, 3),
        opt(o.ece, 3),
        o.schema_validity_strict,
        ms(o.latency_p50_s),
        ms(o.latency_p95_s)
    );
    if let Some(card) = summary.meta["model"].as_str().and_then(card_for) {
        let published: Vec<String> = summary
            .tiers
            .iter()
            .filter_map(|t| card.correct_in(t.tier).map(|(k, of)| format!("{} {k}/{of}", t.tier)))
            .collect();
        let _ = writeln!(out, "model card ({}): {}", card.model, published.join(", "));
    }
    let _ = writeln!(out, "\n{:<18} {:>9} {:>9}", "family", "correct", "accuracy");
    for (family, m) in &summary.families {
        let _ = writeln!(out, "{:<18} {:>9} {:>9.3}", family, format!("{}/{}", m.correct, m.n), m.accuracy);
    }
    let p = &summary.paraphrase;
    let _ = writeln!(
        out,
        "\nparaphrase agreement (standard pairs): {} over {} pairs; macro accuracy over families {:.3}",
        opt(p.agreement, 3),
        p.pairs,
        summary.macro_accuracy
    );
    let _ = writeln!(
        out,
        "I(pub): chance-corrected accuracy on the public items only (not the board's Intelligence, which adds a judge tier and held-out items)."
    );
    if let Some(reason) = &summary.stopped_early {
        let _ = writeln!(out, "STOPPED EARLY: {reason}; {} of {} items attempted", summary.attempted, summary.selected);
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An SVG of `w`×`h` with the chart's title on its first line (plots start at `TOP`).
fn chart(w: f64, h: f64, title: &str) -> String {
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{}">"#,
        escape(title)
    );
    let _ = write!(
        svg,
        r##"<text x="{}" y="16" font-size="13" font-weight="bold" text-anchor="middle">{}</text>"##,
        w / 2.0,
        escape(title)
    );
    svg
}

/// Where a chart's plot area starts, below its title.
const TOP: f64 = 30.0;

/// Reliability diagram: accuracy against mean confidence per bin, with each bin's item count.
fn reliability_svg(bins: &[EceBin]) -> String {
    let (w, h, pad) = (360.0, 320.0, 40.0);
    let x = |v: f64| pad + v * (w - 2.0 * pad);
    let y = |v: f64| h - pad - v * (h - pad - TOP - 14.0);
    let mut svg = chart(w, h, "Reliability");
    let _ = write!(
        svg,
        r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-dasharray="4"/>"##,
        x(0.0),
        y(0.0),
        x(1.0),
        y(1.0)
    );
    for b in bins.iter().filter(|b| b.n > 0) {
        let (x0, x1) = (x(b.lower) + 1.0, x(b.upper) - 1.0);
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4c78a8"><title>{:.1}-{:.1}: {} items, accuracy {:.3}, confidence {:.3}</title></rect>"##,
            y(b.accuracy),
            x1 - x0,
            y(0.0) - y(b.accuracy),
            b.lower,
            b.upper,
            b.n,
            b.accuracy,
            b.confidence
        );
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"##,
            (x0 + x1) / 2.0,
            y(b.accuracy) - 4.0,
            b.n
        );
        let _ =
            write!(svg, r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#e45756"/>"##, x(b.confidence), y(b.accuracy));
    }
    let _ = write!(
        svg,
        r##"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{pad}" y1="{}" x2="{pad}" y2="{}" stroke="#333"/>"##,
        y(0.0),
        w - pad,
        y(0.0),
        y(1.0),
        y(0.0)
    );
    for t in [0.0, 0.5, 1.0] {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{t}</text>"##,
            x(t),
            h - pad + 14.0
        );
        let _ = write!(
            svg,
            r##"<text x="{}" y="{:.1}" font-size="10" text-anchor="end">{t}</text>"##,
            pad - 4.0,
            y(t) + 3.0
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">confidence (top label); item count above each bin</text>"##,
        w / 2.0,
        h - 6.0
    );
    let _ = write!(
        svg,
        r##"<text x="12" y="{}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {})">accuracy</text>"##,
        h / 2.0,
        h / 2.0
    );
    svg.push_str("</svg>");
    svg
}

/// The top of a 0-based accuracy axis that holds `highest`: the next quarter up (at least a
/// quarter, at most 1), so bars fill the plot rather than its bottom half.
fn axis_top(highest: f64) -> f64 {
    ((highest * 4.0).floor() + 1.0).min(4.0) / 4.0
}

/// A y axis from 0 to `top` at the plot's left edge `x`, with a tick, label and grid line every
/// tenth (up to 0.5) or quarter.
fn y_axis(svg: &mut String, x: f64, right: f64, top: f64, y: impl Fn(f64) -> f64) {
    let step = if top <= 0.5 { 0.1 } else { 0.25 };
    let _ = write!(svg, r##"<line x1="{x}" y1="{:.1}" x2="{x}" y2="{:.1}" stroke="#333"/>"##, y(0.0), y(top));
    for k in 0..=((top / step).round() as usize) {
        let v = k as f64 * step;
        let _ = write!(
            svg,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{right:.1}" y2="{:.1}" stroke="#eee"/><line x1="{:.1}" y1="{:.1}" x2="{x}" y2="{:.1}" stroke="#333"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{v:.2}</text>"##,
            x,
            y(v),
            y(v),
            x - 4.0,
            y(v),
            y(v),
            x - 6.0,
            y(v) + 3.5
        );
    }
}

/// Accuracy per tier against the board's chance level, with the model card's figure where the
/// model is a known release, on an accuracy axis.
fn tiers_svg(summary: &Summary, card: Option<&ModelCard>) -> String {
    let (w, h, pad, left) = (360.0, 320.0, 40.0, 52.0);
    let published = |tier: &str| card.and_then(|c| c.correct_in(tier)).map(|(k, of)| k as f64 / of as f64);
    let highest = summary
        .tiers
        .iter()
        .flat_map(|t| [Some(t.accuracy), Some(t.chance_board), published(t.tier)])
        .flatten()
        .fold(0.0, f64::max);
    let top = axis_top(highest);
    let y = |v: f64| h - pad - v / top * (h - pad - TOP - 14.0);
    let slot = (w - left - pad / 2.0) / summary.tiers.len().max(1) as f64;
    let mut svg = chart(w, h, "Accuracy per tier");
    y_axis(&mut svg, left, w - pad / 2.0, top, y);
    let _ = write!(
        svg,
        r##"<text x="12" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {:.1})">accuracy</text>"##,
        y(top / 2.0),
        y(top / 2.0)
    );
    for (i, t) in summary.tiers.iter().enumerate() {
        let (x0, x1) = (left + i as f64 * slot + 10.0, left + (i + 1) as f64 * slot - 10.0);
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#72b7b2"/>"##,
            y(t.accuracy),
            x1 - x0,
            y(0.0) - y(t.accuracy)
        );
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}/{}</text>"##,
            (x0 + x1) / 2.0,
            y(t.accuracy) - 4.0,
            t.correct,
            t.items
        );
        let _ = write!(
            svg,
            r##"<line x1="{x0:.1}" y1="{:.1}" x2="{x1:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="3"><title>chance {:.3}</title></line>"##,
            y(t.chance_board),
            y(t.chance_board),
            t.chance_board
        );
        if let Some(accuracy) = published(t.tier) {
            let _ = write!(
                svg,
                r##"<line x1="{x0:.1}" y1="{:.1}" x2="{x1:.1}" y2="{:.1}" stroke="#e45756" stroke-width="3"><title>model card {accuracy:.3}</title></line>"##,
                y(accuracy),
                y(accuracy)
            );
        }
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"##,
            (x0 + x1) / 2.0,
            h - pad + 14.0,
            t.tier
        );
    }
    let _ =
        write!(svg, r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##, y(0.0), w - pad / 2.0, y(0.0));
    let legend = if card.is_some() { "dashed: chance; red: model card" } else { "dashed: the board's chance level" };
    let _ =
        write!(svg, r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">{legend}</text>"##, w / 2.0, h - 6.0);
    svg.push_str("</svg>");
    svg
}

/// Horizontal bars of accuracy per family.
fn families_svg(families: &[(String, &Metrics)]) -> String {
    let (w, row, left) = (560.0, 20.0, 140.0);
    let plot_bottom = row * families.len() as f64 + TOP;
    let h = plot_bottom + 30.0;
    let mut svg = chart(w, h, "Accuracy per family");
    // The accuracy axis under the bars, with a tick and grid line every quarter.
    let _ =
        write!(svg, r##"<line x1="{left}" y1="{plot_bottom}" x2="{}" y2="{plot_bottom}" stroke="#333"/>"##, w - 80.0);
    for quarter in 0..=4 {
        let x = left + quarter as f64 / 4.0 * (w - left - 80.0);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{plot_bottom}" stroke="#eee"/><line x1="{x:.1}" y1="{plot_bottom}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{} %</text>"##,
            plot_bottom + 4.0,
            plot_bottom + 15.0,
            quarter * 25
        );
    }
    for (i, (family, m)) in families.iter().enumerate() {
        let y = TOP + i as f64 * row;
        let width = m.accuracy * (w - left - 80.0);
        let _ = write!(
            svg,
            r##"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            left - 6.0,
            y + 13.0,
            escape(family)
        );
        let _ =
            write!(svg, r##"<rect x="{left}" y="{y:.1}" width="{width:.1}" height="{}" fill="#54a24b"/>"##, row - 4.0);
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="11">{}/{} ({:.0} %)</text>"##,
            left + width + 4.0,
            y + 13.0,
            m.correct,
            m.n,
            m.accuracy * 100.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// `ms` milliseconds as a tick label.
fn duration_label(ms: f64) -> String {
    if ms >= 1000.0 { format!("{} s", ms / 1000.0) } else { format!("{ms} ms") }
}

/// Histogram of per-item latency in 24 bins of equal width on a log axis (latencies span
/// decades: a short state against a 32k-token one), with p50 and p95 marked.
fn latency_svg(records: &[Record], p50_s: Option<f64>, p95_s: Option<f64>) -> String {
    const BINS: usize = 24;
    let (w, h, pad) = (560.0, 240.0, 40.0);
    let mut svg = chart(w, h, "Latency per item");
    let values: Vec<f64> = records.iter().map(|r| r.latency_s * 1000.0).filter(|&v| v > 0.0).collect();
    if values.is_empty() {
        svg.push_str(r##"<text x="280" y="120" font-size="11" text-anchor="middle">no items</text></svg>"##);
        return svg;
    }
    let lowest = values.iter().cloned().fold(f64::INFINITY, f64::min).log10().floor();
    let highest = values.iter().cloned().fold(0.0, f64::max).log10().ceil().max(lowest + 1.0);
    let x = |ms: f64| pad + (ms.log10() - lowest) / (highest - lowest) * (w - 2.0 * pad);
    let mut counts = [0usize; BINS];
    for v in &values {
        counts[(((v.log10() - lowest) / (highest - lowest) * BINS as f64) as usize).min(BINS - 1)] += 1;
    }
    let top = *counts.iter().max().unwrap_or(&1) as f64;
    let bar = (w - 2.0 * pad) / BINS as f64;
    let bin_ms = |i: usize| 10f64.powf(lowest + (highest - lowest) * i as f64 / BINS as f64);
    for (i, &c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let height = c as f64 / top * (h - pad - TOP - 20.0);
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{height:.1}" fill="#f58518"><title>{:.0}-{:.0} ms: {c} items</title></rect>"##,
            pad + i as f64 * bar + 1.0,
            h - pad - height,
            bar - 2.0,
            bin_ms(i),
            bin_ms(i + 1)
        );
    }
    let _ = write!(svg, r##"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##, h - pad, w - pad, h - pad);
    for decade in lowest as i32..=highest as i32 {
        let ms = 10f64.powi(decade);
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#333"/><text x="{0:.1}" y="{3}" font-size="10" text-anchor="middle">{4}</text>"##,
            x(ms),
            h - pad,
            h - pad + 4.0,
            h - pad + 14.0,
            duration_label(ms)
        );
    }
    // The count axis: ticks at whole numbers of items, about four of them.
    let y = |count: f64| h - pad - count / top * (h - pad - TOP - 20.0);
    let step = (top / 4.0).ceil().max(1.0);
    let _ = write!(svg, r##"<line x1="{pad}" y1="{}" x2="{pad}" y2="{:.1}" stroke="#333"/>"##, h - pad, y(top));
    let mut tick = 0.0;
    while tick <= top {
        let _ = write!(
            svg,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{pad}" y2="{:.1}" stroke="#333"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{tick}</text>"##,
            pad - 4.0,
            y(tick),
            y(tick),
            pad - 6.0,
            y(tick) + 3.5
        );
        tick += step;
    }
    let _ = write!(
        svg,
        r##"<text x="10" y="{0:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 10 {0:.1})">items</text>"##,
        y(top / 2.0)
    );
    for (name, seconds) in [("p50", p50_s), ("p95", p95_s)] {
        let Some(ms) = seconds.map(|s| s * 1000.0).filter(|&ms| ms > 0.0) else { continue };
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#333" stroke-dasharray="4"/><text x="{0:.1}" y="{3}" font-size="10" text-anchor="middle">{name} {ms:.0} ms</text>"##,
            x(ms),
            TOP + 12.0,
            h - pad,
            TOP + 8.0
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">latency (log scale), {} items; tallest bar {top} items</text>"##,
        w / 2.0,
        h - 6.0,
        values.len()
    );
    svg.push_str("</svg>");
    svg
}

/// The items answered wrongly, the most confidently wrong first: what was expected and answered,
/// with their probabilities; a note only for an item that failed or whose distribution was
/// invalid (the others simply had another label more probable).
fn wrong_items(records: &[Record]) -> String {
    let probability = |r: &Record, label: Option<&str>| label.and_then(|l| r.probs.as_ref()?.get(l)?.as_f64());
    let mut wrong: Vec<&Record> = records.iter().filter(|r| !r.correct).collect();
    let how_wrong = |r: &Record| {
        probability(r, r.predicted.as_deref()).unwrap_or(1.0) - probability(r, Some(&r.expected)).unwrap_or(0.0)
    };
    wrong.sort_by(|a, b| how_wrong(b).total_cmp(&how_wrong(a)));
    let mut out = format!("<h2>Items answered wrongly ({} of {})</h2>\n", wrong.len(), records.len());
    if wrong.is_empty() {
        return out;
    }
    let note = |r: &Record| r.error.clone().or_else(|| (!r.valid).then(|| "invalid distribution".to_string()));
    let notes = wrong.iter().any(|r| note(r).is_some());
    let _ = writeln!(
        out,
        "<table class=\"wrong\"><colgroup><col style=\"width:24%\"><col style=\"width:8%\"><col style=\"width:14%\"><col><col style=\"width:7%\"><col><col style=\"width:7%\">{}</colgroup><tr><th>item</th><th>tier</th><th>family</th><th>expected</th><th>p</th><th>answered</th><th>p</th>{}</tr>",
        if notes { "<col style=\"width:20%\">" } else { "" },
        if notes { "<th>note</th>" } else { "" }
    );
    for r in wrong {
        let note = if notes { format!("<td>{}</td>", escape(&note(r).unwrap_or_default())) } else { String::new() };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{note}</tr>",
            escape(&r.task_id),
            r.tier,
            escape(&r.family),
            escape(&r.expected),
            opt(probability(r, Some(&r.expected)), 3),
            escape(r.predicted.as_deref().unwrap_or("-")),
            opt(probability(r, r.predicted.as_deref()), 3),
        );
    }
    out.push_str("</table>\n");
    out
}

/// The self-contained HTML report.
pub fn html(summary: &Summary, records: &[Record]) -> String {
    let meta = &summary.meta;
    let families: Vec<(String, &Metrics)> = summary.families.iter().map(|(f, m)| (f.clone(), m)).collect();
    let random = meta["random_weights"].as_bool() == Some(true);
    let card = card_for(meta["model"].as_str().unwrap_or(""));
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>JevBench public items</title><style>body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;white-space:nowrap}th:first-child,td:first-child{text-align:left}.warn{background:#fff3cd;border:1px solid #e0c060;padding:8px}.charts{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0}figcaption{font-size:13px;color:#555}pre{font-size:12px}table.wrong{width:100%;table-layout:fixed}table.wrong td,table.wrong th{white-space:normal;overflow-wrap:anywhere;text-align:left}</style></head><body>\n",
    );
    let _ = writeln!(out, "<h1>JevBench public items: {}</h1>", escape(meta["model"].as_str().unwrap_or("?")));
    let _ = writeln!(
        out,
        "<p>backend <b>{}</b>, weights <b>{}</b>, {} &middot; {} on {} logical CPUs, {} compute threads &middot; {} &middot; decider {} &middot; burn {}</p>",
        escape(meta["backend"].as_str().unwrap_or("?")),
        escape(meta["weights"].as_str().unwrap_or("as the endpoint serves them")),
        escape(meta["source"].as_str().unwrap_or("")),
        escape(meta["machine"]["cpu"].as_str().unwrap_or("?")),
        meta["machine"]["logical_cpus"],
        meta["machine"]["threads"],
        escape(meta["date"].as_str().unwrap_or("")),
        escape(meta["versions"]["decider"].as_str().unwrap_or("")),
        escape(meta["versions"]["burn"].as_str().unwrap_or(""))
    );
    if random {
        out.push_str("<p class=\"warn\">This run used the <b>demo</b> model: random weights. Accuracy near chance is what is expected; the figures test the pipeline, not a model.</p>\n");
    }
    if let Some(reason) = &summary.stopped_early {
        let _ = writeln!(
            out,
            "<p class=\"warn\">Stopped early: {}; {} of {} items attempted.</p>",
            escape(reason),
            summary.attempted,
            summary.selected
        );
    }
    let card_header = card.map_or_else(String::new, |c| format!("<th>model card ({})</th>", escape(c.model)));
    let _ = writeln!(
        out,
        "<table><tr><th>tier</th><th>correct</th><th>accuracy</th>{card_header}<th>I (public only)</th><th>chance (board / public)</th><th>Brier</th><th>ECE</th><th>strict valid</th><th>p50</th><th>p95</th></tr>"
    );
    for t in &summary.tiers {
        let (name, m) = (t.tier, &t.metrics);
        let published = card.map_or_else(String::new, |c| match c.correct_in(name) {
            Some((k, of)) => format!("<td>{k}/{of} ({:.3})</td>", k as f64 / of as f64),
            None => "<td>-</td>".into(),
        });
        let _ = writeln!(
            out,
            "<tr><td>{name}</td><td>{}/{}</td><td>{:.3}</td>{published}<td>{:.1}</td><td>{:.3} / {:.3}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            t.correct,
            t.items,
            t.accuracy,
            t.intelligence,
            t.chance_board,
            t.chance_public,
            opt(m.brier, 3),
            opt(m.ece, 3),
            m.schema_validity_strict,
            ms(m.latency_p50_s),
            ms(m.latency_p95_s)
        );
    }
    let o = &summary.overall;
    let card_cell = if card.is_some() { "<th></th>" } else { "" };
    let _ = writeln!(
        out,
        "<tr><th>overall</th><th>{}/{}</th><th>{:.3}</th>{card_cell}<th>{}</th><th></th><th>{}</th><th>{}</th><th>{:.3}</th><th>{}</th><th>{}</th></tr></table>",
        o.correct,
        summary.selected,
        o.correct as f64 / summary.selected.max(1) as f64,
        opt(summary.intelligence_public_only.weighted, 1),
        opt(o.brier, 3),
        opt(o.ece, 3),
        o.schema_validity_strict,
        ms(o.latency_p50_s),
        ms(o.latency_p95_s)
    );
    let _ = writeln!(
        out,
        "<p>Paraphrase agreement over the standard tier's {} pairs: {}. Ordinal MAE (score items): {}. Macro accuracy over families: {:.3}.</p>",
        summary.paraphrase.pairs,
        opt(summary.paraphrase.agreement, 3),
        opt(o.ordinal_mae, 3),
        summary.macro_accuracy
    );
    out.push_str("<div class=\"charts\">\n");
    let _ = writeln!(
        out,
        "<figure>{}<figcaption>Correct items per tier (bars) against the board's chance level{}.</figcaption></figure>",
        tiers_svg(summary, card),
        if card.is_some() { " and the model card's figure" } else { "" }
    );
    let _ = writeln!(
        out,
        "<figure>{}<figcaption>Accuracy per confidence bin (bars, item count above), mean confidence (dots); ECE {}.</figcaption></figure>",
        reliability_svg(&o.ece_bins),
        opt(o.ece, 3)
    );
    let _ = writeln!(out, "<figure>{}<figcaption>Accuracy per family.</figcaption></figure>", families_svg(&families));
    let _ = writeln!(
        out,
        "<figure>{}<figcaption>Latency per item, serial, caller's wall time.</figcaption></figure>",
        latency_svg(records, o.latency_p50_s, o.latency_p95_s)
    );
    out.push_str("</div>\n");
    out.push_str(&wrong_items(records));
    out.push_str("<h2>What these numbers are</h2><ul>\n");
    for note in &summary.notes {
        let _ = writeln!(out, "<li>{}</li>", escape(note));
    }
    out.push_str("</ul></body></html>\n");
    out
}
