#!/usr/bin/env python3
"""Writes the Hugging Face tokenizer.json fixtures of tests/data/tokenizer/hf
and the ids that Hugging Face `tokenizers` gives for a corpus of strings, the
reference that tests/tokenizer/test_tokenizer.c compares Foundry with
(issue #30).

Each fixture is a small BPE trained by `tokenizers` itself on the test
corpus (tests/data/tokenizer/corpus), with the pipeline of a family of real
checkpoints. Byte-level BPEs:

  gpt2     ByteLevel pre-tokenizer (GPT-2's regex), <|endoftext|> added on
           its vocabulary id, merges written as "a b" strings
  smollm   Split(Llama 3-style regex, Isolated) + Digits(individual) +
           ByteLevel(use_regex false); <|im_start|>/<|im_end|> special on
           vocabulary ids; non-special added tokens with lstrip, rstrip,
           single_word; NFC normalizer (as Qwen2.5); merges as pairs
  roberta  ByteLevel with add_prefix_space; a vocabulary that lacks the
           bytes the corpus never has (Hugging Face leaves them out)

SentencePiece-style BPEs (vocabulary in UTF-8 with "\u2581" for spaces; the
100 most frequent characters of the corpus, so that the others fall back to
bytes or <unk>; <unk>, <s>, </s> first, then the 256 <0xNN> byte tokens as
Llama 2 has them):

  llama2    normalizer Prepend("\u2581") + Replace(" ", "\u2581"), no
            pre-tokenizer, byte_fallback, fuse_unk; the decoder Replace +
            ByteFallback + Fuse + Strip(1); a non-special <tool> matched in
            the normalized text, </tool> not (rstrip)
  mistral   Metaspace(prepend_scheme "first", split false), byte_fallback,
            the same decoder; [INST] and [/INST] special (Mistral v0.3)
  metaspace Metaspace(prepend_scheme "always", split true) and its decoder,
            no byte fallback: <unk> for each unknown character (not fused);
            ignore_merges
  never     Metaspace(prepend_scheme "never", split true) and its decoder,
            no byte fallback and no unk token (unknown characters are left
            out)

For every fixture, expected.json holds the strings and, for each, the ids
of encode(s, add_special_tokens=False) with special tokens recognised
("special") and with them as text ("plain", encode_special_tokens), and
the text that decode(ids) gives (one case per line). The SentencePiece-style
fixtures also get a tokenizer_config.json (bos_token <s>, eos_token </s>,
add_bos_token), as their checkpoints have it.

usage: make_hf_tokenizer_tests.py [OUT_DIR]   (pip install tokenizers)
"""
import json
import os
import sys

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer", "corpus")
SPACE = "\u2581"
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
LLAMA3_LIKE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
               r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_texts():
    texts = []
    for name in sorted(os.listdir(CORPUS)):
        with open(os.path.join(CORPUS, name), encoding="utf-8",
                  newline="") as f:
            texts.append(f.read())
    return texts


def strings(texts):
    out = ["", " ", "a", "hello world", "Hello  world\n\n  indented\tTab",
           "don't we'll THEY'RE", "1234567 89 3.14159 ½ ٣٤",
           "<|endoftext|>", "a<|endoftext|>b <|endoftext|> c",
           "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|><|im_end|><|im_start|>", "<|im_startx|>",
           "x <tool> y  <tool>  z<tool>w", "[MASK] a [MASK]b ,[MASK].",
           "the <sep>word</sep> mid<sep>dle",
           "caf\u0065\u0301 vs caf\u00e9, \u212b \u1e9b\u0323 \uac00\u11a8",
           "\r\n\r\n  \n\t\u3000 \u00a0x", "emoji 👩‍👩‍👧 🎉🎉 ✓", "ǅ ß ﬁ Ω",
           "<s>", "<s>hi</s>", " <s> hi", "a</s>", "<unk> x",
           "[INST] What is 2+2? [/INST] 4</s>", "[INST][/INST]",
           "a <tool> b<tool>c <tool>", "<tool>x", "x </tool>  y</tool>",
           SPACE, SPACE * 3 + "already" + SPACE + " spaced",
           "  two leading", "trailing  ", "\n\nnewlines\n", " \n ",
           "ÿ€𝄞 ½ \u0000\u007f", "漢字かな한글"]
    for t in texts:
        out.append(t)
        out.extend(line for line in t.split("\n")[:6] if line)
    return out


def train(pre, special, alphabet, size, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size, special_tokens=special, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        if alphabet else [])
    tok.train_from_iterator(corpus_texts(), trainer)
    return tok


def fixtures():
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False),
                 ["<|endoftext|>"], True, 700)
    smollm = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_LIKE), "isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], True, 800,
        normalizers.NFC())
    smollm.add_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=True),
        AddedToken("<sep>", single_word=True),
        AddedToken("</sep>", normalized=False)])
    smollm.add_special_tokens([AddedToken("[MASK]", lstrip=True)])
    roberta = train(pre_tokenizers.ByteLevel(add_prefix_space=True),
                    ["<s>", "</s>"], False, 500)
    return {"gpt2": gpt2, "smollm": smollm, "roberta": roberta}


def train_spm(size):
    """A SentencePiece-style BPE: Metaspace words, the 100 most frequent
    characters, then <unk> <s> </s> and the 256 byte tokens put first."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(SPACE, "always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=SPM_SPECIALS,
                                  limit_alphabet=100, show_progress=False)
    tok.train_from_iterator(corpus_texts(), trainer)
    model = json.loads(tok.to_str())["model"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trained = sorted(model["vocab"], key=model["vocab"].get)
    assert trained[:3] == SPM_SPECIALS and not set(byte_tokens) & set(trained)
    order = SPM_SPECIALS + byte_tokens + trained[3:]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
              for m in model["merges"]]
    return {t: i for i, t in enumerate(order)}, merges


def spm(size, normalizer, pre, decoder, added=(), special=(), **model):
    vocab, merges = train_spm(size)
    tok = Tokenizer(models.BPE(vocab, merges, **model))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoder
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, normalized=False)
                            for t in SPM_SPECIALS + list(special)])
    tok.add_tokens(list(added))
    return tok


def spm_fixtures():
    legacy = decoders.Sequence([decoders.Replace(SPACE, " "),
                                decoders.ByteFallback(), decoders.Fuse(),
                                decoders.Strip(" ", 1, 0)])
    llama2 = spm(
        900, normalizers.Sequence([normalizers.Prepend(SPACE),
                                   normalizers.Replace(" ", SPACE)]),
        None, legacy,
        added=[AddedToken("<tool>", normalized=True),
               AddedToken("</tool>", normalized=False, rstrip=True)],
        unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    mistral = spm(
        800, None, pre_tokenizers.Metaspace(SPACE, "first", split=False),
        legacy, special=["[INST]", "[/INST]"], unk_token="<unk>",
        byte_fallback=True, fuse_unk=True)
    metaspace = spm(
        700, None, pre_tokenizers.Metaspace(SPACE, "always", split=True),
        decoders.Metaspace(SPACE, "always", split=True), unk_token="<unk>",
        fuse_unk=False, ignore_merges=True)
    never = spm(
        600, None, pre_tokenizers.Metaspace(SPACE, "never", split=True),
        decoders.Metaspace(SPACE, "never", split=True))
    return {"llama2": llama2, "mistral": mistral, "metaspace": metaspace,
            "never": never}


def pair_merges(path):
    """Rewrites the merges of a tokenizer.json as ["a", "b"] pairs."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m
                              for m in doc["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)


def string_merges(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                              for m in doc["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "tests", "data", "tokenizer", "hf")
    texts = strings(corpus_texts())
    made = fixtures()
    spm_names = spm_fixtures()
    made.update(spm_names)
    for name, tok in made.items():
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        tok.save(path, pretty=True)
        (pair_merges if name == "smollm" else string_merges)(path)
        ref = Tokenizer.from_file(path)  # the file as written, reloaded
        cases = []
        for s in texts:
            ref.encode_special_tokens = False
            special = ref.encode(s, add_special_tokens=False).ids
            ref.encode_special_tokens = True
            plain = ref.encode(s, add_special_tokens=False).ids
            cases.append({"text": s, "special": special, "plain": plain,
                          "decoded": ref.decode(special,
                                                skip_special_tokens=False)})
        with open(os.path.join(d, "expected.json"), "w",
                  encoding="utf-8") as f:
            f.write('{"tokenizers": "%s",\n"cases": [\n' %
                    tokenizers.__version__)
            f.write(",\n".join(json.dumps(c, ensure_ascii=False)
                                 for c in cases))
            f.write("\n]}\n")
        if name in spm_names:
            with open(os.path.join(d, "tokenizer_config.json"), "w",
                      encoding="utf-8") as f:
                json.dump({"bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>", "add_bos_token": True,
                           "add_eos_token": False}, f, indent=1)
                f.write("\n")
        print(f"{d}: {len(cases)} strings, vocabulary "
              f"{ref.get_vocab_size()}")


if __name__ == "__main__":
    main()
