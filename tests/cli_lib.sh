# Helpers for the shell tests of the foundry binary. A test sets `foundry`
# and `work` (a scratch directory), sources this file, calls the checks and
# ends with `finish NAME`.
#   expect CODE ARGS...   runs "$foundry" ARGS, stdout in $out, stderr in
#                         $err, and counts a failure unless it exits CODE
#   expect_cmd CODE DESCRIPTION COMMAND...
#                         the same for any COMMAND (python, a script), the
#                         failure named by DESCRIPTION
#   expect_full ARGS...   runs "$foundry" ARGS with stdout on /dev/full
#                         (stderr in $err) and counts a failure unless it
#                         exits 1 saying that writing stdout failed; skipped
#                         where /dev/full does not exist
#   contains FILE TEXT    counts a failure unless FILE contains TEXT
#   unwritable_dir        prints a directory where no file can be created:
#                         $work/ro (mode 0555) for a user, /sys for root (who
#                         may write anywhere else), nothing when neither
#                         refuses
#   long_name N           prints a file name of N bytes
#   fail MESSAGE          counts a failure
out=$work/stdout
err=$work/stderr
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

expect() {
  code=$1
  shift
  "$foundry" "$@" >"$out" 2>"$err"
  actual=$?
  if [ "$actual" -ne "$code" ]; then
    fail "foundry $* exited $actual, expected $code"
    cat "$out" "$err" >&2
  fi
}

expect_cmd() {
  code=$1
  what=$2
  shift 2
  "$@" >"$out" 2>"$err"
  actual=$?
  if [ "$actual" -ne "$code" ]; then
    fail "$what exited $actual, expected $code"
    cat "$out" "$err" >&2
  fi
}

expect_full() {
  [ -w /dev/full ] || return 0
  "$foundry" "$@" >/dev/full 2>"$err"
  actual=$?
  if [ "$actual" -ne 1 ]; then
    fail "foundry $* >/dev/full exited $actual, expected 1"
    cat "$err" >&2
  elif ! grep -q "^foundry: error: writing to standard output failed" "$err"; then
    fail "foundry $* >/dev/full did not report the failed write:"
    cat "$err" >&2
  fi
}

unwritable_dir() {
  mkdir -p "$work/ro" && chmod 555 "$work/ro"
  if ! (: >"$work/ro/probe") 2>/dev/null; then
    echo "$work/ro"
  elif rm -f "$work/ro/probe" && ! (: >/sys/foundry-probe) 2>/dev/null &&
    [ -d /sys ]; then
    echo /sys
  fi
}

long_name() {
  printf "%${1}s" "" | tr ' ' n
}

contains() {
  if ! grep -qF -- "$2" "$1"; then
    fail "expected '$2' in:"
    cat "$1" >&2
  fi
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
  fi
  echo "all $1 checks passed"
}
