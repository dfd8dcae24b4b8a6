#!/usr/bin/env python3
"""Load generator for `foundry serve` (python3's standard library only).

C clients each send R streamed /v1/completions requests one after the
other, each with a fixed prompt of N token ids (one of --distinct prompts,
made from --seed) and M ids to generate (greedy, ignoring nothing: a stop
id may end one early). Prints one JSON report: requests completed and
failed, generated tokens, wall seconds, aggregate tokens/s (generated ids
over the wall time of the round), time to first token and inter-token
latency (p50 and p99, seconds, from the streamed chunks: one per id).

  scripts/serve_load.py --url http://127.0.0.1:8080 --prompt-tokens 512 \\
      --max-tokens 128 --clients 32 --requests 4

--write-prompts FILE writes the prompts as `foundry generate
--prompts-file` lines ({"ids": [...], "max_tokens": M}) and exits;
--expect FILE (generate's JSON lines for those prompts) checks that every
request got exactly the ids of its own prompt, so that no request gets
another's tokens. --rounds K repeats the load K times, one report line
each; --pid P adds the server's resident memory (VmRSS, bytes) after each
round. Exits 1 when a request failed or an id differed.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def prompts(args):
    rng = random.Random(args.seed)
    return [[rng.randrange(args.vocab) for _ in range(args.prompt_tokens)]
            for _ in range(args.distinct)]


def one_request(args, host, port, prompt, headers):
    """Sends one streamed request; returns (ids, ttft, gaps, error)."""
    body = json.dumps({"prompt": prompt, "max_tokens": args.max_tokens,
                       "temperature": 0, "stream": True})
    ids, gaps, ttft, last = [], [], None, None
    conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
    try:
        start = time.monotonic()
        conn.request("POST", "/v1/completions", body, headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return ids, None, gaps, f"status {resp.status}: {resp.read()!r}"
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return ids, ttft, gaps, f"error event: {chunk['error']}"
            got = chunk["choices"][0]["token_ids"]
            now = time.monotonic()
            if got:
                if ttft is None:
                    ttft = now - start
                else:
                    gaps.append(now - last)
                last = now
            ids.extend(got)
        return ids, ttft, gaps, None
    except (OSError, http.client.HTTPException, ValueError) as e:
        return ids, ttft, gaps, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def round_of_load(args, host, port, table, expected):
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    results = [[] for _ in range(args.clients)]

    def client(c):
        for r in range(args.requests):
            k = (c + r) % len(table)
            results[c].append(
                (k,) + one_request(args, host, port, table[k], headers))

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,))
               for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    done = [r for rs in results for r in rs]
    failed = [r for r in done if r[4] is not None]
    wrong = [r for r in done if r[4] is None and expected is not None and
             r[1] != expected[r[0]]]
    generated = sum(len(r[1]) for r in done)
    ttfts = [r[2] for r in done if r[2] is not None]
    gaps = [g for r in done for g in r[3]]
    report = {
        "clients": args.clients, "requests": len(done),
        "completed": len(done) - len(failed), "failed": len(failed),
        "wrong_ids": len(wrong), "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens, "generated_tokens": generated,
        "seconds": round(seconds, 4),
        "tokens_per_second": round(generated / seconds, 2),
        "ttft_p50": percentile(ttfts, 50), "ttft_p99": percentile(ttfts, 99),
        "itl_p50": percentile(gaps, 50), "itl_p99": percentile(gaps, 99)}
    for r in failed[:3]:
        print(f"serve_load: prompt {r[0]}: {r[4]}", file=sys.stderr)
    for r in wrong[:3]:
        print(f"serve_load: prompt {r[0]}: ids {r[1]}, expected "
              f"{expected[r[0]]}", file=sys.stderr)
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=4,
                   help="requests per client, one after the other")
    p.add_argument("--distinct", type=int, default=16,
                   help="distinct prompts (request r of client c sends "
                        "prompt (c + r) mod distinct)")
    p.add_argument("--vocab", type=int, default=1000,
                   help="prompt ids are drawn below this")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--api-key")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--write-prompts", metavar="FILE")
    p.add_argument("--expect", metavar="FILE")
    p.add_argument("--pid", type=int, help="the server's, for its VmRSS")
    args = p.parse_args()
    table = prompts(args)
    if args.write_prompts:
        with open(args.write_prompts, "w") as f:
            for ids in table:
                f.write(json.dumps({"ids": ids,
                                    "max_tokens": args.max_tokens}) + "\n")
        return 0
    expected = None
    if args.expect:
        with open(args.expect) as f:
            lines = [json.loads(line) for line in f]
        expected = {line["index"]: line["ids"] for line in lines}
    url = urllib.parse.urlparse(args.url)
    ok = True
    for k in range(args.rounds):
        report = round_of_load(args, url.hostname, url.port, table, expected)
        report["round"] = k + 1
        if args.pid:
            report["server_rss_bytes"] = rss(args.pid)
        print(json.dumps(report), flush=True)
        ok = ok and report["failed"] == 0 and report["wrong_ids"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
