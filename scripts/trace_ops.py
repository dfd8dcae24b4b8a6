#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Where a step's device time goes, by op kind, from an infer-bench trace.

Reads a `foundry infer-bench --trace` document (Chrome Trace JSON,
docs/infer-bench.md) and prints, for the runs of one step ("decode" unless
--step says otherwise), per op kind (the first word of a "launch" event's
name): launches per run, the median over runs of the kind's summed device
time per run in milliseconds, and its share of the summed time of every
kind; then the median wall time of a run. Runs are told apart by
args.run, the step by args.step.

usage: trace_ops.py TRACE.json [--step NAME]
exit status: 0 on success, 1 for a trace it cannot read (the reason is
printed), 2 for usage. Standard library only.
"""

import collections
import json
import statistics
import sys


def main(argv):
    args = argv[1:]
    step = "decode"
    if len(args) == 3 and args[1] == "--step":
        step = args[2]
        args = args[:1]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"trace_ops: {args[0]}: {e}", file=sys.stderr)
        return 1
    per_run = collections.defaultdict(lambda: collections.defaultdict(float))
    launches = collections.defaultdict(lambda: collections.defaultdict(int))
    walls = []
    for e in events:
        a = e.get("args") or {}
        if e.get("ph") != "X" or a.get("step") != step:
            continue
        if e.get("cat") == "launch":
            kind = e["name"].split(" ")[0]
            per_run[a["run"]][kind] += e["dur"] / 1e3
            launches[a["run"]][kind] += 1
        elif e.get("cat") == "run":
            walls.append(e["dur"] / 1e3)
    if not per_run:
        print(f"trace_ops: {args[0]}: no launches of step '{step}'",
              file=sys.stderr)
        return 1
    kinds = sorted({k for r in per_run.values() for k in r})
    medians = {k: statistics.median(r.get(k, 0.0) for r in per_run.values())
               for k in kinds}
    total = sum(medians.values())
    print(f"{step}: {len(per_run)} runs; op kind | launches per run | "
          "ms per run (median) | share")
    for k in sorted(kinds, key=lambda k: -medians[k]):
        n = statistics.median(r.get(k, 0) for r in launches.values())
        print(f"{k} | {n:g} | {medians[k]:.3f} | {medians[k] / total:.1%}")
    print(f"sum of launches: {total:.3f} ms; run wall time (median): "
          f"{statistics.median(walls):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
