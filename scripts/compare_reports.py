#!/usr/bin/env python3
"""Prints foundry.infer.report files side by side (foundry infer-bench,
scripts/torch_baseline.py), each column after the first with the ratio of
the first report to it (first / this: for a time above 1 means the first
report is slower, for a rate that it is faster). Says whether the reports
ran the same protocol, shapes and prompt ids (a difference is flagged
MISMATCH and the ratios are not a comparison) and for how many leading ids
the generated ids agree.

usage: compare_reports.py REPORT REPORT...
exit: 0 printed (mismatches included), 1 a file that is not a successful
      report, 2 usage error
"""
import json
import sys

FORMAT = "foundry.infer.report"
VERSIONS = (1, 2)
SHOWN_IDS = 8

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
    ("weights offloaded to host", ("memory", "weights_offloaded"), 1e-6, "MB"),
    ("offload budget", ("peer", "offload", "budget_bytes"), 1e-6, "MB"),
    ("copied to device per token", ("peer", "offload", "streamed_bytes_per_token"), 1e-6, "MB"),
    ("host-to-device pinned", ("peer", "offload", "h2d_pinned_bytes_per_second"), 1e-9, "GB/s"),
    ("KV cache", ("memory", "kv_cache"), 1e-6, "MB"),
    ("device memory peak / in use", ("memory", "device_in_use_bytes"), 1e-6, "MB"),
    ("setup", ("setup_seconds",), 1.0, "s"),
    ("compile execution", ("peer", "compile", "seconds"), 1.0, "s"),
]

# what must be equal for the ratios to compare like with like
SAME = [
    ("protocol", ("protocol", "name")),
    ("prompt tokens", ("protocol", "prompt_tokens")),
    ("generated tokens", ("protocol", "gen_tokens")),
    ("warmup executions", ("protocol", "warmup")),
    ("measured executions", ("protocol", "iterations")),
    ("EOS ignored", ("protocol", "ignore_eos")),
    ("vocabulary", ("model", "vocab_size")),
    ("hidden size", ("model", "hidden_size")),
    ("layers", ("model", "layers")),
    ("quantization group", ("model", "group_size")),
    ("device", ("environment", "device", "name")),
]


def get(report, path):
    for key in path:
        if not isinstance(report, dict) or report.get(key) is None:
            return None
        report = report[key]
    return report


def load(path):
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("error: %s: %s" % (path, e))
    if not isinstance(r, dict) or r.get("format") != FORMAT or r.get("version") not in VERSIONS:
        raise SystemExit("error: %s is not a %s (version %s)"
                         % (path, FORMAT, " or ".join(map(str, VERSIONS))))
    if r.get("status") != "ok":
        raise SystemExit("error: %s records a failed run: %s" % (path, r.get("error")))
    return r


def title(r):
    mode = get(r, ("peer", "mode"))
    return "%s (%s)" % (r.get("implementation"), r.get("backend") if not mode or
                        mode in str(r.get("backend")) else "%s, %s" % (r.get("backend"), mode))


def versions(r):
    if get(r, ("build", "git_commit")):
        return str(get(r, ("build", "git_commit")))[:12]
    parts = ["%s %s" % (k, get(r, ("build", k)))
             for k in ("torch", "transformers", "accelerate") if get(r, ("build", k))]
    return ", ".join(parts)


def table(reports):
    rows = [["", *[title(r) for r in reports]],
            ["device", *[str(get(r, ("environment", "device", "name"))) for r in reports]],
            ["commit / versions", *[versions(r) for r in reports]],
            ["protocol", *["%s %sx%s, %s+%s" % tuple(
                get(r, ("protocol", k)) for k in
                ("name", "prompt_tokens", "gen_tokens", "warmup", "iterations"))
                for r in reports]]]
    for label, path, scale, unit in ROWS:
        if all(get(r, path) is None for r in reports):
            continue
        first = get(reports[0], path)
        row = ["%s%s" % (label, " (%s)" % unit if unit else "")]
        for i, r in enumerate(reports):
            v = get(r, path)
            if v is None:
                row.append("-")
                continue
            cell = "%.4g" % (v * scale)
            if i > 0 and first is not None and v:
                cell += " (x%.2f)" % (first / v)
            row.append(cell)
        rows.append(row)
    return rows


def mismatches(reports):
    """Lines naming what differs between the first report and each other."""
    out = []
    for i, r in enumerate(reports[1:], 2):
        for label, path in SAME:
            a, b = get(reports[0], path), get(r, path)
            if a != b:
                out.append("MISMATCH: %s: report 1 %s, report %d %s" % (label, a, i, b))
        if get(reports[0], ("protocol", "prompt_ids")) != get(r, ("protocol", "prompt_ids")):
            out.append("MISMATCH: prompt ids of report %d differ from report 1's" % i)
    for i, r in enumerate(reports, 1):
        if get(r, ("protocol", "deviations")):
            out.append("note: report %d is not the whole protocol: %s"
                       % (i, ", ".join(get(r, ("protocol", "deviations")))))
    return out


def main(argv):
    if len(argv) < 2 or any(a.startswith("-") for a in argv):
        print(__doc__.split("usage:")[1].strip(), file=sys.stderr)
        return 2
    reports = [load(p) for p in argv]
    rows = table(reports)
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("ratios: report 1 / this report (a time above 1: report 1 slower; a rate above 1: "
          "report 1 faster)")
    problems = mismatches(reports)
    for line in problems:
        print(line)
    print("comparable: %s" % ("no" if any(p.startswith("MISMATCH") for p in problems)
                              else "yes"))
    prompts = {json.dumps(get(r, ("protocol", "prompt_ids"))) for r in reports}
    print("same prompt ids: %s" % ("yes" if len(prompts) == 1 else "NO"))
    ids = [get(r, ("generated_ids",)) or [] for r in reports]
    for i, r in enumerate(reports):
        print("first generated ids of report %d: %s" % (i + 1, ids[i][:SHOWN_IDS]))
    for i in range(1, len(reports)):
        agree = 0
        while agree < min(len(ids[0]), len(ids[i])) and ids[0][agree] == ids[i][agree]:
            agree += 1
        print("generated ids of report %d agree with report 1 for the first %d of %d"
              % (i + 1, agree, len(ids[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
