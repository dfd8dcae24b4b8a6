#!/usr/bin/env python3
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Recompute every statistic of a `foundry bench` report and check it.

Reads a report (format "foundry.bench.report", version 2, or 1 from before
the executor: the statistics are computed alike), recomputes from
its executions the median, mean, standard deviation, min and max of every
configuration, the bootstrap intervals for the median and the mean, the
paired speedup and its interval (the exact SplitMix64 resampler documented in
include/foundry/bench.h), throughputs and their fraction of the measured
host-to-device ceiling, and the copy/compute overlap figures, and compares
each with the value in the report to a relative tolerance of 1e-9.

usage: bench_summary.py REPORT.json
exit status: 0 when everything matches (a short summary is printed),
1 with the list of mismatches otherwise (or for a failed run), 2 for usage.
Standard library only; `uv run --script scripts/bench_summary.py R.json`.
"""

import json
import math
import sys

FORMAT = "foundry.bench.report"
VERSIONS = (1, 2)
CONFIDENCE = 0.95
GIB = float(1 << 30)
MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
TOLERANCE = 1e-9


class SplitMix64:
    def __init__(self, state):
        self.state = state & MASK

    def next(self):
        self.state = (self.state + GAMMA) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def stream_seed(seed, stream):
    """The (stream + 1)-th output of SplitMix64(seed)."""
    return SplitMix64(seed + stream * GAMMA).next()


def mean(xs):
    total = 0.0
    for x in xs:  # left to right, as the C code (sum() compensates)
        total += x
    return total / len(xs)


def median(xs):
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def stddev(xs):
    n = len(xs)
    if n < 2:
        return 0.0
    m = mean(xs)
    total = 0.0
    for x in xs:
        total += (x - m) * (x - m)
    return math.sqrt(total / (n - 1))


def percentile_sorted(v, p):
    h = float(len(v) - 1) * p
    i = int(math.floor(h))
    if i >= len(v) - 1:
        return v[-1]
    return v[i] + (h - i) * (v[i + 1] - v[i])


def interval(stats):
    stats.sort()
    tail = (1.0 - CONFIDENCE) / 2.0
    return percentile_sorted(stats, tail), percentile_sorted(stats, 1.0 - tail)


def bootstrap(xs, statistic, resamples, state):
    g = SplitMix64(state)
    n = len(xs)
    stats = []
    for _ in range(resamples):
        draw = [xs[g.next() % n] for _ in range(n)]
        stats.append(statistic(draw))
    return interval(stats)


def paired_speedup(base, xs, resamples, state):
    point = median(base) / median(xs)
    g = SplitMix64(state)
    n = len(xs)
    stats = []
    for _ in range(resamples):
        idx = [g.next() % n for _ in range(n)]
        stats.append(median([base[r] for r in idx]) / median([xs[r] for r in idx]))
    low, high = interval(stats)
    return point, low, high


class Checker:
    def __init__(self):
        self.mismatches = []
        self.checked = 0

    def close(self, what, got, want):
        self.checked += 1
        if got is None or want is None:
            if got is not want:
                self.mismatches.append(f"{what}: report {got!r}, recomputed {want!r}")
            return
        if got == want:
            return
        scale = max(abs(got), abs(want))
        if not (math.isfinite(got) and abs(got - want) <= TOLERANCE * scale):
            self.mismatches.append(f"{what}: report {got!r}, recomputed {want!r}")

    def equal(self, what, got, want):
        self.checked += 1
        if got != want:
            self.mismatches.append(f"{what}: report {got!r}, expected {want!r}")


def check(report):
    c = Checker()
    c.equal("format", report.get("format"), FORMAT)
    c.checked += 1
    if report.get("version") not in VERSIONS:
        c.mismatches.append(f"version: report {report.get('version')!r}, "
                            f"expected one of {VERSIONS}")
    if c.mismatches:
        return c, None
    if report.get("status") != "ok":
        err = report.get("error") or {}
        c.mismatches.append(
            f"the run failed ({err.get('kind')}, stage {err.get('stage')}): "
            f"{err.get('message')}")
        return c, None
    p = report["parameters"]
    buffers = p["buffers"]
    count = len(buffers)
    iterations, warmup = p["iterations"], p["warmup"]
    resamples, seed = p["bootstrap_resamples"], int(p["seed"])
    payload = p["payload_bytes"]
    c.equal("payload_bytes", payload, p["layers"] * p["weight_bytes"])

    executions = report["executions"]
    c.equal("execution count", len(executions), (warmup + iterations) * count)
    samples = [[None] * iterations for _ in range(count)]
    copy_ms, compute_ms = [None] * iterations, [None] * iterations
    for seq, x in enumerate(executions):
        r, pos, k = x["round"], x["position"], x["config"]
        c.equal(f"executions[{seq}].sequence", x["sequence"], seq)
        c.equal(f"executions[{seq}].round", r, seq // count)
        c.equal(f"executions[{seq}].position", pos, seq % count)
        c.equal(f"executions[{seq}].config (rotation)", k, (r + pos) % count)
        c.equal(f"executions[{seq}].buffers", x["buffers"], buffers[k])
        c.equal(f"executions[{seq}].phase", x["phase"],
                "measured" if r >= warmup else "warmup")
        c.equal(f"executions[{seq}].outcome", x["outcome"], "ok")
        c.equal(f"executions[{seq}].checksum", x["checksum"], "ok")
        if r >= warmup:
            samples[k][r - warmup] = x["elapsed_ns"] / 1e6
            if k == 0:
                cp, cm = x["device_copy_ns"], x["device_compute_ns"]
                copy_ms[r - warmup] = None if cp is None else cp / 1e6
                compute_ms[r - warmup] = None if cm is None else cm / 1e6
    if c.mismatches:
        return c, None

    peak = max(x["peak_slot_bytes"] for x in executions)
    c.equal("memory.device_slot_peak_bytes",
            report["memory"]["device_slot_peak_bytes"], peak)

    st = report["statistics"]
    for name, ceiling in st["ceilings"].items():
        if ceiling is not None:
            c.close(f"ceilings.{name}.gib_per_second", ceiling["gib_per_second"],
                    ceiling["bytes_per_second"] / GIB)
    h2d = st["ceilings"]["h2d"]["bytes_per_second"]
    kernel, d2d = st["ceilings"]["checksum_kernel"], st["ceilings"]["d2d"]
    if kernel is not None and d2d is not None:
        c.close("ceilings.checksum_kernel.fraction_of_d2d",
                kernel["fraction_of_d2d"],
                kernel["bytes_per_second"] / d2d["bytes_per_second"])
    rows = []
    c.equal("statistics.configurations count", len(st["configurations"]),
            count)
    if c.mismatches:
        return c, None
    for k, cfg in enumerate(st["configurations"]):
        xs = samples[k]
        name = f"configurations[{k}] ({buffers[k]} buffers)"
        c.equal(f"{name}.config", cfg["config"], k)
        c.equal(f"{name}.buffers", cfg["buffers"], buffers[k])
        c.equal(f"{name}.samples", cfg["samples"], iterations)
        c.equal(f"{name}.speedup.baseline_buffers",
                cfg["speedup"]["baseline_buffers"], buffers[0])
        c.equal(f"{name}.bootstrap_streams", cfg["bootstrap_streams"],
                {"median": 3 * k, "mean": 3 * k + 1, "speedup": 3 * k + 2})
        med = median(xs)
        c.close(f"{name}.median_ms", cfg["median_ms"], med)
        c.close(f"{name}.mean_ms", cfg["mean_ms"], mean(xs))
        c.close(f"{name}.stddev_ms", cfg["stddev_ms"], stddev(xs))
        c.close(f"{name}.min_ms", cfg["min_ms"], min(xs))
        c.close(f"{name}.max_ms", cfg["max_ms"], max(xs))
        lo, hi = bootstrap(xs, median, resamples, stream_seed(seed, 3 * k))
        c.close(f"{name}.median_ci_ms.low", cfg["median_ci_ms"]["low"], lo)
        c.close(f"{name}.median_ci_ms.high", cfg["median_ci_ms"]["high"], hi)
        lo, hi = bootstrap(xs, mean, resamples, stream_seed(seed, 3 * k + 1))
        c.close(f"{name}.mean_ci_ms.low", cfg["mean_ci_ms"]["low"], lo)
        c.close(f"{name}.mean_ci_ms.high", cfg["mean_ci_ms"]["high"], hi)
        point, lo, hi = paired_speedup(samples[0], xs, resamples,
                                       stream_seed(seed, 3 * k + 2))
        c.close(f"{name}.speedup.point", cfg["speedup"]["point"], point)
        c.close(f"{name}.speedup.low", cfg["speedup"]["low"], lo)
        c.close(f"{name}.speedup.high", cfg["speedup"]["high"], hi)
        gib_s = payload / (med / 1e3) / GIB
        c.close(f"{name}.throughput_gib_per_second",
                cfg["throughput_gib_per_second"], gib_s)
        c.close(f"{name}.fraction_of_h2d_ceiling",
                cfg["fraction_of_h2d_ceiling"], gib_s * GIB / h2d)
        rows.append((buffers[k], med, gib_s, gib_s * GIB / h2d, point, lo, hi))

    ov = st["overlap"]
    if None in copy_ms or None in compute_ms:
        c.equal("overlap (no device timings)", ov, None)
    else:
        t, comp = median(copy_ms), median(compute_ms)
        longest = max(t, comp)
        if longest <= 0.0:
            c.equal("overlap (zero device times)", ov, None)
        else:
            ideal = (t + comp) / longest
            c.equal("overlap.baseline_buffers", ov["baseline_buffers"],
                    buffers[0])
            c.equal("overlap.compared_buffers", ov["compared_buffers"],
                    buffers[-1] if count > 1 else None)
            c.close("overlap.copy_ms", ov["copy_ms"], t)
            c.close("overlap.compute_ms", ov["compute_ms"], comp)
            c.close("overlap.ideal_speedup", ov["ideal_speedup"], ideal)
            if count > 1:
                measured = rows[-1][4]
                c.close("overlap.measured_speedup", ov["measured_speedup"],
                        measured)
                c.close("overlap.fraction_of_ideal", ov["fraction_of_ideal"],
                        measured / ideal)
            else:  # nothing to compare the baseline with
                c.equal("overlap.measured_speedup", ov["measured_speedup"],
                        None)
                c.equal("overlap.fraction_of_ideal", ov["fraction_of_ideal"],
                        None)
    return c, rows


def main(argv):
    if len(argv) != 2:
        print("usage: bench_summary.py REPORT.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        print(f"bench_summary: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 1
    try:
        checker, rows = check(report)
    except (KeyError, TypeError, IndexError, ValueError, ZeroDivisionError) as e:
        print(f"bench_summary: {argv[1]}: malformed report: {e!r}",
              file=sys.stderr)
        return 1
    if checker.mismatches:
        print(f"bench_summary: {argv[1]}: {len(checker.mismatches)} "
              f"mismatch(es):", file=sys.stderr)
        for m in checker.mismatches:
            print(f"  {m}", file=sys.stderr)
        return 1
    env = report["environment"]
    device = (env.get("device") or {}).get("name")
    print(f"{argv[1]}: {checker.checked} values match "
          f"({env['backend']} backend, {device})")
    print("buffers  median ms    GiB/s  of ceiling  speedup  95% CI")
    for b, med, gib_s, frac, point, lo, hi in rows:
        print(f"{b:7d} {med:10.3f} {gib_s:8.3f} {100 * frac:10.1f}% "
              f"{point:8.3f}  [{lo:.3f}, {hi:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
