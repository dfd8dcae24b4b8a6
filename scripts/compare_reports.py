#!/usr/bin/env python3
"""Prints foundry.infer.report files side by side (foundry infer-bench,
scripts/torch_baseline.py), each column after the first with its ratio to
the first report (value / first value: above 1 is slower for times, faster
for rates). Also says whether the reports ran the same prompt ids and
generated the same ids.

usage: compare_reports.py REPORT REPORT...
"""
import json
import sys

FORMAT = "foundry.infer.report"
# version 2 (foundry infer-bench since streaming) only adds fields
VERSIONS = (1, 2)

# (label, path in the report, unit scale, unit)
ROWS = [
    ("end to end median", ("statistics", "end_to_end", "median_seconds"), 1e3, "ms"),
    ("  95% CI low", ("statistics", "end_to_end", "median_ci_low_seconds"), 1e3, "ms"),
    ("  95% CI high", ("statistics", "end_to_end", "median_ci_high_seconds"), 1e3, "ms"),
    ("prefill median", ("statistics", "prefill_median_seconds"), 1e3, "ms"),
    ("prefill", ("statistics", "prefill_tokens_per_second"), 1.0, "tok/s"),
    ("time to first token", ("statistics", "time_to_first_token_seconds"), 1e3, "ms"),
    ("decode", ("statistics", "decode_tokens_per_second"), 1.0, "tok/s"),
    ("decode weight bytes/token", ("bandwidth", "decode_weight_bytes_per_token"), 1e-6, "MB"),
    ("achieved decode bandwidth", ("bandwidth", "achieved_bytes_per_second"), 1e-9, "GB/s"),
    ("device d2d bandwidth", ("bandwidth", "d2d", "bytes_per_second"), 1e-9, "GB/s"),
    ("fraction of d2d", ("bandwidth", "fraction_of_d2d"), 1.0, ""),
    ("weights in device memory", ("memory", "weights_resident"), 1e-6, "MB"),
    ("KV cache", ("memory", "kv_cache"), 1e-6, "MB"),
    ("setup", ("setup_seconds",), 1.0, "s"),
]


def get(report, path):
    for key in path:
        if not isinstance(report, dict) or report.get(key) is None:
            return None
        report = report[key]
    return report


def load(path):
    with open(path) as f:
        r = json.load(f)
    if r.get("format") != FORMAT or r.get("version") not in VERSIONS:
        raise SystemExit("error: %s is not a %s of version %s" % (
            path, FORMAT, " or ".join(map(str, VERSIONS))))
    if r.get("status") != "ok":
        raise SystemExit("error: %s records a failed run: %s" % (path, r.get("error")))
    return r


def table(reports):
    head = ["", *["%s (%s)" % (r.get("implementation"), r.get("backend")) for r in reports]]
    rows = [head,
            ["device", *[str(get(r, ("environment", "device", "name"))) for r in reports]],
            ["commit / versions", *[str(get(r, ("build", "git_commit")) or
                                        "torch %s, transformers %s" % (
                                            get(r, ("build", "torch")),
                                            get(r, ("build", "transformers"))))[:40]
                                    for r in reports]],
            ["protocol", *["%s %dx%d" % (get(r, ("protocol", "name")),
                                         get(r, ("protocol", "prompt_tokens")),
                                         get(r, ("protocol", "gen_tokens")))
                           for r in reports]]]
    for label, path, scale, unit in ROWS:
        first = get(reports[0], path)
        row = ["%s%s" % (label, " (%s)" % unit if unit else "")]
        for i, r in enumerate(reports):
            v = get(r, path)
            if v is None:
                row.append("-")
                continue
            cell = "%.4g" % (v * scale)
            if i > 0 and first:
                cell += " (x%.2f)" % (v / first)
            row.append(cell)
        rows.append(row)
    return rows


def main(argv):
    if len(argv) < 2 or any(a.startswith("-") for a in argv):
        print(__doc__.split("usage:")[1].strip(), file=sys.stderr)
        return 2
    reports = [load(p) for p in argv]
    rows = table(reports)
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    prompts = {json.dumps(get(r, ("protocol", "prompt_ids"))) for r in reports}
    print("same prompt ids: %s" % ("yes" if len(prompts) == 1 else "NO"))
    ids = [get(r, ("generated_ids",)) or [] for r in reports]
    for i, r in enumerate(reports[1:], 1):
        agree = 0
        while agree < min(len(ids[0]), len(ids[i])) and ids[0][agree] == ids[i][agree]:
            agree += 1
        print("generated ids of report %d agree with report 1 for the first %d of %d"
              % (i + 1, agree, len(ids[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
