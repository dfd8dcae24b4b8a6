#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json and tokenizer_config.json from a
tiktoken ranks file, as transformers' TikTokenConverter does for Llama 3
(standard library only).

The vocabulary is the ranks in the GPT-2 byte-to-character alphabet; the
merges list, for every token in rank order, each split of it into two
tokens (ordered by the ranks of the two parts); the pre-tokenizer is the
Llama 3 Split regex then ByteLevel; ignore_merges is true; the 256 Llama 3
special tokens follow the ranks.

usage: make_tokenizer_json.py RANKS_FILE OUT_DIR
"""
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_crosscheck import PATTERN, special_names  # noqa: E402

CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")


def byte_alphabet():
    """GPT-2's bytes_to_unicode: byte -> character."""
    printable = (list(range(33, 127)) + list(range(161, 173)) +
                 list(range(174, 256)))
    chars = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
    return ranks


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ranks = load_ranks(sys.argv[1])
    out = sys.argv[2]
    alphabet = byte_alphabet()

    def text(b):
        return "".join(alphabet[c] for c in b)

    vocab = {}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[text(token)] = rank
        splits = [(token[:i], token[i:]) for i in range(1, len(token))
                  if token[:i] in ranks and token[i:] in ranks]
        splits.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges.extend(text(left) + " " + text(right)
                      for left, right in splits)
    specials = special_names()
    added = [{"id": len(ranks) + i, "content": name, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, name in enumerate(specials)]
    bos = specials[0]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PATTERN},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False,
                 "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [len(ranks)],
                                     "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                    "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    config = {
        "bos_token": bos,
        "eos_token": "<|eot_id|>",
        "added_tokens_decoder": {
            str(item["id"]): {k: v for k, v in item.items() if k != "id"}
            for item in added},
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": True,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    os.makedirs(out, exist_ok=True)
    for name, doc in (("tokenizer.json", tokenizer),
                      ("tokenizer_config.json", config)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
