# Helpers of the shell tests of `foundry serve`, sourced after cli_lib.sh
# by a test that sets `foundry` and `work`:
#   start FLAGS...  starts `foundry serve --port 0 --threads 2 FLAGS` in the
#                   background (stderr in $work/server.log); sets $pid, and
#                   $url (the `listening on` URL: curl -g for an IPv6 one)
#                   once /health answers; fails the test and exits
#                   when it does not start
#   stop            stops it with SIGTERM; it must exit 0
#   ids_of FILE     the ids of one JSON response or of every SSE chunk in
#                   FILE, comma-separated
#   concurrent_same LABEL PROMPT...
#                   posts a greedy completion of each PROMPT ("ids:max
#                   tokens") at once and checks that answer N's ids are
#                   $work/expected.N
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

# the ids of one JSON response or of every SSE chunk, comma-separated
ids_of() {
  grep -o '"token_ids":\[[^]]*\]' "$1" | sed 's/.*\[//; s/\]//' |
    grep -v '^$' | paste -sd, -
}

# greedy completions of every prompt ("ids:max_tokens") at once; answer i
# must have the ids of $work/expected.i (failures named by $1)
concurrent_same() {
  label=$1
  shift
  i=0
  clients=
  for prompt in "$@"; do
    curl -s -o "$work/got.$i" -H 'Content-Type: application/json' \
      --data-binary "{\"prompt\":[${prompt%:*}],\"max_tokens\":${prompt#*:},\
\"temperature\":0}" "$url/v1/completions" &
    clients="$clients $!"
    i=$((i + 1))
  done
  for client in $clients; do
    wait "$client"
  done
  i=0
  for prompt in "$@"; do
    [ "$(ids_of "$work/got.$i")" = "$(cat "$work/expected.$i")" ] ||
      fail "$label, concurrent prompt $i: $(cat "$work/got.$i"), \
generate: $(cat "$work/expected.$i")"
    i=$((i + 1))
  done
}
