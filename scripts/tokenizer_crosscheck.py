#!/usr/bin/env python3
"""Cross-checks Foundry's Llama 3 tokenizer against tiktoken.

The expected ids of every file in tests/data/tokenizer/corpus/ come from
tiktoken, with an Encoding built from the same ranks file, the Llama 3
pre-tokenizer regex and the 256 special tokens (special-token spellings in
the text are encoded as plain text). Each tests/data/tokenizer/expected/
NAME.ids holds the ids as `foundry tokenize --file` prints them.

  tokenizer_crosscheck.py --write          regenerate the expected files
  tokenizer_crosscheck.py                  compare tiktoken with them
  tokenizer_crosscheck.py --foundry BIN [--tokenizer FILE]
                                           also compare `BIN tokenize`
                                           (tokenizer: the ranks file, or
                                           a tokenizer.json)
  tokenizer_crosscheck.py --hf-json FILE   also compare the Hugging Face
                                           `tokenizers` library with
                                           tokenizer.json FILE (when the
                                           library is installed)

Needs tiktoken (pip install tiktoken) except with --foundry alone
(--no-tiktoken). Exits 0 when everything agrees, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
RANKS = os.path.join(DATA, "llama3-tokenizer.model")
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
           r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def special_names():
    """The Llama 3 special tokens in id order (after the ranks)."""
    named = ["<|begin_of_text|>", "<|end_of_text|>",
             "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
             "<|eot_id|>", "<|python_tag|>"]
    return named + ["<|reserved_special_token_%d|>" % i
                    for i in range(3, 3 + 256 - len(named))]


def tiktoken_encoding(ranks_path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    ranks = load_tiktoken_bpe(ranks_path)
    specials = {name: len(ranks) + i
                for i, name in enumerate(special_names())}
    return tiktoken.Encoding("llama3", pat_str=PATTERN,
                             mergeable_ranks=ranks, special_tokens=specials)


def corpus():
    folder = os.path.join(DATA, "corpus")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            yield name, f.read()


def ids_text(ids):
    return ",".join(str(i) for i in ids) + "\n"


def expected_path(name):
    return os.path.join(DATA, "expected", os.path.splitext(name)[0] + ".ids")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--foundry")
    parser.add_argument("--tokenizer", default=RANKS)
    parser.add_argument("--hf-json")
    parser.add_argument("--no-tiktoken", action="store_true")
    args = parser.parse_args()

    enc = None if args.no_tiktoken else tiktoken_encoding(RANKS)
    hf = None
    if args.hf_json:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            print("tokenizers is not installed: skipping --hf-json")
        else:
            hf = Tokenizer.from_file(args.hf_json)
            hf.encode_special_tokens = True  # spellings are plain text
    if args.write:
        os.makedirs(os.path.join(DATA, "expected"), exist_ok=True)
    failures = 0
    checked = 0
    for name, data in corpus():
        path = expected_path(name)
        text = data.decode("utf-8")
        if args.write:
            with open(path, "w", newline="") as f:
                f.write(ids_text(enc.encode(text, disallowed_special=())))
            continue
        with open(path, newline="") as f:
            expected = f.read()
        results = []
        if enc:
            results.append(("tiktoken",
                            ids_text(enc.encode(text,
                                                disallowed_special=()))))
        if hf:
            ids = hf.encode(text, add_special_tokens=False).ids
            results.append(("tokenizers", ids_text(ids)))
        if args.foundry:
            out = subprocess.run([args.foundry, "tokenize", "--tokenizer",
                                  args.tokenizer, "--file",
                                  os.path.join(DATA, "corpus", name)],
                                 capture_output=True, check=False)
            results.append(("foundry", out.stdout.decode()
                            if out.returncode == 0 else out.stderr.decode()))
        for who, got in results:
            checked += 1
            if got != expected:
                failures += 1
                print("MISMATCH %s: %s differs from %s" %
                      (name, who, os.path.relpath(path, ROOT)))
    if args.write:
        print("wrote the expected ids of the corpus")
        return 0
    print("%d passed, %d failed" % (checked - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
