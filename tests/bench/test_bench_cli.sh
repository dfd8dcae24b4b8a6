#!/bin/sh
# `foundry bench` end to end on the CPU backend: a small run writes a report
# and a trace; with python3 the trace is checked (JSON, host/copy/compute
# tracks, counters), bench_summary.py recomputes the report's statistics, and
# a tampered report fails it; trace_overlap.py measures no overlap in the
# 1-buffer executions and refuses a truncated or foreign trace. Existing files are never overwritten, a budget
# below the slots fails with a "failed" report, and bad flags exit 2.
# usage: test_bench_cli.sh FOUNDRY BENCH_SUMMARY_PY TRACE_OVERLAP_PY [PYTHON3]
set -u
foundry=$1
summary=$2
overlap=$3
python=${4:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

expect() { # expect CODE DESCRIPTION COMMAND...
  want=$1; what=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, want $want"
    cat "$dir/err" >&2
  fi
}

small="--backend cpu --layers 6 --weight-mib 1 --iterations 5 --warmup 1 --bootstrap-resamples 2000"

expect 0 "help" "$foundry" bench --help
grep -q -- "--bootstrap-resamples" "$dir/out" || fail "help lacks the flags"

# shellcheck disable=SC2086
expect 0 "small cpu run" "$foundry" bench $small --report "$dir/r.json" --trace "$dir/t.json" --progress
for word in "median ms" "speedup vs 1" "ceiling" "ideal speedup" "verified"; do
  grep -q "$word" "$dir/out" || fail "console lacks '$word'"
done
grep -q "bench: \[18/18\] measured" "$dir/err" || fail "no progress lines on stderr"
[ -s "$dir/r.json" ] || fail "no report"
[ -s "$dir/t.json" ] || fail "no trace"

# Never overwrite: a second run refuses before any work, files unchanged.
cp "$dir/r.json" "$dir/before.json"
# shellcheck disable=SC2086
expect 1 "report onto an existing file" "$foundry" bench $small --report "$dir/r.json"
cmp -s "$dir/r.json" "$dir/before.json" || fail "existing report was modified"
grep -q "foundry bench: error: .*already exists" "$dir/err" || fail "message: $(cat "$dir/err")"
# shellcheck disable=SC2086
expect 1 "trace onto an existing file" "$foundry" bench $small --report "$dir/new.json" --trace "$dir/t.json"
[ -e "$dir/new.json" ] && fail "a refused run wrote a report"

if [ -n "$python" ]; then
  "$python" - "$dir/t.json" <<'PY' || fail "trace check"
import json, sys
doc = json.load(open(sys.argv[1]))
events = doc["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events
         if e["ph"] == "M" and e["name"] == "thread_name"}
assert set(names) == {1, 2, 3}, names
assert "host" in names[1] and "copy" in names[2] and "compute" in names[3], names
spans = [e for e in events if e["ph"] == "X"]
for tid in (1, 2, 3):
    assert any(e["tid"] == tid for e in spans), f"track {tid} is empty"
assert any(e["ph"] == "C" and e["name"] == "live slot bytes" for e in events)
for e in spans:
    assert e["dur"] >= 0 and e["ts"] >= 0, e
execs = [e for e in spans if e["cat"] == "execution"]
assert len(execs) == 18, len(execs)
PY
  expect 0 "bench_summary on the report" "$python" "$summary" "$dir/r.json"
  grep -q "values match" "$dir/out" || fail "summary output: $(cat "$dir/out")"

  "$python" - "$dir/r.json" "$dir/tampered-stat.json" "$dir/tampered-exec.json" \
    "$dir/tampered-configs.json" "$dir/tampered-streams.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["statistics"]["configurations"][1]["median_ci_ms"]["high"] *= 1.000001
json.dump(doc, open(sys.argv[2], "w"))
doc = json.load(open(sys.argv[1]))
doc["executions"][-1]["elapsed_ns"] += 1000
json.dump(doc, open(sys.argv[3], "w"))
doc = json.load(open(sys.argv[1]))
del doc["statistics"]["configurations"][-1]
json.dump(doc, open(sys.argv[4], "w"))
doc = json.load(open(sys.argv[1]))
doc["statistics"]["configurations"][0]["bootstrap_streams"]["mean"] = 7
json.dump(doc, open(sys.argv[5], "w"))
PY
  expect 1 "bench_summary on a tampered statistic" "$python" "$summary" "$dir/tampered-stat.json"
  grep -q "median_ci_ms.high" "$dir/err" || fail "mismatch not named: $(cat "$dir/err")"
  expect 1 "bench_summary on a tampered execution" "$python" "$summary" "$dir/tampered-exec.json"
  expect 1 "bench_summary on a missing configuration" "$python" "$summary" "$dir/tampered-configs.json"
  grep -q "configurations count" "$dir/err" || fail "count mismatch not named: $(cat "$dir/err")"
  expect 1 "bench_summary on tampered bootstrap streams" "$python" "$summary" "$dir/tampered-streams.json"

  expect 0 "trace_overlap on the trace" "$python" "$overlap" "$dir/t.json"
  [ "$(awk '$3 == "measured"' "$dir/out" | wc -l)" -eq 15 ] || fail "trace_overlap rows: $(cat "$dir/out")"
  awk '$2 == 1 && $3 == "measured" && $7 != "0.000" { bad = 1 } END { exit bad }' \
    "$dir/out" || fail "overlap in a 1-buffer execution: $(cat "$dir/out")"
  grep -q "^3 buffers: median .* of compute overlapped" "$dir/out" || fail "no 3-buffer summary"
  head -c 1000 "$dir/t.json" >"$dir/truncated.json"
  expect 1 "trace_overlap on a truncated trace" "$python" "$overlap" "$dir/truncated.json"
  grep -q "^trace_overlap.py: .*truncated.json: " "$dir/err" || fail "truncated message: $(cat "$dir/err")"
  expect 1 "trace_overlap on a report" "$python" "$overlap" "$dir/r.json"
  grep -q "no traceEvents" "$dir/err" || fail "foreign message: $(cat "$dir/err")"
  expect 2 "trace_overlap without arguments" "$python" "$overlap"
fi

# A budget below the slots fails (exit 1) and still writes a failed report.
# shellcheck disable=SC2086
expect 1 "cpu memory below the slots" "$foundry" bench $small --cpu-memory 2MiB --report "$dir/budget.json"
grep -q "foundry bench: error: .*exceed" "$dir/err" || fail "budget message: $(cat "$dir/err")"
[ -s "$dir/budget.json" ] || fail "no report for the failed run"
if [ -n "$python" ]; then
  "$python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "failed" and r["error"]["kind"] == "budget", r["error"]
assert r["memory"]["host_payload_bytes"] == 0
' "$dir/budget.json" || fail "budget report content"
  expect 1 "bench_summary on a failed report" "$python" "$summary" "$dir/budget.json"
fi

# Usage errors: exit 2 before any work.
expect 2 "trace without report" "$foundry" bench --backend cpu --trace "$dir/x.json"
expect 2 "same path for both" "$foundry" bench --backend cpu --report "$dir/y.json" --trace "$dir/y.json"
expect 1 "missing directory" "$foundry" bench --backend cpu --report "$dir/no/such/r.json"
expect 2 "zero layers" "$foundry" bench --backend cpu --layers 0
expect 2 "zero weight" "$foundry" bench --backend cpu --weight-mib 0
expect 2 "zero iterations" "$foundry" bench --backend cpu --iterations 0
expect 2 "zero resamples" "$foundry" bench --backend cpu --bootstrap-resamples 0
expect 2 "too many resamples" "$foundry" bench --backend cpu --bootstrap-resamples 1000001
expect 2 "duplicate buffers" "$foundry" bench --backend cpu --buffers 1,1
expect 2 "zero buffers" "$foundry" bench --backend cpu --buffers 0,2
expect 2 "empty buffer item" "$foundry" bench --backend cpu --buffers 1,,3
expect 2 "non-numeric buffers" "$foundry" bench --backend cpu --buffers one
expect 2 "buffers above the maximum" "$foundry" bench --backend cpu --buffers 65
expect 2 "overflowing weight" "$foundry" bench --backend cpu --weight-mib 18446744073709551615
expect 2 "bad backend" "$foundry" bench --backend gpu
expect 2 "bad host mode" "$foundry" bench --host-mode pinned
expect 2 "host mode on cpu" "$foundry" bench --backend cpu --host-mode staged
expect 2 "cpu memory on cuda" "$foundry" bench --backend cuda --cpu-memory 1GiB
expect 2 "bad cpu memory unit" "$foundry" bench --backend cpu --cpu-memory 12XB
expect 2 "zero cpu memory" "$foundry" bench --backend cpu --cpu-memory 0
expect 2 "negative device" "$foundry" bench --device -1
expect 2 "unknown option" "$foundry" bench --frobnicate
expect 2 "missing value" "$foundry" bench --layers
expect 2 "stray argument" "$foundry" bench extra
grep -q "^foundry bench: error: " "$dir/err" || fail "usage message format: $(cat "$dir/err")"

[ "$failures" -eq 0 ] || exit 1
echo "cli bench: all checks passed"
