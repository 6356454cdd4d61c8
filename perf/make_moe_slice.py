#!/usr/bin/env python3
"""A deeper slice of the decider-35b-a3b widths ($PERF_DIR/moe4 by default), written tensor by tensor.

    $REFENV/bin/python perf/make_moe_slice.py [--layers 4] [--from $PERF_DIR/moe2] [--out $PERF_DIR/moe4]
                                                        [--seed 20261202] [--force] [--check]

Why a sibling of make_models.py: make_models.py builds the whole model in memory and `save_pretrained` copies every
tensor once more while writing, which for 4 layers (4.4 B parameters, 8.8 GB in bf16) would need ~18 GB of RAM.  This
script streams: it writes the safetensors header first, then draws each tensor in f32 (in row blocks of <= 64 MiB),
rounds it to bf16 and appends it, so its memory stays below 1 GB.

Layout: exactly the one of the moe2 folder made by make_models.py (which transformers 5.23.0's `save_pretrained` wrote
and reloaded): the same tensor names (`model.*`, experts per expert), shapes and dtype for each layer type, with
layers [linear_attention, linear_attention, linear_attention, full_attention] for --layers 4 (every 4th full, as in
the released model); config.json = moe2's with `num_hidden_layers` and `layer_types` changed; tokenizer.json,
tokenizer_config.json, decider_config.json (version perf-moe<L>-v1) and generation_config.json copied from moe2.
Weights: model_rules.py's `randomize_` rules by tensor name (the per-expert 2-D tensors fall under its
nn.Linear rule, std 1/sqrt(fan_in), which equals its rule for the fused expert tensors), another seed than moe2.
Checks: the header round-trips (names, shapes, offsets, file size); with --check, transformers reloads the folder in
bf16 and a 16-token forward gives finite logits (needs ~10 GB of free RAM; off by default).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_paths  # noqa: E402

BLOCK_BYTES = 64 << 20


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def init_rule(name, shape):
    """(kind, a, b) as model_rules.py's randomize_ would draw this tensor."""
    if name.endswith("embed_tokens.weight"):
        return ("normal", 0.25, None)
    if name == "lm_head.weight":
        return ("normal", 1.0 / math.sqrt(shape[1]), None)
    if name.endswith("linear_attn.A_log"):
        return ("log_uniform", 0.02, 1.5)
    if name.endswith("linear_attn.dt_bias"):
        return ("uniform", -2.0, 1.0)
    if name.endswith("linear_attn.norm.weight"):
        return ("uniform", 0.5, 1.5)
    if name.endswith(("layernorm.weight", "model.norm.weight", "q_norm.weight", "k_norm.weight")):
        return ("uniform", -0.5, 0.5)
    if name.endswith("conv1d.weight"):
        return ("normal", 1.0 / math.sqrt(shape[-1]), None)
    if name.endswith("mlp.gate.weight"):
        return ("normal", 3.0 / math.sqrt(shape[1]), None)
    if len(shape) == 2:
        return ("normal", 1.0 / math.sqrt(shape[1]), None)
    raise SystemExit(f"no init rule for {name} {shape}")


def draw(gen, rule, shape):
    kind, a, b = rule
    if kind == "normal":
        return torch.randn(shape, generator=gen, dtype=torch.float32) * a
    x = torch.rand(shape, generator=gen, dtype=torch.float32) * ((b - a)) + a
    return torch.log(x) if kind == "log_uniform" else x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--from", dest="src", default=os.path.join(perf_paths.perf_dir(), "moe2"))
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    out = a.out or os.path.join(perf_paths.perf_dir(), f"moe{a.layers}")
    if os.path.exists(os.path.join(out, "perf_model.json")) and not a.force:
        print(f"{out} exists (use --force to remake)")
        return 0
    src_st = os.path.join(a.src, "model.safetensors")
    if not os.path.exists(src_st):
        sys.exit(f"{src_st} missing: make it first with make_models.py moe2 (setup.sh does)")
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    src_types = cfg["layer_types"]
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(a.layers)]
    proto = {t: src_types.index(t) for t in set(types)}        # layer of moe2 that has each type
    header_src, _ = read_header(src_st)
    layer_re = re.compile(r"^model\.layers\.(\d+)\.(.*)$")
    entries = []                                              # (name, shape, dtype)
    for name, meta in header_src.items():
        if name == "__metadata__":
            continue
        m = layer_re.match(name)
        if not m:
            entries.append((name, meta["shape"], meta["dtype"]))
    for i, t in enumerate(types):
        for name, meta in header_src.items():
            m = layer_re.match(name)
            if m and int(m.group(1)) == proto[t]:
                entries.append((f"model.layers.{i}.{m.group(2)}", meta["shape"], meta["dtype"]))
    entries.sort(key=lambda e: e[0])
    assert all(dt == "BF16" for _, _, dt in entries), "moe2 is expected to be all bf16"

    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dt in entries:
        n = 2 * math.prod(shape)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    t0 = time.time()
    gen = torch.Generator().manual_seed(a.seed)
    tmp = os.path.join(out, "model.safetensors.part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, _ in entries:
            rule = init_rule(name, shape)
            rows = shape[0]
            per_row = max(1, math.prod(shape[1:]) * 4)
            step = max(1, BLOCK_BYTES // per_row)
            for r0 in range(0, rows, step):
                blk = draw(gen, rule, [min(step, rows - r0)] + list(shape[1:]))
                f.write(blk.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    size = os.path.getsize(os.path.join(out, "model.safetensors"))
    assert size == 8 + len(hb) + off, (size, 8 + len(hb) + off)
    back, _ = read_header(os.path.join(out, "model.safetensors"))
    assert {k: (v["shape"], v["data_offsets"]) for k, v in back.items() if k != "__metadata__"} == \
        {k: (v["shape"], v["data_offsets"]) for k, v in header.items() if k != "__metadata__"}

    cfg["num_hidden_layers"] = a.layers
    cfg["layer_types"] = types
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(a.src, fn)):
            shutil.copyfile(os.path.join(a.src, fn), os.path.join(out, fn))
    dc = json.load(open(os.path.join(a.src, "decider_config.json")))
    dc["version"] = f"perf-moe{a.layers}-v1"
    with open(os.path.join(out, "decider_config.json"), "w") as f:
        json.dump(dc, f, indent=2)
        f.write("\n")
    params = off // 2
    info = {"which": f"moe{a.layers}", "out": out, "from": a.src, "layer_types": types, "params": params,
            "seed": a.seed, "torch": torch.__version__, "write_s": round(time.time() - t0, 1), "bytes": size}
    if a.check:
        sys.modules["fla"] = None
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM
        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        ids = tok.encode("Context: my card was charged twice. Question: is it urgent? Answer: (",
                         add_special_tokens=False).ids[:16]
        m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
        with torch.inference_mode():
            logits = m(torch.tensor([ids])).logits.float()
        info["check"] = {"class": type(m).__name__, "logits_finite": bool(torch.isfinite(logits).all()),
                         "logit_std": round(float(logits.std()), 3)}
        del m
        if not info["check"]["logits_finite"]:
            print(json.dumps(info))
            sys.exit("non-finite logits")
    with open(os.path.join(out, "perf_model.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
