#!/usr/bin/env python3
"""Requests of N prompt tokens for the perf runs, and the exact token ids the decider server runs for them.

    $REFENV/bin/python perf/make_prompts.py [--ns 128,512,2048] [--model $PERF_DIR/d2b]
                                       [--decider $DECIDER_BIN] [--out $PERF_DIR/prompts]

For each N writes
  req_<N>.json  a /v1/systemone body: {"state": <English-like text>, "questions": {"q": {"type": "noul", ...}}}
  ids_<N>.json  {"ids": [...], "slots": [...], "n": len}: the single prompt row of that request as
                `decider prompt` (the binary's own tokenizer + decider-ai 1.10.0 prompt) builds it.
The state is cut (by whole tokens of the folder's tokenizer.json, using `tokenizers` from the running Python, e.g.
the venv of ensure_refenv.sh) so that the row has exactly N tokens where possible (else the largest length below N).
Both perf models share the tokenizer, so the same files serve d2b and moe2.  The transformers and llama.cpp
benches feed ids_<N>.json; the decider bench posts req_<N>.json: every system prefills the same ids.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_paths  # noqa: E402

QUESTION = {"q": {"type": "noul", "instructions": "Does the customer ask for a refund of the duplicate charge?"}}

WORDS = ("the customer said that their card was charged twice for the same order and they would like to know "
         "whether the second payment will be refunded before the end of the month because the account is shared "
         "with a partner who also placed an order last week from the mobile app using a different address support "
         "agent replied asking for the invoice number and a screenshot of the bank statement then escalated the "
         "ticket to billing team which confirmed a temporary authorization hold not a real charge").split()


def corpus(seed=7, n_words=6000):
    rng = random.Random(seed)
    out, sent = [], []
    for _ in range(n_words):
        sent.append(rng.choice(WORDS))
        if len(sent) >= rng.randint(8, 18):
            s = " ".join(sent)
            out.append(s[0].upper() + s[1:] + ".")
            sent = []
    return " ".join(out)


def rows(decider, model, body):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
        path = f.name
    try:
        out = subprocess.run([decider, "prompt", "--model", model, "--request", path], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out)["rows"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="128,512,2048")
    ap.add_argument("--model", default=os.path.join(perf_paths.perf_dir(), "d2b"))
    ap.add_argument("--decider", default=perf_paths.decider_bin())
    ap.add_argument("--out", default=os.path.join(perf_paths.perf_dir(), "prompts"))
    a = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    text_ids = tok.encode(corpus(), add_special_tokens=False).ids
    os.makedirs(a.out, exist_ok=True)

    def row_for(k):
        state = tok.decode(text_ids[:k])
        body = {"state": state, "questions": QUESTION}
        r = rows(a.decider, a.model, body)
        assert len(r) == 1, f"expected one row, got {len(r)}"
        return body, r[0]

    for n in [int(x) for x in a.ns.split(",")]:
        k = max(1, n - 60)
        best = None
        for _ in range(12):
            body, row = row_for(k)
            length = len(row["ids"])
            if length <= n and (best is None or length > len(best[1]["ids"])):
                best = (body, row)
            if length == n:
                break
            k = max(1, k + (n - length))
        body, row = best
        with open(os.path.join(a.out, f"req_{n}.json"), "w") as f:
            json.dump(body, f, ensure_ascii=False)
        with open(os.path.join(a.out, f"ids_{n}.json"), "w") as f:
            json.dump({"ids": row["ids"], "slots": row["slots"], "n": len(row["ids"])}, f)
        print(json.dumps({"N": n, "row_tokens": len(row["ids"]), "state_chars": len(body["state"]),
                          "state_tokens": len(tok.encode(body["state"], add_special_tokens=False).ids)}))


if __name__ == "__main__":
    sys.exit(main())
