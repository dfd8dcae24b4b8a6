#!/usr/bin/env python3
"""Plots aggregate decode tokens/s against the batch from foundry.infer.report
files of version 3 (`foundry infer-bench --batch B`, `scripts/torch_baseline.py
--batch B`; docs/infer-bench.md, "Batched decode").

Each report is one point: x = protocol.batch, y =
statistics.aggregate_decode_tokens_per_second. Reports fall into series by
implementation, backend and placement: resident (nothing streamed per decode
step) or streamed (weights.streamed_bytes_per_decode_step > 0, or the peer's
Accelerate offload), with the weight budget in the name. Beside each streamed
series, dashed, the PCIe bound of its reports:
streaming.aggregate_decode_tokens_per_second_bound (batch x the same-run
host-to-device ceiling / the bytes streamed per step) where the report has
one. Both axes are logarithmic. The points are also printed as a table, and
the Foundry points as the rows of the docs' table (B, resident tok/s,
streamed tok/s, PCIe bound).

usage: plot_batch.py --out PNG [--title TEXT] REPORT...
exit: 0 plotted, 1 a file that is not a successful version 3 report (or a
      field missing, or two reports of one series at one batch), an existing
      PNG (never overwritten) or matplotlib missing, 2 usage error
"""
import argparse
import json
import os
import sys

FORMAT = "foundry.infer.report"
FIRST_VERSION = 3


class Bad(Exception):
    """A report that cannot be plotted: why."""


def get(report, path):
    for key in path:
        if not isinstance(report, dict) or report.get(key) is None:
            return None
        report = report[key]
    return report


def require(report, path, kind, name):
    """The value at path, of kind (a type or tuple of types), or Bad naming
    the field."""
    value = get(report, path)
    if value is None or isinstance(value, bool) or not isinstance(value, kind):
        raise Bad("%s: no %s (a report of foundry infer-bench or torch_baseline.py of "
                  "version %d or later has it)" % (name, ".".join(path), FIRST_VERSION))
    return value


def size(n):
    """Bytes as --weight-budget spells them: 512MiB, 1GiB, 700KiB."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return "%d bytes" % n


def point(path):
    """(series name, streamed, batch, aggregate tok/s, aggregate bound or None,
    implementation) of one report."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        raise Bad("%s: %s" % (path, e))
    if not isinstance(r, dict) or r.get("format") != FORMAT:
        raise Bad("%s is not a %s" % (path, FORMAT))
    version = r.get("version")
    if not isinstance(version, int) or version < FIRST_VERSION:
        raise Bad("%s: version %s has no batch (version %d or later: run it again with "
                  "--batch)" % (path, version, FIRST_VERSION))
    if r.get("status") != "ok":
        raise Bad("%s records a failed run: %s" % (path, r.get("error")))
    batch = require(r, ("protocol", "batch"), int, path)
    if batch < 1:
        raise Bad("%s: protocol.batch is %d" % (path, batch))
    tps = require(r, ("statistics", "aggregate_decode_tokens_per_second"), (int, float), path)
    offload = get(r, ("peer", "offload"))
    step = get(r, ("weights", "streamed_bytes_per_decode_step"))
    if offload is None and step is None:
        raise Bad("%s: no weights.streamed_bytes_per_decode_step (resident or streamed?)"
                  % path)
    streamed = offload is not None or step > 0
    implementation, backend = str(r.get("implementation")), str(r.get("backend"))
    name = backend if backend.startswith(implementation) else implementation + " " + backend
    if streamed:
        budget = get(offload or {}, ("budget_bytes",)) or get(r, ("weights", "budget_bytes"))
        name += ", streamed" + (" under %s" % size(budget) if budget else "")
    else:
        name += ", resident"
    bound = get(r, ("streaming", "aggregate_decode_tokens_per_second_bound"))
    return name, streamed, batch, float(tps), bound, r.get("implementation")


def series_of(points):
    """{name: [(batch, tok/s, bound, path)] sorted by batch}; Bad on two
    reports of one series at one batch."""
    series = {}
    for path, (name, _, batch, tps, bound, _) in points:
        rows = series.setdefault(name, [])
        for other in rows:
            if other[0] == batch:
                raise Bad("%s and %s are both %s at batch %d: give one"
                          % (other[3], path, name, batch))
        rows.append((batch, tps, bound, path))
    for rows in series.values():
        rows.sort()
    return series


def print_tables(points, series):
    print("series  batch  aggregate tok/s  PCIe bound tok/s  report")
    for name, rows in series.items():
        for batch, tps, bound, path in rows:
            print("%s  %d  %.1f  %s  %s" % (name, batch, tps,
                                            "%.1f" % bound if bound else "-", path))
    foundry = [p for _, p in points if p[5] == "foundry"]
    if not foundry:
        return
    print()
    print("| B | resident tok/s | streamed tok/s | PCIe bound |")
    print("| --- | --- | --- | --- |")
    for batch in sorted({p[2] for p in foundry}):
        resident = [p[3] for p in foundry if p[2] == batch and not p[1]]
        streamed = [p for p in foundry if p[2] == batch and p[1]]
        cells = ["/".join("%.1f" % t for t in resident) or "-",
                 "/".join("%.1f" % p[3] for p in streamed) or "-",
                 "/".join("%.1f" % p[4] for p in streamed if p[4]) or "-"]
        print("| %d | %s |" % (batch, " | ".join(cells)))


def plot(series, streamed, out, title):
    try:
        import matplotlib
    except ImportError:
        raise Bad("matplotlib is needed for the plot (pip install matplotlib); the table "
                  "above needed nothing")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, rows in series.items():
        xs = [r[0] for r in rows]
        line, = ax.plot(xs, [r[1] for r in rows], marker="o", label=name)
        bounds = [(r[0], r[2]) for r in rows if r[2]]
        if streamed[name] and bounds:
            ax.plot([b[0] for b in bounds], [b[1] for b in bounds], linestyle="--",
                    color=line.get_color(), label="PCIe bound (%s)" % name)
    batches = sorted({r[0] for rows in series.values() for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("aggregate decode tokens/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    with open(out, "xb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(prog="plot_batch.py", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, metavar="PNG",
                    help="the plot (PNG; never overwritten)")
    ap.add_argument("--title", default="Llama decode: aggregate tokens/s against the batch")
    ap.add_argument("reports", nargs="+", metavar="REPORT")
    args = ap.parse_args(argv)
    try:
        if os.path.exists(args.out):
            raise Bad("%s exists; plots are never overwritten" % args.out)
        points = [(path, point(path)) for path in args.reports]
        series = series_of(points)
        streamed = {p[0]: p[1] for _, p in points}
        print_tables(points, series)
        plot(series, streamed, args.out, args.title)
    except Bad as e:
        print("plot_batch.py: error: %s" % e, file=sys.stderr)
        return 1
    print("plot: %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
