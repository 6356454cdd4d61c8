#!/usr/bin/env bash
# Check that the decider binary under test exists and runs; print its path, size, sha256 and backends.
# The harness never builds or copies a binary: build it yourself from the project root first.
#
#   perf/check_binary.sh            # checks $DECIDER_BIN (default target/release/decider)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
case "${1:-}" in -h|--help) perf_usage "${BASH_SOURCE[0]}"; exit 0;; esac
if [ ! -x "$DECIDER_BIN" ]; then
  cat >&2 <<EOF
decider binary not found: $DECIDER_BIN
Build it first, from the project root:
    cargo build --release -p decider-cli                     # ndarray backend
    cargo build --release -p decider-cli --features candle   # to time candle too
or point DECIDER_BIN at a binary you built (DECIDER_BIN=path/to/decider ...).
EOF
  exit 1
fi
if ! BACKENDS=$("$DECIDER_BIN" backends 2>&1); then
  echo "$DECIDER_BIN does not run (\`decider backends\` failed): $BACKENDS" >&2
  exit 1
fi
echo "decider binary: $DECIDER_BIN ($(stat -c %s "$DECIDER_BIN") bytes, sha256 $(sha256sum "$DECIDER_BIN" | cut -c1-16), backends: $(echo $BACKENDS))"
