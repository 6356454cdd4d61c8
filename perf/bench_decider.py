#!/usr/bin/env python3
"""Prefill timing of our runtime: `decider serve` answering one /v1/systemone request of N prompt tokens.

    python3 perf/bench_decider.py --model $PERF_DIR/d2b [--backend ndarray] [--ns 128,512,2048]
        [--decider $DECIDER_BIN] [--port 18431] [--threads 2] [--reps 3] [--prompts $PERF_DIR/prompts]
        [--weights W] [--max-rss-mib N]

Standard library only.  Starts `decider serve --model DIR --addr 127.0.0.1:PORT --backend B` (RAYON_NUM_THREADS
=threads), waits for GET /health (the server binds only after the model is loaded), reads the server's VmRSS
from /proc/PID/status, then for each N posts $PERF_DIR/prompts/req_<N>.json (one noul question; its single
row is ids_<N>.json, N tokens) once untimed and `reps` times timed; one JSON line per N (best of reps) with
the server's CPU seconds per request (/proc/PID/stat utime+stime).  The server is stopped with SIGTERM (its own
PID only).  A backend that `decider backends` does not list is reported as skipped; a port that already answers
is reported as an error (another server would be timed instead).
--weights W adds `--weights W` to the serve command (system name decider-<backend>-<W>), for builds whose `serve`
has that option; a server that exits before /health (e.g. an unknown option) is reported as one JSON line with
"error" and exit status 1.
--max-rss-mib N: a watchdog thread reads VmRSS every 0.25 s and sends SIGKILL to the server's PID past N MiB
(reported as an "error" line), so a runaway allocation cannot push the machine into the OOM killer.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_paths  # noqa: E402


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "Threads"):
                out[k] = int(v.split()[0])
    return {"rss_mib": out["VmRSS"] // 1024, "peak_rss_mib": out["VmHWM"] // 1024, "os_threads": out["Threads"]}


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def post(url, body, timeout):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name")
    ap.add_argument("--backend", default="ndarray")
    ap.add_argument("--ns", default="512")
    ap.add_argument("--decider", default=perf_paths.decider_bin())
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", default=os.path.join(perf_paths.perf_dir(), "prompts"))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--log", default=os.path.join(perf_paths.perf_dir(), "logs"))
    ap.add_argument("--weights", default=None)
    ap.add_argument("--max-rss-mib", type=int, default=None)
    a = ap.parse_args()
    name = a.name or os.path.basename(a.model.rstrip("/"))
    system = f"decider-{a.backend}" + (f"-{a.weights}" if a.weights else "")

    backends = subprocess.run([a.decider, "backends"], capture_output=True, text=True, check=True).stdout.split()
    if a.backend not in backends:
        print(json.dumps({"system": system, "model": name, "skipped": f"backend not compiled in (this build: {backends})"}))
        return 0

    try:                                                    # another server on the port would be timed instead
        socket.create_connection(("127.0.0.1", a.port), timeout=2).close()
        print(json.dumps({"system": system, "model": name, "error": f"127.0.0.1:{a.port} is in use (--port)"}))
        return 1
    except OSError:
        pass
    os.makedirs(a.log, exist_ok=True)
    log_path = os.path.join(a.log, f"serve-{name}-{a.backend}-{int(time.time())}.log")
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))
    base = f"http://127.0.0.1:{a.port}"
    t0 = time.time()
    cmd = [a.decider, "serve", "--model", a.model, "--addr", f"127.0.0.1:{a.port}", "--backend", a.backend]
    if a.weights:
        cmd += ["--weights", a.weights]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    killed = []
    done = threading.Event()

    def watchdog():
        while a.max_rss_mib and not done.is_set() and proc.poll() is None:
            try:
                rss = proc_status(proc.pid)["rss_mib"]
            except (OSError, KeyError):
                return
            if rss > a.max_rss_mib:
                killed.append(rss)
                proc.kill()                                  # this PID only
                return
            done.wait(0.25)

    threading.Thread(target=watchdog, daemon=True).start()

    def error_line(msg, n=None):
        if killed:
            msg = f"killed by the watchdog: VmRSS {killed[0]} MiB > --max-rss-mib {a.max_rss_mib}"
        print(json.dumps({"system": system, "model": name, **({"N": n} if n else {}), "error": msg,
                          "log": log_path}), flush=True)
        return 1

    try:
        while True:
            if proc.poll() is not None:
                with open(log_path, errors="replace") as f:
                    last = [l.strip() for l in f.read().splitlines() if l.strip()][-2:]
                return error_line(f"decider serve exited with {proc.returncode}: {' | '.join(last)[-300:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    health = json.loads(r.read())
                break
            except OSError:
                if time.time() - t0 > a.timeout:
                    sys.exit(f"server not up after {a.timeout} s; see {log_path}")
                time.sleep(0.5)
        load_s = time.time() - t0
        after_load = proc_status(proc.pid)
        print(json.dumps({"system": system, "model": name, "load_s": round(load_s, 2), "pid": proc.pid,
                          "device": health.get("device"), **after_load}), file=sys.stderr, flush=True)

        for n in [int(x) for x in a.ns.split(",")]:
            with open(os.path.join(a.prompts, f"req_{n}.json"), "rb") as f:
                body = f.read()
            with open(os.path.join(a.prompts, f"ids_{n}.json")) as f:
                n_ids = json.load(f)["n"]
            runs, cpu = [], []
            for r in range(a.reps + 1):
                load_start = loadavg()
                c0 = proc_cpu_s(proc.pid)
                s0 = time.perf_counter()
                try:
                    resp = post(base + "/v1/systemone", body, a.timeout)
                except (OSError, ValueError) as e:
                    return error_line(f"request of {n} tokens failed: {type(e).__name__}: {str(e)[:200]}", n_ids)
                dt = time.perf_counter() - s0
                if r > 0:                                   # r = 0: untimed warm-up
                    runs.append(dt)
                    cpu.append(proc_cpu_s(proc.pid) - c0)
            usage = resp.get("usage", {})
            assert "q" in json.dumps(resp.get("answers", resp)), resp
            best = min(runs)
            print(json.dumps({
                "system": system, "model": name, "N": n_ids, "seconds": round(best, 3),
                "tok_s": round(n_ids / best, 2), "runs_s": [round(v, 3) for v in runs],
                "cpu_s": [round(v, 2) for v in cpu], "threads": a.threads, "load_avg_start_last": load_start,
                "load_avg_end": loadavg(), "rss_after_load_mib": after_load["rss_mib"], **proc_status(proc.pid),
                "input_tokens": usage.get("input_tokens"), "load_s": round(load_s, 2),
                "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }), flush=True)
    finally:
        done.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
