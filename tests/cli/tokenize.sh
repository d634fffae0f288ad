#!/usr/bin/env bash
# vram tokenize: ids equal to an independent Python byte-level BPE (tests/cli/bpe_oracle.py) on
# ASCII, accented Unicode, emoji, CJK, whitespace runs and added tokens, for a GPT-2 style and a
# Llama 3 style tokenizer.json (uint16 and uint32 token files); bad input exits with one line.
set -euo pipefail
vram="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
$py -c "import regex" 2>/dev/null || py=python3

$py "$here/bpe_oracle.py" make "$tmp"
for t in gpt2 llama3; do
  "$vram" tokenize --tokenizer "$tmp/$t.json" "$tmp/text.txt" "$tmp/$t.bin"
  $py "$here/bpe_oracle.py" check "$tmp/$t.json" "$tmp/text.txt" "$tmp/$t.bin"
done

fails() { # expected exit code, expected text, command...
  local code="$1" want="$2"; shift 2
  set +e; "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" -eq "$code" ] || { echo "exit $rc, expected $code: $*"; cat "$tmp/err"; exit 1; }
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "not one line: $*"; cat "$tmp/err"; exit 1; }
  grep -q -- "$want" "$tmp/err" || { echo "no '$want' in: $(cat "$tmp/err")"; exit 1; }
}
echo '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$tmp/wp.json"
fails 1 'model.type "WordPiece" is not supported' "$vram" tokenize --tokenizer "$tmp/wp.json" "$tmp/text.txt" "$tmp/x.bin"
echo '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' >"$tmp/ug.json"
fails 1 'ug.json: model.type "Unigram"' "$vram" tokenize --tokenizer "$tmp/ug.json" "$tmp/text.txt" "$tmp/x.bin"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' >"$tmp/bad.json"
fails 1 'model.merges\[0\]' "$vram" tokenize --tokenizer "$tmp/bad.json" "$tmp/text.txt" "$tmp/x.bin"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}}' >"$tmp/ms.json"
fails 1 'pre_tokenizer.type "Metaspace"' "$vram" tokenize --tokenizer "$tmp/ms.json" "$tmp/text.txt" "$tmp/x.bin"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' >"$tmp/small.json"
fails 1 'small.json: no token for "H"' "$vram" tokenize --tokenizer "$tmp/small.json" "$tmp/text.txt" "$tmp/x.bin"
fails 1 'cannot open' "$vram" tokenize --tokenizer "$tmp/missing.json" "$tmp/text.txt" "$tmp/x.bin"
fails 2 '--tokenizer' "$vram" tokenize "$tmp/text.txt" "$tmp/x.bin"
fails 2 'unknown flag --bogus' "$vram" tokenize --bogus --tokenizer "$tmp/gpt2.json" "$tmp/text.txt" "$tmp/x.bin"
[ ! -e "$tmp/x.bin" ] || { echo "a failed run left x.bin"; exit 1; }
echo "tokenize: ok"
