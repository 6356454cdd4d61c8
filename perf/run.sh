#!/usr/bin/env bash
# Side-by-side CPU prefill timings: ours (`decider serve`, every backend the binary lists), Hugging Face
# transformers (float32, bfloat16) and llama.cpp through node-llama-cpp (Q8_0, BF16 GGUF), one system at a time
# (never two models in RAM at once), appending one JSON line per (system, model, N) to $PERF_DIR/results.jsonl.
# Run it from the project root after setup.sh.
#
#   perf/run.sh [--ns 512] [--models d2b,moe2] [--systems all|LIST] [--weights W]
#                         [--reps 3] [--threads 2] [--out FILE] [--decider BIN] [--max-rss-mib N] [--port 18431]
#
# --ns LIST       prompt lengths (each needs $PERF_DIR/prompts/{req,ids}_<N>.json: setup.sh --ns LIST)
# --models LIST   folders under $PERF_DIR: d2b, moe2, moe4 (setup.sh --moe4)
# --systems LIST  all (default) = decider,transformers,llama.cpp, where
#                   decider      = decider-<B> for every backend B that `decider backends` lists
#                   transformers = transformers-float32,transformers-bfloat16
#                   llama.cpp    = llama.cpp-q8_0,llama.cpp-bf16
#                 or single systems: decider-ndarray, decider-candle, decider-<B>-<W> (serve --weights W), ...
# --weights W     pass `--weights W` to every decider server (for builds whose `serve` has that option); the
#                 rows are named decider-<B>-<W>
# --decider BIN   the binary under test (default $DECIDER_BIN, else target/release/decider)
# --max-rss-mib N the decider bench kills its server (its PID only) past N MiB of VmRSS and reports an error
# Each line carries the run id, the binary's sha256 (16 hex), the checkout's commit, and the 1/5/15-min load
# averages at the start of the last timed run and at the end; `uptime` before each system goes to
# $PERF_DIR/logs/run.log, server logs to $PERF_DIR/logs/serve-*.log.  Exit status 1 when a system failed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
H=$PERF_HOME
NS=512; MODELS=d2b,moe2; SYSTEMS=all; REPS=3; THREADS=2; OUT=$PERF_DIR/results.jsonl; MAXRSS=""; WEIGHTS=""; PORT=18431
while [ $# -gt 0 ]; do
  case "$1" in
    --ns) NS=$2; shift 2;; --models) MODELS=$2; shift 2;; --systems) SYSTEMS=$2; shift 2;;
    --weights) WEIGHTS=$2; shift 2;;
    --reps) REPS=$2; shift 2;; --threads) THREADS=$2; shift 2;; --out) OUT=$(perf_abs "$2"); shift 2;;
    --decider) DECIDER_BIN=$(perf_abs "$2"); export DECIDER_BIN; shift 2;;
    --max-rss-mib) MAXRSS=$2; shift 2;; --port) PORT=$2; shift 2;;
    -h|--help) perf_usage "${BASH_SOURCE[0]}"; exit 0;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2;;
  esac
done
PY=${PY:-$REFENV/bin/python}
NODE_DIR=${NODE_LLAMA_CPP_DIR:-$PERF_DIR/node}
LOG=$PERF_DIR/logs/run.log
RUN=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$PERF_DIR/logs" "$(dirname "$OUT")"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }

bash "$H/check_binary.sh" | tee -a "$LOG" >&2 || exit 1
BACKENDS=$("$DECIDER_BIN" backends | tr -s ' \n' ' ')
BIN_SHA=$(sha256sum "$DECIDER_BIN" | cut -c1-16)
COMMIT=$(git describe --always --dirty 2>/dev/null || echo "")

# Expand the system groups.
LIST=()
IFS=, read -ra REQ <<< "$SYSTEMS"
for S in "${REQ[@]}"; do
  case "$S" in
    all) for B in $BACKENDS; do LIST+=("decider-$B"); done
         LIST+=(transformers-float32 transformers-bfloat16 llama.cpp-q8_0 llama.cpp-bf16);;
    decider) for B in $BACKENDS; do LIST+=("decider-$B"); done;;
    transformers) LIST+=(transformers-float32 transformers-bfloat16);;
    llama.cpp) LIST+=(llama.cpp-q8_0 llama.cpp-bf16);;
    *) LIST+=("$S");;
  esac
done

# Every N needs its prompt files (setup.sh makes them).
for N in ${NS//,/ }; do
  for F in "req_$N.json" "ids_$N.json"; do
    [ -s "$PERF_DIR/prompts/$F" ] || { log "missing $PERF_DIR/prompts/$F: run perf/setup.sh --ns $NS prompts"; exit 1; }
  done
done

# Tag each JSON line with the run id, binary and commit and append it to $OUT; pass non-JSON lines to the log.
record() {
  python3 -c '
import json, sys
run, out, sha, commit = sys.argv[1:5]
for line in sys.stdin:
    line = line.strip()
    try:
        d = json.loads(line)
    except ValueError:
        print(line, file=sys.stderr); continue
    d["run"] = run
    d["decider_sha256"] = sha
    if commit:
        d["commit"] = commit
    s = json.dumps(d)
    print(s, flush=True)
    with open(out, "a") as f:
        f.write(s + "\n")
' "$RUN" "$OUT" "$BIN_SHA" "$COMMIT"
}
skip() { echo "{\"system\": \"$1\", \"model\": \"$2\", \"skipped\": \"$3\"}" | record; }

log "run $RUN: systems ${LIST[*]} | models $MODELS | N=$NS | reps $REPS | threads $THREADS -> $OUT"
FAILED=0
IFS=, read -ra MS <<< "$MODELS"
for M in "${MS[@]}"; do
  DIR=$PERF_DIR/$M
  for S in "${LIST[@]}"; do
    log "$S $M N=$NS | $(uptime)"
    if [ ! -s "$DIR/model.safetensors" ]; then
      skip "$S" "$M" "$DIR missing (setup.sh)"; continue
    fi
    case "$S" in
      decider-*)
        BW=${S#decider-}; BACKEND=${BW%%-*}; W=""; [ "$BW" != "$BACKEND" ] && W=${BW#*-}
        [ -z "$W" ] && W=$WEIGHTS
        python3 "$H/bench_decider.py" --model "$DIR" --name "$M" --backend "$BACKEND" --ns "$NS" --port "$PORT" \
          --reps "$REPS" --threads "$THREADS" --decider "$DECIDER_BIN" --prompts "$PERF_DIR/prompts" \
          --log "$PERF_DIR/logs" ${W:+--weights "$W"} ${MAXRSS:+--max-rss-mib "$MAXRSS"} 2>>"$LOG" | record ;;
      transformers-float32|transformers-bfloat16)
        if [ ! -x "$PY" ]; then skip "$S" "$M" "$PY missing (setup.sh venv)"; continue; fi
        "$PY" "$H/bench_transformers.py" --model "$DIR" --name "$M" --dtype "${S#transformers-}" --ns "$NS" \
          --reps "$REPS" --threads "$THREADS" --prompts "$PERF_DIR/prompts" 2>>"$LOG" | record ;;
      llama.cpp-*)
        G=$PERF_DIR/$M-${S#llama.cpp-}.gguf
        if [ ! -s "$G" ]; then skip "$S" "$M" "$G missing (make_gguf.sh $DIR ${S#llama.cpp-})"; continue; fi
        if [ ! -d "$NODE_DIR/node_modules/node-llama-cpp" ]; then skip "$S" "$M" "node-llama-cpp missing (setup.sh node)"; continue; fi
        NODE_LLAMA_CPP_DIR=$NODE_DIR node "$H/bench_llamacpp.mjs" --gguf "$G" --model "$M" --label "$S" --ns "$NS" \
          --reps "$REPS" --threads "$THREADS" --prompts "$PERF_DIR/prompts" 2>>"$LOG" | record ;;
      *) log "unknown system $S"; FAILED=1; continue;;
    esac
    [ "${PIPESTATUS[0]}" = 0 ] || { log "$S $M failed (see $LOG)"; FAILED=1; }
  done
done
log "done run $RUN -> $OUT"
echo "summary: python3 $H/summarize.py --run $RUN" >&2
exit $FAILED
