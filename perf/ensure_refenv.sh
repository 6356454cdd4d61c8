#!/usr/bin/env bash
# Make sure the Python reference environment exists (transformers 5.23.0 + torch on CPU) at $REFENV
# (default $PERF_DIR/venv); print its python.  Idempotent: an environment that imports is kept.
#
#   perf/ensure_refenv.sh            # prints e.g. ~/.cache/decider-perf/venv/bin/python
#
# PyPI's torch wheel for Linux pulls in the CUDA libraries (about 6 GB installed); they are not used here.
set -e
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
case "${1:-}" in -h|--help) perf_usage "${BASH_SOURCE[0]}"; exit 0;; esac
VENV=$REFENV
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import transformers, torch, safetensors, numpy" 2>/dev/null; then
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV" >&2; then
    echo "could not create the venv $VENV: on Debian/Ubuntu install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
  "$VENV/bin/pip" install -q torch "transformers==5.23.0" safetensors numpy >&2
fi
echo "$VENV/bin/python"
