"""Checks of `foundry serve` that need a client program (python3's
standard library only), run by tests/cli/test_serve.sh against a server it
started: python3 serve_checks.py URL CHECK. Exits 0 when every assertion
holds, 1 with a message otherwise.

stop: stop strings on a model with a tokenizer. A greedy answer is made
  first, its streamed chunks give one text per token; a stop string made of
  the end of one token's text, the whole next one and the start of the one
  after (so it spans 3 tokens) ends the answer where it first occurs: the
  text before it, never the stop string, finish_reason "stop", the ids a
  prefix of the full answer's; streamed the same, no chunk holding the stop
  string or a broken character; an array of stops where only one occurs;
  a stop that never occurs changes nothing.
metrics: GET /metrics is Prometheus text whose counters move: a completion
  of 3 ids adds 1 to requests{outcome="length"}, its prompt and 3 ids to
  the token counters, one time to first token and its steps to the batch
  histogram; a bad request adds 1 to outcome="invalid"; gauges and the
  decode rate are there.
disconnect: a client that goes away frees its sequence at the next step:
  a non-streamed request of 4000 ids whose client closes after 0.3 s, and
  a streamed one closed after its first chunk, each add 1 to
  outcome="cancelled" within seconds, /health shows nothing running, far
  fewer than 4000 ids were generated, and the next request completes.
"""
import socket
import time
import http.client
import json
import sys
import urllib.parse


def fail(message):
    print(f"serve_checks: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Server:
    def __init__(self, url):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port

    def connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=120)

    def post(self, path, body):
        """The status and the parsed JSON answer of one request."""
        conn = self.connect()
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, json.loads(data)

    def stream(self, path, body):
        """The chunks of a streamed answer (parsed), checking [DONE] last."""
        conn = self.connect()
        conn.request("POST", path, json.dumps(dict(body, stream=True)),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        check(resp.status == 200, f"stream: status {resp.status}")
        events = [line[6:] for line in resp.read().decode().split("\n")
                  if line.startswith("data: ")]
        conn.close()
        check(events and events[-1] == "[DONE]", f"no [DONE] last: {events}")
        return [json.loads(e) for e in events[:-1]]


def text_of(choice):
    if "text" in choice:
        return choice["text"]
    part = choice.get("delta") or choice.get("message") or {}
    return part.get("content", "")


def check_stop(server):
    path = "/v1/completions"
    base = {"prompt": "Hello", "max_tokens": 24, "temperature": 0}
    status, full = server.post(path, base)
    check(status == 200, f"greedy answer: {status} {full}")
    whole = full["choices"][0]["text"]
    ids = full["choices"][0]["token_ids"]
    pieces = [text_of(c["choices"][0]) for c in server.stream(path, base)]
    check("".join(pieces) == whole,
          f"streamed text {pieces!r} differs from {whole!r}")
    # a stop string over 3 tokens: the end of one, a whole one, the start
    # of the next
    spans = [i for i in range(len(pieces) - 2)
             if pieces[i] and pieces[i + 1] and pieces[i + 2]]
    check(spans, f"no 3 tokens with text in a row: {pieces!r}")
    i = spans[len(spans) // 2]
    stop = pieces[i][-1] + pieces[i + 1] + pieces[i + 2][0]
    expected = whole[:whole.index(stop)]

    for stops in (stop, [stop], ["\x01never", stop]):
        status, got = server.post(path, dict(base, stop=stops))
        check(status == 200, f"stop {stops!r}: {status} {got}")
        choice = got["choices"][0]
        check(choice["text"] == expected,
              f"stop {stops!r}: text {choice['text']!r}, "
              f"expected {expected!r} (whole {whole!r})")
        check(choice["finish_reason"] == "stop",
              f"stop {stops!r}: finish_reason {choice['finish_reason']}")
        got_ids = choice["token_ids"]
        check(0 < len(got_ids) < len(ids) and got_ids == ids[:len(got_ids)],
              f"stop {stops!r}: ids {got_ids} not a prefix of {ids}")
        check(got["usage"]["completion_tokens"] == len(got_ids),
              f"stop {stops!r}: usage {got['usage']}")

    chunks = server.stream(path, dict(base, stop=stop))
    streamed = [text_of(c["choices"][0]) for c in chunks]
    check("".join(streamed) == expected,
          f"streamed with stop: {streamed!r}, expected {expected!r}")
    check(all(stop not in p and "\ufffd" not in p for p in streamed),
          f"a chunk holds the stop string or a broken character: "
          f"{streamed!r}")
    check(chunks[-1]["choices"][0]["finish_reason"] == "stop",
          f"streamed finish: {chunks[-1]}")

    status, got = server.post(path, dict(base, stop=["\x01never"]))
    check(status == 200 and got["choices"][0]["text"] == whole and
          got["choices"][0]["finish_reason"] == "length",
          f"a stop that never occurs: {got}")

    # chat: the same rule through the chat endpoint
    chat = {"messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 24, "temperature": 0}
    status, full = server.post("/v1/chat/completions", chat)
    check(status == 200, f"chat: {status} {full}")
    answer = full["choices"][0]["message"]["content"]
    # three characters after the first, none a replaced invalid byte (a
    # stop string matches the text's bytes)
    starts = [i for i in range(1, len(answer) - 3)
              if "\ufffd" not in answer[i:i + 3]]
    check(starts, f"no stop string to take from the chat answer {answer!r}")
    stop = answer[starts[0]:starts[0] + 3]
    status, got = server.post("/v1/chat/completions", dict(chat, stop=stop))
    message = got["choices"][0]["message"]["content"]
    check(status == 200 and message == answer[:answer.index(stop)] and
          got["choices"][0]["finish_reason"] == "stop",
          f"chat stop {stop!r}: {got} (whole {answer!r})")


def metrics(server):
    """GET /metrics as {name{labels}: value}, checking its format."""
    conn = server.connect()
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    check(resp.status == 200, f"/metrics: status {resp.status}")
    check(resp.getheader("Content-Type", "").startswith("text/plain"),
          f"/metrics content type {resp.getheader('Content-Type')}")
    values = {}
    for line in body.splitlines():
        if line.startswith("#") or not line:
            continue
        name, value = line.rsplit(" ", 1)
        values[name] = float(value)
    return values


def health(server):
    conn = server.connect()
    conn.request("GET", "/health")
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def outcome(name):
    return f'foundry_requests_total{{outcome="{name}"}}'


def check_metrics(server):
    before = metrics(server)
    for name in ("foundry_queue_depth", "foundry_running_sequences",
                 "foundry_decode_tokens_per_second",
                 'foundry_step_batch_size_bucket{le="+Inf"}',
                 'foundry_time_to_first_token_seconds_bucket{le="+Inf"}'):
        check(name in before, f"/metrics lacks {name}")
    status, got = server.post("/v1/completions",
                              {"prompt": [7, 8, 9, 10], "max_tokens": 3,
                               "temperature": 0})
    check(status == 200, f"completion: {status} {got}")
    status, _ = server.post("/v1/completions", {"prompt": "x", "top_k": -1})
    check(status == 400, f"bad request: {status}")
    after = metrics(server)

    def delta(name):
        return after[name] - before[name]

    check(delta(outcome("length")) == 1, "length did not count the request")
    check(delta(outcome("invalid")) == 1, "invalid did not count the 400")
    check(delta("foundry_prompt_tokens_total") == 4, "prompt tokens")
    check(delta("foundry_generated_tokens_total") == 3, "generated tokens")
    check(delta("foundry_time_to_first_token_seconds_count") == 1, "ttft")
    check(delta("foundry_time_to_first_token_seconds_sum") > 0, "ttft sum")
    check(delta("foundry_step_batch_size_count") >= 3, "steps")
    check(after["foundry_step_batch_size_sum"] >=
          after["foundry_step_batch_size_count"], "batch sizes")
    check(after["foundry_decode_tokens_per_second"] > 0, "decode rate")
    check(after['foundry_step_batch_size_bucket{le="+Inf"}'] ==
          after["foundry_step_batch_size_count"], "histogram count")


def wait_cancelled(server, before, what):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = metrics(server)
        if (now[outcome("cancelled")] > before[outcome("cancelled")] and
                health(server)["running"] == 0):
            return now
        time.sleep(0.05)
    fail(f"{what}: not cancelled within 10 s: {metrics(server)}")


def raw_request(server, body):
    sock = socket.create_connection((server.host, server.port))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() +
                 b"\r\n\r\n" + data)
    return sock


def check_disconnect(server):
    long = {"prompt": [5, 6], "max_tokens": 4000, "temperature": 0}
    before = metrics(server)
    sock = raw_request(server, long)
    time.sleep(0.3)
    sock.close()
    after = wait_cancelled(server, before, "a non-streamed request")
    generated = (after["foundry_generated_tokens_total"] -
                 before["foundry_generated_tokens_total"])
    check(generated < 4000, f"{generated} ids generated after the client left")

    before = after
    sock = raw_request(server, dict(long, stream=True))
    received = b""
    while b"data: {" not in received:
        chunk = sock.recv(4096)
        check(chunk, "the stream ended before its first chunk")
        received += chunk
    sock.close()
    after = wait_cancelled(server, before, "a streamed request")
    generated = (after["foundry_generated_tokens_total"] -
                 before["foundry_generated_tokens_total"])
    check(generated < 4000, f"{generated} ids generated after the client left")

    status, got = server.post("/v1/completions",
                              {"prompt": [5], "max_tokens": 2})
    check(status == 200 and got["usage"]["completion_tokens"] == 2,
          f"the request after the disconnects: {status} {got}")


CHECKS = {"stop": check_stop, "metrics": check_metrics,
          "disconnect": check_disconnect}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in CHECKS:
        fail(f"usage: serve_checks.py URL {'|'.join(CHECKS)}")
    CHECKS[sys.argv[2]](Server(sys.argv[1]))
