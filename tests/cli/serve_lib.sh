# Helpers of the shell tests of `foundry serve`, sourced after cli_lib.sh
# by a test that sets `foundry` and `work`:
#   start FLAGS...  starts `foundry serve --port 0 --threads 2 FLAGS` in the
#                   background (stderr in $work/server.log); sets $pid, and
#                   $url (the `listening on` URL: curl -g for an IPv6 one)
#                   once /health answers; fails the test and exits
#                   when it does not start
#   stop            stops it with SIGTERM; it must exit 0
# A trap kills a server still running at exit and removes $work.
# shellcheck shell=sh
# shellcheck disable=SC2154,SC2034 # foundry and work are the test's; url is for it
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# starts the server on a free port (args: the serve flags); sets $pid and
# $url once /health answers
start() {
  : >"$work/server.log"
  "$foundry" serve --port 0 --threads 2 "$@" 2>"$work/server.log" &
  pid=$!
  url=
  i=0
  while [ "$i" -lt 300 ]; do
    listening=$(sed -n 's|.*listening on \(http://[^ ]*\)$|\1|p' \
      "$work/server.log")
    if [ -n "$listening" ] &&
      curl -sfg "$listening/health" >/dev/null 2>&1; then
      url=$listening
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
  done
  fail "the server did not start: $(cat "$work/server.log")"
  exit 1
}

# stops the server with SIGTERM; it must exit 0
stop() {
  kill -TERM "$pid"
  wait "$pid"
  code=$?
  pid=
  [ "$code" -eq 0 ] || fail "serve exited $code after SIGTERM: \
$(cat "$work/server.log")"
}
