#!/usr/bin/env python3
"""Markdown tables from the JSON lines run.sh appends ($PERF_DIR/results.jsonl by default).

    python3 perf/summarize.py [FILE] [--run RUN_ID ...] [--latest] [--best] [--wall]

One table per model, one row per (N, system).  Columns:
  tok/s          N / wall seconds of the fastest timed run (each line is already the best of its --reps runs)
  CPU ms/token   1000 x the fewest CPU seconds (user + system, all threads of the measured process) of a timed
                 run / N.  Steadier than wall time when anything else runs on the machine.
  RSS MiB        resident memory of the measured process after the runs, and its peak (VmHWM) in brackets
  ours/llama.cpp this row's CPU ms/token divided by llama.cpp's (Q8_0, BF16) for the same model and N;
                 2.00 = twice llama.cpp's CPU time per token, 0.50 = half.  --wall divides wall seconds instead.
  load           1-min load average when the last timed run started (near the thread count or below on a quiet
                 machine; higher means other work shared the cores and the wall figures are pessimistic)
  run            the run id (UTC start time of run.sh)
By default each (model, system, N) shows its most recent line; --best shows the fastest over all lines instead,
--run keeps the given runs only, --latest only the last run.  Skipped systems and errors are listed under the
tables.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_paths  # noqa: E402

ORDER = ["decider-ndarray", "decider-candle", "transformers-float32", "transformers-bfloat16",
         "llama.cpp-q8_0", "llama.cpp-bf16"]
REFS = [("llama.cpp-q8_0", "Q8_0"), ("llama.cpp-bf16", "BF16")]


def order_key(system):
    if system in ORDER:
        return (ORDER.index(system), system)
    if system.startswith("decider-"):          # other backends and --weights variants next to the decider rows
        return (1.5, system)
    return (len(ORDER), system)


def cpu_ms(r):
    cpu = [c for c in (r.get("cpu_s") or []) if c]
    return 1000.0 * min(cpu) / r["N"] if cpu else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("path", nargs="?", default=os.path.join(perf_paths.perf_dir(), "results.jsonl"))
    ap.add_argument("--run", action="append", help="keep only this run id (repeatable)")
    ap.add_argument("--latest", action="store_true", help="keep only the last run in the file")
    ap.add_argument("--best", action="store_true", help="fastest line per (model, system, N) over all kept runs")
    ap.add_argument("--wall", action="store_true", help="ratios of wall seconds instead of CPU time per token")
    a = ap.parse_args()
    if not os.path.exists(a.path):
        sys.exit(f"{a.path} does not exist: run run.sh first")
    rows = []
    with open(a.path) as f:
        for line in f:
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    if a.latest and rows:
        last = max(r.get("run", "") for r in rows)
        rows = [r for r in rows if r.get("run", "") == last]
    if a.run:
        rows = [r for r in rows if r.get("run") in a.run]
    if not rows:
        sys.exit("no results to show")

    shown, notes = {}, {}
    for r in rows:                                   # file order = time order
        model, system = r.get("model"), r.get("system")
        if "skipped" in r or "error" in r:
            notes[(model, system, r.get("N"))] = (r.get("run", ""), r.get("skipped") and "skipped: " + r["skipped"]
                                                  or "error: " + str(r["error"]))
            continue
        if "N" not in r or "tok_s" not in r:
            continue
        k = (model, system, r["N"])
        if not a.best or k not in shown or r["tok_s"] > shown[k]["tok_s"]:
            shown[k] = r
    for k in list(notes):                            # a later measurement supersedes an earlier skip or error
        if any(s[:2] == k[:2] and k[2] in (None, s[2]) and r.get("run", "") > notes[k][0] for s, r in shown.items()):
            del notes[k]

    what = "wall seconds" if a.wall else "CPU ms/token"
    print(f"tok/s: wall, fastest warm run. CPU ms/token: fewest CPU seconds of a timed run (all threads) / N. "
          f"RSS: after the runs (peak). ours/llama.cpp: this row's {what} / llama.cpp's for the same model and N "
          f"(2.00 = twice llama.cpp's cost, 0.50 = half).")
    models = sorted({k[0] for k in shown} | {k[0] for k in notes}, key=str)
    for model in models:
        keys = [k for k in shown if k[0] == model]
        ns = sorted({k[2] for k in keys})
        threads = sorted({shown[k].get("threads") for k in keys} - {None})
        reps = sorted({len(shown[k].get("runs_s") or []) for k in keys} - {0})
        print(f"\n### {model}: prefill of N prompt tokens"
              + (f", {'/'.join(map(str, threads))} threads" if threads else "")
              + (f", best of {'/'.join(map(str, reps))} warm runs" if reps else "") + "\n")
        if keys:
            print("| N | system | tok/s | CPU ms/token | RSS MiB (peak) | "
                  + " | ".join(f"ours/llama.cpp {lbl}" for _, lbl in REFS) + " | load | run |")
            print("|---:|---|---:|---:|---:|" + "---:|" * len(REFS) + "---:|---|")
        for n in ns:
            for system in sorted({k[1] for k in keys if k[2] == n}, key=order_key):
                r = shown[(model, system, n)]
                ms = cpu_ms(r)
                ratios = []
                for ref, _ in REFS:
                    q = shown.get((model, ref, n))
                    if q is None:
                        ratios.append("—")
                    elif a.wall:
                        ratios.append(f"{r['seconds'] / q['seconds']:.2f}" if q.get("seconds") else "—")
                    else:
                        qms = cpu_ms(q)
                        ratios.append(f"{ms / qms:.2f}" if ms and qms else "—")
                rss = f"{r.get('rss_mib', '?')} ({r.get('peak_rss_mib', '?')})"
                load = (r.get("load_avg_start_last") or [None])[0]
                name = system
                if r.get("input_tokens") not in (None, n):
                    name += f" ⚠ server ran {r['input_tokens']} tokens: remake the prompts (setup.sh --remake-prompts)"
                print(f"| {n} | {name} | {r['tok_s']:.1f} | " + (f"{ms:.1f}" if ms else "?") + f" | {rss} | "
                      + " | ".join(ratios) + f" | {load if load is not None else '?'} | {r.get('run', '')} |")
        mine = sorted(((k, v) for k, v in notes.items() if k[0] == model), key=lambda kv: (str(kv[0][1]), str(kv[0][2])))
        if mine and keys:
            print()
        for (_, system, n), (run, msg) in mine:
            print(f"* {system}" + (f" N={n}" if n else "") + f" ({run}): {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
