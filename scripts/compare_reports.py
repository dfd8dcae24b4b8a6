#!/usr/bin/env python3
"""Prints foundry.infer.report files side by side (foundry infer-bench,
scripts/torch_baseline.py, scripts/mlx_baseline.py), each column after
the first with the ratio of the first report to it (first / this: for a
time above 1 means the first report is slower, for a rate that it is
faster). Says whether the reports ran the same protocol, batch, shapes,
prompt ids and (where both record them) checkpoint file hashes (a
difference is flagged MISMATCH and the ratios are not a comparison) and
for how many leading ids the generated ids agree, for each sequence of a
batch (version 3: `--batch`; the reports of versions 1 and 2 are batches
of one).

usage: compare_reports.py REPORT REPORT...
exit: 0 printed (mismatches included), 1 a file that is not a successful
      report, 2 usage error
"""
import json
import sys

FORMAT = "foundry.infer.report"
VERSIONS = (1, 2, 3)
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
    ("aggregate decode", ("statistics", "aggregate_decode_tokens_per_second"), 1.0, "tok/s"),
    ("decode step p50", ("statistics", "decode_step_seconds", "p50"), 1e3, "ms"),
    ("decode step p99", ("statistics", "decode_step_seconds", "p99"), 1e3, "ms"),
    ("decode step mean", ("statistics", "decode_step_seconds", "mean"), 1e3, "ms"),
    ("decode weight bytes/token", ("bandwidth", "decode_weight_bytes_per_token"), 1e-6, "MB"),
    ("achieved decode bandwidth", ("bandwidth", "achieved_bytes_per_second"), 1e-9, "GB/s"),
    ("device d2d bandwidth", ("bandwidth", "d2d", "bytes_per_second"), 1e-9, "GB/s"),
    ("fraction of d2d", ("bandwidth", "fraction_of_d2d"), 1.0, ""),
    ("weights in device memory", ("memory", "weights_resident"), 1e-6, "MB"),
    ("weights offloaded to host", ("memory", "weights_offloaded"), 1e-6, "MB"),
    ("offload budget", ("peer", "offload", "budget_bytes"), 1e-6, "MB"),
    ("copied to device per token", ("peer", "offload", "streamed_bytes_per_token"), 1e-6, "MB"),
    ("host-to-device pinned", ("peer", "offload", "h2d_pinned_bytes_per_second"), 1e-9, "GB/s"),
    ("streamed per decode step", ("weights", "streamed_bytes_per_decode_step"), 1e-6, "MB"),
    ("host-to-device ceiling", ("streaming", "h2d", "bytes_per_second"), 1e-9, "GB/s"),
    ("aggregate PCIe bound", ("streaming", "aggregate_decode_tokens_per_second_bound"), 1.0,
     "tok/s"),
    ("KV cache", ("memory", "kv_cache"), 1e-6, "MB"),
    ("device memory peak / in use", ("memory", "device_in_use_bytes"), 1e-6, "MB"),
    ("setup", ("setup_seconds",), 1.0, "s"),
    ("compile execution", ("peer", "compile", "seconds"), 1.0, "s"),
]

# what must be equal for the ratios to compare like with like
SAME = [
    ("protocol", ("protocol", "name")),
    ("batch", ("protocol", "batch")),
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
            # a report before version 3 is a batch of one
            return 1 if path == ("protocol", "batch") else None
        report = report[key]
    return report


def sequences(report):
    """The generated ids of each sequence: sequence 0's generated_ids (every
    version has them), then those of generated_ids_by_sequence (version 3)
    after its first."""
    by_sequence = get(report, ("generated_ids_by_sequence",)) or []
    return [get(report, ("generated_ids",)) or []] + by_sequence[1:]


def leading(a, b):
    """How many leading ids a and b share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


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
    parts = ["%s %s" % (k.replace("_", "-"), get(r, ("build", k)))
             for k in ("torch", "transformers", "accelerate", "mlx", "mlx_lm")
             if get(r, ("build", k))]
    return ", ".join(parts)


def table(reports):
    rows = [["", *[title(r) for r in reports]],
            ["device", *[str(get(r, ("environment", "device", "name"))) for r in reports]],
            ["commit / versions", *[versions(r) for r in reports]],
            ["protocol", *["%s %sx%s, %s+%s, batch %s" % tuple(
                get(r, ("protocol", k)) for k in
                ("name", "prompt_tokens", "gen_tokens", "warmup", "iterations", "batch"))
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
        elif (get(r, ("protocol", "batch")) > 1 and
              get(reports[0], ("protocol", "seed")) != get(r, ("protocol", "seed"))):
            # sequence k's prompt comes from seed + k
            out.append("MISMATCH: seed: report 1 %s, report %d %s (the prompts of "
                       "sequences 1 and later)" % (get(reports[0], ("protocol", "seed")), i,
                                                   get(r, ("protocol", "seed"))))
        files = [get(x, ("model", "checkpoint", "files")) for x in (reports[0], r)]
        if all(isinstance(f, list) for f in files):
            # every report since issue #35 records the checkpoint's SHA-256s
            a, b = ({e.get("name"): e.get("sha256") for e in f if isinstance(e, dict)}
                    for f in files)
            differ = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            if differ:
                out.append("MISMATCH: checkpoint files of report %d differ from report 1's: %s"
                           % (i, ", ".join(differ)))
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
    seqs = [sequences(r) for r in reports]
    for i, r in enumerate(reports):
        print("first generated ids of report %d: %s" % (i + 1, seqs[i][0][:SHOWN_IDS]))
    for i in range(1, len(reports)):
        print("generated ids of report %d agree with report 1 for the first %d of %d"
              % (i + 1, leading(seqs[0][0], seqs[i][0]), len(seqs[0][0])))
        if len(seqs[0]) > 1 or len(seqs[i]) > 1:
            shared = min(len(seqs[0]), len(seqs[i]))
            agree = [leading(seqs[0][k], seqs[i][k]) for k in range(shared)]
            whole = sum(1 for k in range(shared) if seqs[0][k] == seqs[i][k])
            print("per sequence, leading ids of report %d agreeing with report 1: %s "
                  "(%d of %d sequences agree on every id)"
                  % (i + 1, " ".join(map(str, agree)), whole, shared))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
