#!/bin/sh
# `foundry bench` end to end on the CPU backend: a small run writes a report
# and a trace; with python3 the trace is checked (JSON, host/copy/compute
# tracks, the result's copy), bench_summary.py recomputes the report's
# statistics, and
# a tampered report fails it (also one of a single configuration);
# trace_overlap.py measures no overlap in the 1-buffer executions and
# refuses a truncated or foreign trace. Existing files are never
# overwritten, a budget below the slots fails with a "failed" report, the
# overhead benchmark runs small, and bad flags exit 2.
# usage: test_bench_cli.sh FOUNDRY BENCH_SUMMARY_PY TRACE_OVERLAP_PY [PYTHON3]
set -u
foundry=$1
summary=$2
overlap=$3
python=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../cli_lib.sh"

small="--backend cpu --layers 6 --weight-mib 1 --iterations 5 --warmup 1 --bootstrap-resamples 2000"

expect 0 bench --help
contains "$out" "--bootstrap-resamples"

# shellcheck disable=SC2086
expect 0 bench $small --report "$work/r.json" --trace "$work/t.json" --progress
for word in "median ms" "speedup vs 1" "ceiling" "ideal speedup" "verified"; do
  contains "$out" "$word"
done
# the cpu backend cannot overlap copies with compute: the output says so
# and that a speedup near 1.0 is expected (issue #31)
contains "$out" "a speedup near 1.0 is expected"
contains "$out" "overlap needs a device with its own copy engine"
contains "$err" "bench: [18/18] measured"
[ -s "$work/r.json" ] || fail "no report"
[ -s "$work/t.json" ] || fail "no trace"

# Never overwrite: a second run refuses before any work, files unchanged.
cp "$work/r.json" "$work/before.json"
# shellcheck disable=SC2086
expect 1 bench $small --report "$work/r.json"
cmp -s "$work/r.json" "$work/before.json" || fail "existing report was modified"
# a failure (exit 1) reads as every failure does, not as a usage error
grep -q "^foundry: error: .*refusing to overwrite" "$err" || fail "message: $(cat "$err")"
grep -q "foundry bench: error\|Try 'foundry help" "$err" && fail "exit 1 with the usage prefix: $(cat "$err")"
# shellcheck disable=SC2086
expect 1 bench $small --report "$work/new.json" --trace "$work/t.json"
[ -e "$work/new.json" ] && fail "a refused run wrote a report"

if [ -n "$python" ]; then
  expect_cmd 0 "trace check" "$python" - "$work/t.json" <<'PY'
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
assert any(e["name"] == "copy_output layer.5.out" for e in spans if e["tid"] == 1)
for e in spans:
    assert e["dur"] >= 0 and e["ts"] >= 0, e
execs = [e for e in spans if e["cat"] == "execution"]
assert len(execs) == 18, len(execs)
PY
  expect_cmd 0 "bench_summary on the report" "$python" "$summary" "$work/r.json"
  contains "$out" "values match"

  "$python" - "$work/r.json" "$work/tampered-stat.json" "$work/tampered-exec.json" \
    "$work/tampered-configs.json" "$work/tampered-streams.json" <<'PY'
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
  expect_cmd 1 "bench_summary on a tampered statistic" "$python" "$summary" "$work/tampered-stat.json"
  contains "$err" "median_ci_ms.high"
  expect_cmd 1 "bench_summary on a tampered execution" "$python" "$summary" "$work/tampered-exec.json"
  expect_cmd 1 "bench_summary on a missing configuration" "$python" "$summary" "$work/tampered-configs.json"
  contains "$err" "configurations count"
  expect_cmd 1 "bench_summary on tampered bootstrap streams" "$python" "$summary" "$work/tampered-streams.json"

  expect_cmd 0 "trace_overlap on the trace" "$python" "$overlap" "$work/t.json"
  [ "$(awk '$3 == "measured"' "$out" | wc -l)" -eq 15 ] || fail "trace_overlap rows: $(cat "$out")"
  awk '$2 == 1 && $3 == "measured" && $7 != "0.000" { bad = 1 } END { exit bad }' \
    "$out" || fail "overlap in a 1-buffer execution: $(cat "$out")"
  grep -q "^3 buffers: median .* of compute overlapped" "$out" || fail "no 3-buffer summary"
  head -c 1000 "$work/t.json" >"$work/truncated.json"
  expect_cmd 1 "trace_overlap on a truncated trace" "$python" "$overlap" "$work/truncated.json"
  grep -q "^trace_overlap.py: .*truncated.json: " "$err" || fail "truncated message: $(cat "$err")"
  expect_cmd 1 "trace_overlap on a report" "$python" "$overlap" "$work/r.json"
  contains "$err" "no traceEvents"
  expect_cmd 2 "trace_overlap without arguments" "$python" "$overlap"

  # One configuration: an overlap with nothing to compare against.
  # shellcheck disable=SC2086
  expect 0 bench $small --buffers 2 --report "$work/one.json"
  expect_cmd 0 "bench_summary on one configuration" "$python" "$summary" "$work/one.json"
  "$python" - "$work/one.json" "$work/tampered-one.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["statistics"]["overlap"]["measured_speedup"] = 1.0
json.dump(doc, open(sys.argv[2], "w"))
PY
  expect_cmd 1 "bench_summary on a compared single configuration" "$python" "$summary" "$work/tampered-one.json"
  contains "$err" "overlap.measured_speedup"
fi

# Output paths that are not UTF-8: the report keeps them (each bad byte
# replaced by U+FFFD), and the trace names its report the same way.
tiny="--backend cpu --layers 2 --weight-mib 1 --iterations 2 --warmup 0 --bootstrap-resamples 10 --buffers 1"
report=$(printf '%s/r\377.json' "$work")
trace=$(printf '%s/t\377.json' "$work")
replacement=$(printf '\357\277\275')
# shellcheck disable=SC2086
expect 0 bench $tiny --report "$report" --trace "$trace"
contains "$report" "\"report_path\": \"$work/r$replacement.json\""
contains "$report" "\"trace_path\": \"$work/t$replacement.json\""
contains "$report" "\"path\": \"$work/t$replacement.json\""
contains "$trace" "\"report\": \"$work/r$replacement.json\""
if [ -n "$python" ]; then
  expect_cmd 0 "report with replaced paths" "$python" -c '
import json, sys
r = json.load(open(sys.argv[1], "rb"))
assert r["parameters"]["report_path"].endswith("r\ufffd.json"), r["parameters"]
assert r["trace"]["path"].endswith("t\ufffd.json"), r["trace"]
assert any(a.endswith("r\ufffd.json") for a in r["invocation"]["argv"])
' "$report"
fi

# A full stdout fails the run's console (exit 1); the report is still
# written (the measurements are sound).
# shellcheck disable=SC2086
expect_full bench $tiny --report "$work/full.json"
[ -s "$work/full.json" ] || fail "no report after a full stdout"

# A budget below the slots fails (exit 1) and still writes a failed report.
# shellcheck disable=SC2086
expect 1 bench $small --cpu-memory 2MiB --report "$work/budget.json"
grep -q "^foundry: error: .*exceed" "$err" || fail "budget message: $(cat "$err")"
[ -s "$work/budget.json" ] || fail "no report for the failed run"
if [ -n "$python" ]; then
  expect_cmd 0 "budget report content" "$python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "failed" and r["error"]["kind"] == "budget", r["error"]
assert r["memory"]["host_payload_bytes"] == 0
' "$work/budget.json"
  expect_cmd 1 "bench_summary on a failed report" "$python" "$summary" "$work/budget.json"
fi

# The overhead benchmark: four rows, a report, never over an existing file.
expect 0 bench --overhead --ops 20 --op-bytes 512 --runs 3 --warmup 1 --report "$work/o.json"
contains "$out" "create+run+destroy"
for row in "fake     resident" "fake     streamed" "cpu      resident" "cpu      streamed"; do
  contains "$out" "$row"
done
[ -s "$work/o.json" ] || fail "no overhead report"
expect 1 bench --overhead --ops 20 --report "$work/o.json"
expect 2 bench --overhead --ops 2
expect 2 bench --overhead --op-bytes 12
expect 2 bench --overhead --runs 0
expect 2 bench --overhead --layers 4
contains "$err" "does not apply to --overhead"
expect 2 bench --overhead extra

# Outputs are checked before any work: an unwritable directory (for the
# report or the trace) fails at once (exit 1) and writes nothing; a legal
# name of 250 bytes works.
ro=$(unwritable_dir)
if [ -n "$ro" ]; then
  # shellcheck disable=SC2086
  expect 1 bench $small --report "$ro/r.json"
  contains "$err" "cannot create a temporary file next to '$ro/r.json'"
  # shellcheck disable=SC2086
  expect 1 bench $small --report "$work/ro-ok.json" --trace "$ro/t.json"
  contains "$err" "--trace"
  [ -e "$work/ro-ok.json" ] && fail "a refused run wrote its report"
  [ -s "$out" ] && fail "a refused run printed results: $(cat "$out")"
  expect 1 bench --overhead --ops 20 --op-bytes 512 --runs 3 --warmup 1 \
    --report "$ro/o.json"
  contains "$err" "cannot create a temporary file next to '$ro/o.json'"
  [ -s "$out" ] && fail "a refused overhead run printed results: $(cat "$out")"
else
  echo "cli bench: no unwritable directory here, skipping that check"
fi
name=$(long_name 250)
# shellcheck disable=SC2086
expect 0 bench $tiny --report "$work/$name"
[ -s "$work/$name" ] || fail "no report with a 250-byte name"
# shellcheck disable=SC2086
expect 2 bench $tiny --report "$work/${name}xxxxxx"

# Another process creates the report path while the run goes on: the run
# fails (exit 1), the other file stays, and the message does not claim that
# it records the failure. The file is made once the first round was
# measured (after the up-front checks); a run that ends first skips this.
race=$work/race.json
"$foundry" bench --backend cpu --layers 2 --weight-mib 1 --iterations 3000 \
  --warmup 0 --bootstrap-resamples 10 --buffers 1 --progress \
  --report "$race" >/dev/null 2>"$work/race.err" &
pid=$!
tries=0
while ! grep -q "measured round" "$work/race.err" && [ "$tries" -lt 1200 ]; do
  sleep 0.05
  tries=$((tries + 1))
done
if (set -C && echo theirs >"$race") 2>/dev/null; then
  wait "$pid"
  code=$?
  [ "$code" -eq 1 ] || fail "a run whose report path was taken exited $code"
  grep -q "refusing to overwrite" "$work/race.err" ||
    fail "race message: $(tail -3 "$work/race.err")"
  grep -q "records the failure" "$work/race.err" &&
    fail "the message claims another process's file: $(tail -3 "$work/race.err")"
  [ "$(cat "$race")" = theirs ] || fail "the other process's report changed"
else
  wait "$pid"
  echo "cli bench: the run ended before the report path was taken, skipping"
fi
# A failed run's own report is named as recording the failure.
# shellcheck disable=SC2086
expect 1 bench $small --cpu-memory 2MiB --report "$work/own.json"
contains "$err" "the report $work/own.json records the failure"

# Usage errors: exit 2 before any work.
expect 2 bench --backend cpu --trace "$work/x.json"
expect 2 bench --backend cpu --report "$work/y.json" --trace "$work/y.json"
expect 1 bench --backend cpu --report "$work/no/such/r.json"
expect 2 bench --backend cpu --layers 0
expect 2 bench --backend cpu --layers 3
contains "$err" "must exceed every buffer count"
expect 2 bench --backend cpu --layers 4294967296
expect 2 bench --backend cpu --weight-mib 0
expect 2 bench --backend cpu --iterations 0
expect 2 bench --backend cpu --warmup 4294967295
expect 2 bench --backend cpu --bootstrap-resamples 0
expect 2 bench --backend cpu --bootstrap-resamples 1000001
expect 2 bench --backend cpu --buffers 1,1
expect 2 bench --backend cpu --buffers 0,2
expect 2 bench --backend cpu --buffers 1,,3
expect 2 bench --backend cpu --buffers one
expect 2 bench --backend cpu --buffers "1, 2"
contains "$err" "item 2 (' 2') of '1, 2'"
expect 2 bench --backend cpu --buffers 65
expect 2 bench --backend cpu --buffers 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
expect 2 bench --backend cpu --weight-mib 18446744073709551615
expect 2 bench --backend gpu
expect 2 bench --host-mode pinned
expect 2 bench --backend cpu --host-mode staged
expect 2 bench --backend cuda --cpu-memory 1GiB
expect 2 bench --backend cpu --cpu-memory 12XB
expect 2 bench --backend cpu --cpu-memory 0
# byte counts above 2^63 - 1 (issue #31: 2^64 - 1 was reported as -1)
for size in 9223372036854775808 18446744073709551615 8388608TiB; do
  expect 2 bench --backend cpu --cpu-memory "$size"
  contains "$err" "--cpu-memory: '$size' is above the largest size"
done
expect 2 bench --device -1
expect 2 bench --device 2147483648
expect 2 bench --frobnicate
expect 2 bench --layers
expect 2 bench extra
grep -q "^foundry bench: error: " "$err" || fail "usage message format: $(cat "$err")"

finish "cli bench"
