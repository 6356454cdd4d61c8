#!/usr/bin/env python3
"""Prefill timing of Hugging Face transformers (the reference implementation) on CPU.

    $REFENV/bin/python perf/bench_transformers.py --model $PERF_DIR/d2b --dtype float32 \
        [--ns 128,512,2048] [--threads 2] [--reps 3] [--prompts $PERF_DIR/prompts] [--name d2b]

Loads the folder with AutoModelForCausalLM (Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM) in the given dtype,
torch.set_num_threads(threads), and for each N runs `model(input_ids, logits_to_keep=1)` under
torch.inference_mode() on the ids of $PERF_DIR/prompts/ids_<N>.json (the exact row the decider server runs):
one untimed warm-up, then `reps` timed runs; prints one JSON line per N (best of reps).  RSS (VmRSS) is read
from /proc/self/status after load and after the runs.  The `fla` package is made unimportable (its Triton
kernels do not run on a CPU-only machine), so the Gated DeltaNet runs transformers' own torch chunked
delta rule, as it does on any machine without flash-linear-attention.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

sys.modules["fla"] = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_paths  # noqa: E402


def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) // 1024
    return {"rss_mib": out.get("VmRSS"), "peak_rss_mib": out.get("VmHWM")}


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--ns", default="512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", default=os.path.join(perf_paths.perf_dir(), "prompts"))
    a = ap.parse_args()
    name = a.name or os.path.basename(a.model.rstrip("/"))

    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).eval()
    load_s = time.time() - t0
    after_load = status()
    experts_impl = getattr(model.config, "_experts_implementation", None)
    print(json.dumps({"system": f"transformers-{a.dtype}", "model": name, "load_s": round(load_s, 2),
                      "class": type(model).__name__, "attn": model.config._attn_implementation,
                      "experts": experts_impl, **after_load}), file=sys.stderr, flush=True)

    for n in [int(x) for x in a.ns.split(",")]:
        with open(os.path.join(a.prompts, f"ids_{n}.json")) as f:
            ids = json.load(f)["ids"]
        x = torch.tensor([ids])
        runs, cpu, load_start = [], [], None
        with torch.inference_mode():
            for r in range(a.reps + 1):
                load_start = loadavg()
                c0 = time.process_time()
                s0 = time.perf_counter()
                logits = model(x, logits_to_keep=1).logits
                dt = time.perf_counter() - s0
                if r > 0:                               # r = 0: untimed warm-up
                    runs.append(dt)
                    cpu.append(time.process_time() - c0)
        assert logits.shape[1] == 1 and bool(torch.isfinite(logits).all())
        best = min(runs)
        print(json.dumps({
            "system": f"transformers-{a.dtype}", "model": name, "N": len(ids), "seconds": round(best, 3),
            "tok_s": round(len(ids) / best, 2), "runs_s": [round(v, 3) for v in runs],
            "cpu_s": [round(v, 2) for v in cpu], "threads": a.threads, "load_avg_start_last": load_start,
            "load_avg_end": loadavg(), "rss_after_load_mib": after_load["rss_mib"], **status(),
            "load_s": round(load_s, 2), "torch": torch.__version__, "transformers": transformers.__version__,
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
