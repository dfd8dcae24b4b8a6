#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""How much of the device compute ran while a copy ran, from a trace.

Reads a `foundry bench --trace` document (Chrome Trace JSON, docs/benchmark.md)
and prints, for every traced execution (a span on the "CPU: host issue"
track named "execution N: B buffers (phase)"): its wall time, the time the
copy track was busy, the time the compute track was busy, and the time both
were busy at once (the intersection of the union of copy spans with the
union of compute spans that start inside the execution), as milliseconds and
as a fraction of the compute time. Then, per buffer count, the median of
those fractions over the measured executions.

A `foundry infer-bench --trace` document (otherData.format
"foundry.infer.report", docs/infer-bench.md) is read per run instead: the
copies are its weight prefetches ("prefetch UNIT" events), the compute its
op launches, each run's events found by args.run; the same columns per run,
then the median over the decode runs of the share of compute overlapped by
prefetches and of the share of prefetch time hidden under compute.

usage: trace_overlap.py TRACE.json
exit status: 0 on success, 1 for a trace it cannot read (the reason is
printed), 2 for usage. Standard library only;
`uv run --script scripts/trace_overlap.py T.json` works too.
"""

import bisect
import json
import re
import statistics
import sys

EXECUTION_NAME = re.compile(r"^execution (\d+): (\d+) buffers? \((\w+)\)$")


class TraceError(Exception):
    pass


def union(spans):
    """Sorted, disjoint (start, end) intervals covering the given spans."""
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def intersection_length(a, b):
    """Total length of the intersection of two sorted, disjoint lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if high > low:
            total += high - low
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def tracks(events):
    """tid of the host, copy and compute tracks, from the thread names."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    found = {}
    for tid, name in names.items():
        for role in ("host", "copy", "compute"):
            if role in name:
                found[role] = tid
    missing = [r for r in ("host", "copy", "compute") if r not in found]
    if missing:
        raise TraceError(f"no {', '.join(missing)} track (thread names: {names})")
    return found


def executions(doc):
    """One dict per traced execution, in trace order."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError("not a Chrome trace: no traceEvents list")
    events = doc["traceEvents"]
    tid = tracks(events)
    spans = {role: [] for role in tid}
    for e in events:
        if e.get("ph") != "X":
            continue
        for role, t in tid.items():
            if e.get("tid") == t:
                spans[role].append(e)
    # Device spans by start time, so that each execution finds those that
    # start inside it by bisection rather than by a scan of the whole trace.
    device = {}
    for role in ("copy", "compute"):
        ordered = sorted(spans[role], key=lambda s: s["ts"])
        device[role] = ([s["ts"] for s in ordered], ordered)

    def inside(role, start, end):
        starts, ordered = device[role]
        low = bisect.bisect_left(starts, start)
        high = bisect.bisect_right(starts, end)
        return [(s["ts"], s["ts"] + s["dur"]) for s in ordered[low:high]]

    result = []
    for e in spans["host"]:
        match = EXECUTION_NAME.match(e.get("name", ""))
        if not match:
            continue
        start, end = e["ts"], e["ts"] + e["dur"]
        copy = union(inside("copy", start, end))
        compute = union(inside("compute", start, end))
        result.append({
            "sequence": int(match.group(1)),
            "buffers": int(match.group(2)),
            "phase": match.group(3),
            "wall_us": e["dur"],
            "copy_us": sum(h - l for l, h in copy),
            "compute_us": sum(h - l for l, h in compute),
            "overlap_us": intersection_length(copy, compute),
        })
    if not result:
        raise TraceError("no execution spans on the host track")
    return result


def infer_runs(doc):
    """One dict per run of an infer-bench trace, in run order."""
    events = doc["traceEvents"]
    runs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "run"]
    if not runs:
        raise TraceError("no run spans in an infer-bench trace")
    copies, launches = {}, {}
    for e in events:
        if e.get("ph") != "X":
            continue
        span = (e["ts"], e["ts"] + e["dur"])
        if e.get("cat") == "copy" and e["name"].startswith("prefetch"):
            copies.setdefault(e["args"]["run"], []).append(span)
        elif e.get("cat") == "launch":
            launches.setdefault(e["args"]["run"], []).append(span)
    result = []
    for k, e in enumerate(runs):
        copy = union(copies.get(k, []))
        compute = union(launches.get(k, []))
        result.append({
            "run": k,
            "step": e["args"]["step"],
            "wall_us": e["dur"],
            "copy_us": sum(h - l for l, h in copy),
            "compute_us": sum(h - l for l, h in compute),
            "overlap_us": intersection_length(copy, compute),
        })
    return result


def print_infer(rows):
    print("run  step        wall ms  prefetch ms  compute ms  overlapped ms"
          "  of compute  of prefetch")
    of_compute, of_copy = [], []
    for r in rows:
        share = r["overlap_us"] / r["compute_us"] if r["compute_us"] > 0 else 0.0
        hidden = r["overlap_us"] / r["copy_us"] if r["copy_us"] > 0 else 0.0
        print(f"{r['run']:3d}  {r['step']:8s}  {r['wall_us'] / 1e3:9.3f}"
              f"  {r['copy_us'] / 1e3:11.3f}  {r['compute_us'] / 1e3:10.3f}"
              f"  {r['overlap_us'] / 1e3:13.3f}  {100 * share:9.1f}%"
              f"  {100 * hidden:10.1f}%")
        if r["step"] == "decode" and r["copy_us"] > 0:
            of_compute.append(share)
            of_copy.append(hidden)
    if of_compute:
        print(f"decode runs: median {100 * statistics.median(of_compute):.1f}%"
              f" of compute overlapped by prefetches, "
              f"{100 * statistics.median(of_copy):.1f}% of prefetch time"
              f" hidden under compute ({len(of_compute)} runs)")
    else:
        print("decode runs: nothing prefetched (every weight resident)")


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            doc = json.load(f)
        infer = (isinstance(doc, dict) and isinstance(doc.get("otherData"), dict)
                 and doc["otherData"].get("format") == "foundry.infer.report")
        rows = infer_runs(doc) if infer else executions(doc)
    except (OSError, ValueError, KeyError, TypeError, TraceError) as e:
        print(f"trace_overlap.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    if infer:
        print_infer(rows)
        return 0
    print("execution  buffers  phase     wall ms  copy ms  compute ms"
          "  overlapped ms  of compute")
    fractions = {}
    for r in rows:
        share = r["overlap_us"] / r["compute_us"] if r["compute_us"] > 0 else 0.0
        print(f"{r['sequence']:9d}  {r['buffers']:7d}  {r['phase']:8s}"
              f"  {r['wall_us'] / 1e3:7.3f}  {r['copy_us'] / 1e3:7.3f}"
              f"  {r['compute_us'] / 1e3:10.3f}  {r['overlap_us'] / 1e3:13.3f}"
              f"  {100 * share:9.1f}%")
        if r["phase"] == "measured":
            fractions.setdefault(r["buffers"], []).append(share)
    for buffers in sorted(fractions):
        median = statistics.median(fractions[buffers])
        print(f"{buffers} buffers: median {100 * median:.1f}% of compute"
              f" overlapped by copies ({len(fractions[buffers])} measured"
              " executions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
