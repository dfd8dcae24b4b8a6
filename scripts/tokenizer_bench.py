#!/usr/bin/env python3
"""Encode throughput of `foundry tokenize` against tiktoken, on one core.

Both encoders run in this process's CPU set, pinned to one core, on the
same text in the same run: tiktoken's encode_ordinary (the Llama 3
Encoding built from the ranks file, as tokenizer_crosscheck.py does) and
`foundry tokenize --bench N` (which times only the encoding, after
loading). Each measurement is repeated and the best of the rounds kept.
The texts are the test corpus (tests/data/tokenizer/corpus: code, many
scripts, emoji, long pieces), its English and code files, and its file of
long pieces (runs of 300 to 3,000 bytes without a break), each repeated to
about --mb megabytes. Writes a JSON report and prints a table.

usage: tokenizer_bench.py --foundry BUILD/foundry [--report OUT.json]
                          [--mb 4] [--rounds 5] [--core 0]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_crosscheck import DATA, RANKS, corpus, tiktoken_encoding  # noqa

TEXTS = {
    "corpus": None,  # every file
    "english+code": ("english.txt", "code_c.txt", "code_python_crlf.txt"),
    "long pieces": ("long_pieces.txt",),
}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build_text(names, megabytes):
    parts = [data for name, data in corpus() if names is None or name in names]
    unit = b"\n".join(parts)
    repeats = max(1, int(megabytes * 1e6) // len(unit))
    return unit * repeats


def time_tiktoken(enc, text, rounds):
    best = None
    ids = 0
    for _ in range(rounds):
        start = time.perf_counter()
        ids = len(enc.encode_ordinary(text))
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    return best, ids


def time_foundry(foundry, path, rounds):
    best = None
    ids = 0
    for _ in range(rounds):
        out = subprocess.run([foundry, "tokenize", "--tokenizer", RANKS,
                              "--file", path, "--bench", "1"],
                             capture_output=True, check=True, text=True)
        result = json.loads(out.stdout)
        ids = result["ids"]
        best = (result["seconds"] if best is None
                else min(best, result["seconds"]))
    return best, ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--foundry", required=True)
    parser.add_argument("--report")
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--core", type=int, default=0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})  # children inherit it
    import tiktoken
    enc = tiktoken_encoding(RANKS)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, names in TEXTS.items():
            data = build_text(names, args.mb)
            path = os.path.join(tmp, "text")
            with open(path, "wb") as f:
                f.write(data)
            text = data.decode("utf-8")
            t_sec, t_ids = time_tiktoken(enc, text, args.rounds)
            f_sec, f_ids = time_foundry(args.foundry, path, args.rounds)
            if t_ids != f_ids:
                sys.exit("%s: tiktoken gave %d ids, foundry %d" %
                         (label, t_ids, f_ids))
            results.append({
                "text": label, "bytes": len(data), "ids": t_ids,
                "tiktoken_mb_per_second": len(data) / t_sec / 1e6,
                "foundry_mb_per_second": len(data) / f_sec / 1e6,
                "foundry_over_tiktoken": t_sec / f_sec,
            })
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "machine": {"cpu": cpu_model(), "core": args.core,
                    "platform": platform.platform()},
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "tiktoken": tiktoken.__version__,
        "rounds": args.rounds,
        "results": results,
    }
    print("%-14s %10s %10s %16s %16s %8s" % ("text", "MB", "ids",
          "tiktoken MB/s", "foundry MB/s", "ratio"))
    for r in results:
        print("%-14s %10.2f %10d %16.2f %16.2f %8.2f" % (
            r["text"], r["bytes"] / 1e6, r["ids"],
            r["tiktoken_mb_per_second"], r["foundry_mb_per_second"],
            r["foundry_over_tiktoken"]))
    if args.report:
        with open(args.report, "x") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
