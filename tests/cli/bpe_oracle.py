#!/usr/bin/env python3
"""Independent byte-level BPE for tests/cli/tokenize.sh.

  bpe_oracle.py make DIR       writes DIR/gpt2.json (ByteLevel with the GPT-2 regex, merges "a b")
                               and DIR/llama3.json (Split regex + ByteLevel, merges [a, b],
                               ignore_merges, an added token with id 70000), and DIR/text.txt
  bpe_oracle.py check TOK.json TEXT BIN
                               encodes TEXT with this file's own BPE and compares with the token file BIN
"""
import json, struct, sys
import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXT = ("Hello world! It's a test, isn't it? We'll see 12345 numbers.\n"
        "Ünïcödé façade naïve café — “quotes” and emoji 🙂👍🏽🎉 end.\n"
        "日本語のテキストと中文字符，한국어도.\n"
        "whitespace   runs\t\tand\n\n\n  trailing   \n"
        "<|endoftext|>after the special token<|endoftext|><|endoftext|>x\n"
        "  leading spaces and a lone é")
# Not seen in training: merges apply partially, rare bytes stay single.
UNSEEN = ("\nThé quick brown 🦊 jumps over 東京 and 서울: 9876543210 lazy dogs!!! they've\r\n"
          "\u00a0nbsp\u2003em-space  \x01\x7f control, Ωmega ∑ ∫ 𝔘𝔫𝔦 <|end|> fin<|endoftext|")


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def to_alphabet(s):
    return "".join(B2U[b] for b in s.encode("utf-8"))


def train(words, n_merges):
    """Plain BPE training over byte-level words: the most frequent pair, ties by first seen."""
    seqs = [list(w) for w in words]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: counts[p])
        merges.append(best)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if (s[i], s[i + 1]) == best:
                    s[i:i + 2] = [s[i] + s[i + 1]]
                else:
                    i += 1
    return merges


def make(d):
    corpus = TEXT.replace("<|endoftext|>", " ") * 3 + " the the the of and to in is"
    words = [to_alphabet(w) for w in regex.findall(GPT2, corpus)]
    merges = train(words, 300)
    vocab = {B2U[b]: i for i, b in enumerate(sorted(B2U))}
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    eot = len(vocab)
    gpt2 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    # Llama 3 style: list merges, ignore_merges, a vocab token no merge path reaches.
    v3 = dict(vocab)
    if to_alphabet(" naïve") not in v3:
        v3[to_alphabet(" naïve")] = len(v3)
    llama3 = json.loads(json.dumps(gpt2))
    llama3["model"]["vocab"] = v3
    llama3["model"]["merges"] = [[a, b] for a, b in merges]
    llama3["model"]["ignore_merges"] = True
    llama3["added_tokens"] = [{"id": 70000, "content": "<|endoftext|>", "special": True},
                              {"id": 70001, "content": "<|end|>", "special": True}]
    llama3["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    json.dump(gpt2, open(d + "/gpt2.json", "w"), ensure_ascii=False)
    json.dump(llama3, open(d + "/llama3.json", "w"), ensure_ascii=False)
    open(d + "/text.txt", "w", encoding="utf-8", newline="").write(TEXT + UNSEEN)


def encode(tok, text):
    m = tok["model"]
    vocab = m["vocab"]
    merges = m["merges"]
    rank = {}
    for i, mg in enumerate(merges):
        a, b = mg.split(" ") if isinstance(mg, str) else mg
        rank.setdefault((a, b), i)
    ignore = m.get("ignore_merges", False)
    added = sorted(tok["added_tokens"], key=lambda t: -len(t["content"]))
    pre = tok["pre_tokenizer"]
    steps = pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]

    def pretok(span):
        pieces = [span]
        for st in steps:
            pat = st["pattern"]["Regex"] if st["type"] == "Split" else (GPT2 if st.get("use_regex", True) else None)
            if pat is None:
                continue
            out = []
            for p in pieces:
                last = 0
                for mt in regex.finditer(pat, p):
                    if mt.end() == mt.start():
                        continue
                    if mt.start() > last:
                        out.append(p[last:mt.start()])
                    out.append(mt.group())
                    last = mt.end()
                if last < len(p):
                    out.append(p[last:])
            pieces = out
        return pieces

    def bpe(word):
        if ignore and word in vocab:
            return [vocab[word]]
        syms = list(word)
        while True:
            best = None
            for i in range(len(syms) - 1):
                r = rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [vocab[s] for s in syms]

    ids = []
    i = start = 0
    while i <= len(text):
        hit = None
        if i < len(text):
            for t in added:
                if text.startswith(t["content"], i):
                    hit = t
                    break
            if hit is None:
                i += 1
                continue
        if i > start:
            for p in pretok(text[start:i]):
                ids += bpe(to_alphabet(p))
        if hit is None:
            break
        ids.append(hit["id"])
        i = start = i + len(hit["content"])
    return ids


def check(tok_path, text_path, bin_path):
    tok = json.load(open(tok_path, encoding="utf-8"))
    text = open(text_path, encoding="utf-8", newline="").read()
    want = encode(tok, text)
    raw = open(bin_path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert magic == 20240520, magic
    width = {1: 2, 2: 4}[version]
    vmax = max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"]))
    assert (width == 4) == (vmax + 1 > 65536), (width, vmax)
    got = list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), raw[1024:]))
    if got != want:
        k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
        sys.exit("%s: ids differ from the reference at %d: vram %s, reference %s"
                 % (tok_path, k, got[k:k + 8], want[k:k + 8]))
    assert len(set(want)) > 40, "too few distinct tokens to be a meaningful test"
    print("%s: %d ids equal to the reference (%d-byte tokens)" % (tok_path, n, width))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(*sys.argv[2:5])
