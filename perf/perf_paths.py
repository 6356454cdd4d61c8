"""Default locations of the harness (standard library only; the same rules as env.sh).

    PERF_DIR     models, GGUF files, prompts, results, logs   ${XDG_CACHE_HOME:-$HOME/.cache}/decider-perf
    REFENV       Python venv (torch + transformers 5.23.0)    $PERF_DIR/venv
    DECIDER_BIN  the binary under test                        target/release/decider (from the current directory)
    TOKENIZER    the Qwen3.5 tokenizer.json                   $PERF_DIR/tokenizer.json
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _env(name):
    v = os.environ.get(name)
    return os.path.abspath(v) if v else None


def perf_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _env("PERF_DIR") or os.path.abspath(os.path.join(cache, "decider-perf"))


def refenv():
    return _env("REFENV") or os.path.join(perf_dir(), "venv")


def decider_bin():
    return _env("DECIDER_BIN") or os.path.abspath(os.path.join("target", "release", "decider"))


def tokenizer():
    return _env("TOKENIZER") or os.path.join(perf_dir(), "tokenizer.json")


def configs_dir():
    """The real Qwen3.5 configs of the project's tests (tests/fixtures/configs/), unless PERF_CONFIGS_DIR names another folder."""
    return _env("PERF_CONFIGS_DIR") or os.path.join(HERE, os.pardir, "tests", "fixtures", "configs")
