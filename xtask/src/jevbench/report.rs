//! What a person reads: a terminal table per tier and family, and a self-contained
//! `report.html` with SVG charts (reliability diagram, per-family accuracy, latency histogram).

use std::fmt::Write;

use super::metrics::{EceBin, Metrics};
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
    let _ = writeln!(out, "{:<10} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8} {:>9} {:>9}", "tier", "correct", "accuracy", "I(pub)", "Brier", "ECE", "valid", "p50", "p95");
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
    let _ = writeln!(out, "\n{:<18} {:>9} {:>9}", "family", "correct", "accuracy");
    for (family, m) in &summary.families {
        let _ = writeln!(out, "{:<18} {:>9} {:>9.3}", family, format!("{}/{}", m.correct, m.n), m.accuracy);
    }
    let p = &summary.paraphrase;
    let _ = writeln!(out, "\nparaphrase agreement (standard pairs): {} over {} pairs; macro accuracy over families {:.3}", opt(p.agreement, 3), p.pairs, summary.macro_accuracy);
    let _ = writeln!(out, "I(pub): chance-corrected accuracy on the public items only (not the board's Intelligence, which adds a judge tier and held-out items).");
    if let Some(reason) = &summary.stopped_early {
        let _ = writeln!(out, "STOPPED EARLY: {reason}; {} of {} items attempted", summary.attempted, summary.selected);
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Reliability diagram: accuracy against mean confidence per bin, bar width by count.
fn reliability_svg(bins: &[EceBin]) -> String {
    let (w, h, pad) = (360.0, 300.0, 40.0);
    let x = |v: f64| pad + v * (w - 2.0 * pad);
    let y = |v: f64| h - pad - v * (h - 2.0 * pad);
    let mut svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="reliability diagram">"#);
    let _ = write!(svg, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-dasharray="4"/>"##, x(0.0), y(0.0), x(1.0), y(1.0));
    for b in bins {
        let (x0, x1) = (x(b.lower) + 1.0, x(b.upper) - 1.0);
        let _ = write!(svg, r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4c78a8"><title>{:.1}-{:.1}: {} items, accuracy {:.3}, confidence {:.3}</title></rect>"##,
            y(b.accuracy), x1 - x0, y(0.0) - y(b.accuracy), b.lower, b.upper, b.n, b.accuracy, b.confidence);
        let _ = write!(svg, r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#e45756"/>"##, x(b.confidence), y(b.accuracy));
    }
    axes(&mut svg, w, h, pad, "confidence (top label)", "accuracy");
    svg.push_str("</svg>");
    svg
}

fn axes(svg: &mut String, w: f64, h: f64, pad: f64, x_label: &str, y_label: &str) {
    let _ = write!(svg, r##"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="#333"/>"##, h - pad, w - pad, h - pad, h - pad);
    for t in [0.0, 0.5, 1.0] {
        let _ = write!(svg, r##"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{t}</text>"##, pad + t * (w - 2.0 * pad), h - pad + 14.0);
        let _ = write!(svg, r##"<text x="{}" y="{:.1}" font-size="10" text-anchor="end">{t}</text>"##, pad - 4.0, h - pad - t * (h - 2.0 * pad) + 3.0);
    }
    let _ = write!(svg, r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">{x_label}</text>"##, w / 2.0, h - 6.0);
    let _ = write!(svg, r##"<text x="12" y="{}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {})">{y_label}</text>"##, h / 2.0, h / 2.0);
}

/// Horizontal bars of accuracy per family.
fn families_svg(families: &[(String, &Metrics)]) -> String {
    let (w, row, left) = (560.0, 20.0, 140.0);
    let h = row * families.len() as f64 + 30.0;
    let mut svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="accuracy per family">"#);
    for (i, (family, m)) in families.iter().enumerate() {
        let y = 10.0 + i as f64 * row;
        let width = m.accuracy * (w - left - 80.0);
        let _ = write!(svg, r##"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##, left - 6.0, y + 13.0, escape(family));
        let _ = write!(svg, r##"<rect x="{left}" y="{y:.1}" width="{width:.1}" height="{}" fill="#54a24b"/>"##, row - 4.0);
        let _ = write!(svg, r##"<text x="{:.1}" y="{:.1}" font-size="11">{}/{} ({:.0} %)</text>"##, left + width + 4.0, y + 13.0, m.correct, m.n, m.accuracy * 100.0);
    }
    svg.push_str("</svg>");
    svg
}

/// Histogram of per-item latency in 20 equal bins.
fn latency_svg(records: &[Record]) -> String {
    let (w, h, pad) = (560.0, 220.0, 40.0);
    let values: Vec<f64> = records.iter().map(|r| r.latency_s * 1000.0).collect();
    let max = values.iter().cloned().fold(0.0, f64::max).max(1e-9);
    let mut counts = [0usize; 20];
    for v in &values {
        counts[((v / max * 20.0) as usize).min(19)] += 1;
    }
    let top = *counts.iter().max().unwrap_or(&1) as f64;
    let mut svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="latency histogram">"#);
    let bar = (w - 2.0 * pad) / 20.0;
    for (i, &c) in counts.iter().enumerate() {
        let height = c as f64 / top.max(1.0) * (h - 2.0 * pad);
        let _ = write!(svg, r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{height:.1}" fill="#f58518"><title>{:.0}-{:.0} ms: {c} items</title></rect>"##,
            pad + i as f64 * bar + 1.0, h - pad - height, bar - 2.0, max * i as f64 / 20.0, max * (i + 1) as f64 / 20.0);
    }
    let _ = write!(svg, r##"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##, h - pad, w - pad, h - pad);
    let _ = write!(svg, r##"<text x="{pad}" y="{}" font-size="10">0 ms</text><text x="{}" y="{}" font-size="10" text-anchor="end">{max:.0} ms</text>"##, h - pad + 14.0, w - pad, h - pad + 14.0);
    let _ = write!(svg, r##"<text x="{}" y="{}" font-size="11" text-anchor="middle">latency per item (ms), {} items; tallest bar {top} items</text>"##, w / 2.0, h - 6.0, values.len());
    svg.push_str("</svg>");
    svg
}

/// The self-contained HTML report.
pub fn html(summary: &Summary, records: &[Record]) -> String {
    let meta = &summary.meta;
    let families: Vec<(String, &Metrics)> = summary.families.iter().map(|(f, m)| (f.clone(), m)).collect();
    let random = meta["random_weights"].as_bool() == Some(true);
    let mut out = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>JevBench public items</title><style>body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;white-space:nowrap}th:first-child,td:first-child{text-align:left}.warn{background:#fff3cd;border:1px solid #e0c060;padding:8px}.charts{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0}figcaption{font-size:13px;color:#555}pre{font-size:12px}</style></head><body>\n");
    let _ = writeln!(out, "<h1>JevBench public items: {}</h1>", escape(meta["model"].as_str().unwrap_or("?")));
    let _ = writeln!(out, "<p>backend <b>{}</b>, {} &middot; {} &middot; decider {} &middot; burn {}</p>", escape(meta["backend"].as_str().unwrap_or("?")), escape(meta["source"].as_str().unwrap_or("")), escape(meta["date"].as_str().unwrap_or("")), escape(meta["versions"]["decider"].as_str().unwrap_or("")), escape(meta["versions"]["burn"].as_str().unwrap_or("")));
    if random {
        out.push_str("<p class=\"warn\">This run used the <b>demo</b> model: random weights. Accuracy near chance is what is expected; the figures test the pipeline, not a model.</p>\n");
    }
    if let Some(reason) = &summary.stopped_early {
        let _ = writeln!(out, "<p class=\"warn\">Stopped early: {}; {} of {} items attempted.</p>", escape(reason), summary.attempted, summary.selected);
    }
    out.push_str("<table><tr><th>tier</th><th>correct</th><th>accuracy</th><th>I (public only)</th><th>chance (board / public)</th><th>Brier</th><th>ECE</th><th>strict valid</th><th>p50</th><th>p95</th></tr>\n");
    for t in &summary.tiers {
        let (name, m) = (t.tier, &t.metrics);
        let _ = writeln!(out, "<tr><td>{name}</td><td>{}/{}</td><td>{:.3}</td><td>{:.1}</td><td>{:.3} / {:.3}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>", t.correct, t.items, t.accuracy, t.intelligence, t.chance_board, t.chance_public, opt(m.brier, 3), opt(m.ece, 3), m.schema_validity_strict, ms(m.latency_p50_s), ms(m.latency_p95_s));
    }
    let o = &summary.overall;
    let _ = writeln!(out, "<tr><th>overall</th><th>{}/{}</th><th>{:.3}</th><th>{}</th><th></th><th>{}</th><th>{}</th><th>{:.3}</th><th>{}</th><th>{}</th></tr></table>", o.correct, summary.selected, o.correct as f64 / summary.selected.max(1) as f64, opt(summary.intelligence_public_only.weighted, 1), opt(o.brier, 3), opt(o.ece, 3), o.schema_validity_strict, ms(o.latency_p50_s), ms(o.latency_p95_s));
    let _ = writeln!(out, "<p>Paraphrase agreement over the standard tier's {} pairs: {}. Ordinal MAE (score items): {}. Macro accuracy over families: {:.3}.</p>", summary.paraphrase.pairs, opt(summary.paraphrase.agreement, 3), opt(o.ordinal_mae, 3), summary.macro_accuracy);
    out.push_str("<div class=\"charts\">\n");
    let _ = writeln!(out, "<figure>{}<figcaption>Reliability: accuracy per confidence bin (bars), mean confidence (dots); ECE {}.</figcaption></figure>", reliability_svg(&o.ece_bins), opt(o.ece, 3));
    let _ = writeln!(out, "<figure>{}<figcaption>Accuracy per family.</figcaption></figure>", families_svg(&families));
    let _ = writeln!(out, "<figure>{}<figcaption>Latency per item, serial, caller's wall time.</figcaption></figure>", latency_svg(records));
    out.push_str("</div>\n<h2>What these numbers are</h2><ul>\n");
    for note in &summary.notes {
        let _ = writeln!(out, "<li>{}</li>", escape(note));
    }
    out.push_str("</ul></body></html>\n");
    out
}
