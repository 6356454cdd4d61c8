#!/usr/bin/env python3
"""Random-weight decider model folders at the REAL Qwen3.5 widths, for CPU performance runs.

    $REFENV/bin/python perf/make_models.py d2b  [--out $PERF_DIR/d2b]  [--seed 20261201] [--force]
    $REFENV/bin/python perf/make_models.py moe2 [--out $PERF_DIR/moe2] [--seed 20261201] [--force]

d2b   the text config of the released Qwen3.5-2B (decider-2b's base), transcribed in the project's
      tests/fixtures/configs/qwen3.5-2b.json: hidden 2048,
      24 layers (full attention every 4th), 8 q / 2 kv heads of 256 (partial rotary 0.25, theta 1e7), DeltaNet
      16 k / 16 v heads of 128, conv 4, MLP 6144, vocab 248320, tied embeddings.  1.88 B parameters, 3.76 GB in
      bf16.
moe2  a 2-layer slice of Qwen3.5-35B-A3B (qwen3.5-35b-a3b.json): layers [linear_attention, full_attention],
      256 experts top-8 of 512 + shared expert 512, 16 q / 2 kv heads of 256, DeltaNet 16 k / 32 v heads of 128,
      vocab 248320 untied.  2.70 B parameters, 5.39 GB in bf16.

Written exactly as transformers' `save_pretrained` writes the text model (`Qwen3_5ForCausalLM` /
`Qwen3_5MoeForCausalLM`, `model.*` names, bf16 safetensors), plus tokenizer.json (the real Qwen3.5 tokenizer made by
make_tokenizer_json.py; --tokenizer, default $TOKENIZER), tokenizer_config.json and decider_config.json (from
model_rules.py).  Weights follow model_rules.py's `randomize_` (O(1) activations: linear weights N(0, 1/fan_in),
embeddings N(0, 0.25^2), zero-centred norms U(-0.5, 0.5), A_log / dt_bias spread, router 3/sqrt(H)), drawn in
float32 from a seeded generator and rounded to bf16.

Checks (unless --no-check): transformers reloads the folder (AutoModelForCausalLM, bf16) and a 16-token forward
gives finite logits; the tokenizer.json in the folder loads with `tokenizers`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_paths  # noqa: E402

CONFIGS = perf_paths.configs_dir()            # the real configs, tests/fixtures/configs/ (PERF_CONFIGS_DIR overrides)
DEFAULT_TOK = perf_paths.tokenizer()

# Fields of the released text configs that the text-only config classes do not need (vision ids, MTP, dtype).
DROP = {"mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "dtype", "use_cache", "initializer_range",
        "mamba_ssm_dtype", "model_type", "transformers_version", "architectures"}


def text_config(which):
    src = {"d2b": "qwen3.5-2b.json", "moe2": "qwen3.5-35b-a3b.json"}[which]
    top = json.load(open(os.path.join(CONFIGS, src)))
    t = dict(top["text_config"])
    t["tie_word_embeddings"] = bool(top.get("tie_word_embeddings", t.get("tie_word_embeddings", False)))
    for k in DROP:
        t.pop(k, None)
    if which == "moe2":
        t["num_hidden_layers"] = 2
        t["layer_types"] = ["linear_attention", "full_attention"]
        t.pop("full_attention_interval", None)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", choices=["d2b", "moe2"])
    ap.add_argument("--out")
    ap.add_argument("--tokenizer", default=DEFAULT_TOK)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    out = a.out or os.path.join(perf_paths.perf_dir(), a.which)

    # The venv may hold flash-linear-attention (`fla`, Triton-only kernels that fail on a CPU-only machine);
    # transformers picks it up at import time when importable, so make it unimportable in this process.
    sys.modules["fla"] = None
    import torch
    import transformers
    from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig,
                              Qwen3_5TextConfig)
    from model_rules import DECIDER_CONFIG, TOKENIZER_CONFIG, randomize_   # the O(1)-activation init rules

    if not os.path.exists(a.tokenizer):
        sys.exit(f"{a.tokenizer} missing: run python3 {HERE}/make_tokenizer_json.py --out {a.tokenizer}")
    if os.path.exists(os.path.join(out, "decider_config.json")) and not a.force:
        print(f"{out} exists (use --force to remake)")
        return 0
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)

    t0 = time.time()
    tc = text_config(a.which)
    if a.which == "d2b":
        cfg, cls = Qwen3_5TextConfig(**tc), Qwen3_5ForCausalLM
    else:
        cfg, cls = Qwen3_5MoeTextConfig(**tc), Qwen3_5MoeForCausalLM
    torch.manual_seed(a.seed)
    # Build on the meta device (no default init: it would take a minute and be overwritten), then allocate
    # bf16 storage and fill every parameter from the seeded generator.
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to(dtype=torch.bfloat16).to_empty(device="cpu").eval()
    model.tie_weights()                                       # to_empty allocates tied parameters twice
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    persistent = [n for n, _ in model.named_buffers() if n in model.state_dict()]
    if persistent:
        sys.exit(f"persistent buffers would be saved uninitialised: {persistent}")
    gen = torch.Generator().manual_seed(a.seed)
    randomize_(model, gen)
    n_params = sum(p.numel() for p in model.parameters())
    t_init = time.time() - t0
    model.save_pretrained(out)
    del model
    shutil.copyfile(a.tokenizer, os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2)
        f.write("\n")
    dc = dict(DECIDER_CONFIG, version=f"perf-{a.which}-v1")
    with open(os.path.join(out, "decider_config.json"), "w") as f:
        json.dump(dc, f, indent=2)
        f.write("\n")
    t_save = time.time() - t0 - t_init
    info = {"which": a.which, "out": out, "params": n_params, "seed": a.seed, "torch": torch.__version__,
            "transformers": transformers.__version__, "init_s": round(t_init, 1), "save_s": round(t_save, 1),
            "files": {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}}

    if not a.no_check:
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM
        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        ids = tok.encode("Context: my card was charged twice. Question: is it urgent? Answer: (",
                         add_special_tokens=False).ids[:16]
        t1 = time.time()
        m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
        with torch.inference_mode():
            logits = m(torch.tensor([ids])).logits.float()
        finite = bool(torch.isfinite(logits).all())
        info["check"] = {"class": type(m).__name__, "load_s": round(time.time() - t1, 1), "tokens": len(ids),
                         "logits_finite": finite, "logit_std": round(float(logits.std()), 3),
                         "logit_absmax": round(float(logits.abs().max()), 3)}
        del m
        if not finite:
            print(json.dumps(info))
            sys.exit("non-finite logits")
    with open(os.path.join(out, "perf_model.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
