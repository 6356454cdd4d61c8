#!/usr/bin/env bash
# GGUF copies of a perf model folder for llama.cpp, with llama.cpp's own converter.
#
#   perf/make_gguf.sh $PERF_DIR/d2b  q8_0 bf16      -> $PERF_DIR/d2b-q8_0.gguf, $PERF_DIR/d2b-bf16.gguf
#   perf/make_gguf.sh $PERF_DIR/moe2 q8_0           -> $PERF_DIR/moe2-q8_0.gguf
#
# The converter is the one vendored in the llama-cpp-python 0.3.36 sdist (ggml-org/llama.cpp@0c1e57098,
# convert_hf_to_gguf.py + conversion/ + gguf-py); it is downloaded from PyPI (pip download) and unpacked to
# $PERF_DIR/src on first use and linked as $PERF_DIR/llama.cpp.  It runs in the venv of ensure_refenv.sh (torch +
# transformers 5.23.0; the converter pins transformers 4.57.6 but works with 5.23).  The folder's real
# tokenizer.json is converted as is (the converter recognises its pre-tokenizer hash as `qwen35`).  `--no-mtp`: the
# Qwen3.5 class otherwise asserts on the MTP layers that a text-only save_pretrained does not have.  `fla` is made
# unimportable (see make_models.py).  For Qwen3.5-35B-A3B widths (32 v / 16 k DeltaNet heads) the converter
# reorders the V heads, so the moe GGUF's tensors are permuted relative to the safetensors (same function).
# An existing non-empty output is kept (FORCE=1 remakes it); each file is written as <out>.part and renamed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  perf_usage "${BASH_SOURCE[0]}"
  [ $# -ge 1 ]; exit
fi
DIR=$(perf_abs "${1%/}"); shift
TYPES=${*:-q8_0}
PY=${PY:-$REFENV/bin/python}
SRC=$PERF_DIR/src
LCPP=$PERF_DIR/llama.cpp
[ -x "$PY" ] || { echo "make_gguf: $PY missing (run ensure_refenv.sh or setup.sh first)" >&2; exit 1; }
[ -s "$DIR/model.safetensors" ] || { echo "make_gguf: $DIR/model.safetensors missing" >&2; exit 1; }
if [ ! -f "$LCPP/convert_hf_to_gguf.py" ]; then
  mkdir -p "$SRC"
  ( cd "$SRC" && "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d . )
  tar -C "$SRC" -xzf "$SRC/llama_cpp_python-0.3.36.tar.gz" \
    llama_cpp_python-0.3.36/vendor/llama.cpp/conversion llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py \
    llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
  ln -sfn "$SRC/llama_cpp_python-0.3.36/vendor/llama.cpp" "$LCPP"
fi
NAME=$(basename "$DIR")
for T in $TYPES; do
  OUT="$(dirname "$DIR")/$NAME-$T.gguf"
  if [ -s "$OUT" ] && [ "${FORCE:-0}" != 1 ]; then echo "$OUT exists (FORCE=1 to remake)"; continue; fi
  START=$(date +%s)
  rm -f "$OUT.part"
  "$PY" - "$DIR" "$T" "$OUT.part" "$LCPP" <<'EOF'
import os, runpy, sys
sys.modules["fla"] = None
d, t, out, lcpp = sys.argv[1:5]
sys.path.insert(0, lcpp)
sys.argv = ["convert_hf_to_gguf.py", d, "--outtype", t, "--no-mtp", "--outfile", out]
runpy.run_path(os.path.join(lcpp, "convert_hf_to_gguf.py"), run_name="__main__")
EOF
  mv "$OUT.part" "$OUT"
  echo "{\"gguf\": \"$OUT\", \"type\": \"$T\", \"bytes\": $(stat -c %s "$OUT"), \"convert_s\": $(( $(date +%s) - START ))}"
done
