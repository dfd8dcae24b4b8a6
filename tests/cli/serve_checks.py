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
bad: a corpus of bad requests (BAD below), each sent as raw bytes with
  its headers, answered with its status and an OpenAI error object of its
  type and param; harmless unknown fields are ignored; the server stays
  healthy and serves a request after them. Needs a server with the
  micro model (no tokenizer, context 4096).
draws SEED0 OUT RUNS: RUNS seeded sampled requests (4 ids, top-k 2) one
  at a time, each valid; the counts of the sequences met go to the file
  OUT.
compare FILE_A FILE_B same|differ (URL -): two files of draws pass (same)
  or fail (differ) a two-sample chi-square test at 0.999, as
  tests/llama_infer/test_speculative.c compares speculative sampling with
  the model's own.
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


JSON = {"Content-Type": "application/json"}
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
# (what, path, headers, body, status, error type, param)
BAD = [
    ("truncated JSON", COMPLETIONS, JSON, b'{"prompt":[5,6', 400,
     "invalid_request_error", None),
    ("an empty body", COMPLETIONS, JSON, b"", 400, "invalid_request_error",
     None),
    ("a NUL byte in a string", COMPLETIONS, JSON, b'{"prompt":"a\x00b"}',
     400, "invalid_request_error", None),
    ("an escaped NUL", COMPLETIONS, JSON, b'{"prompt":"a\\u0000b"}', 400,
     "invalid_request_error", None),
    ("a NUL byte after the object", COMPLETIONS, JSON,
     b'{"prompt":[5]}\x00', 400, "invalid_request_error", None),
    ("an integer beyond 64 bits", COMPLETIONS, JSON,
     b'{"prompt":[5],"max_tokens":123456789012345678901234567890}', 400,
     "invalid_request_error", None),
    ("a real beyond double", COMPLETIONS, JSON,
     b'{"prompt":[5],"temperature":1e999}', 400, "invalid_request_error",
     None),
    ("max_tokens 2^63 - 1", COMPLETIONS, JSON,
     b'{"prompt":[5],"max_tokens":9223372036854775807}', 400,
     "invalid_request_error", "max_tokens"),
    ("a negative max_tokens", COMPLETIONS, JSON,
     b'{"prompt":[5],"max_tokens":-5}', 400, "invalid_request_error",
     "max_tokens"),
    ("max_tokens 0", COMPLETIONS, JSON, b'{"prompt":[5],"max_tokens":0}',
     400, "invalid_request_error", "max_tokens"),
    ("max_tokens a string", COMPLETIONS, JSON,
     b'{"prompt":[5],"max_tokens":"7"}', 400, "invalid_request_error",
     "max_tokens"),
    ("text/plain", COMPLETIONS, {"Content-Type": "text/plain"},
     b'{"prompt":[5]}', 415, "invalid_request_error", None),
    ("a form", COMPLETIONS,
     {"Content-Type": "application/x-www-form-urlencoded"}, b"prompt=5",
     415, "invalid_request_error", None),
    ("multipart", CHAT, {"Content-Type": "multipart/form-data; boundary=x"},
     b"--x--", 415, "invalid_request_error", None),
    ("application/jsonx", COMPLETIONS, {"Content-Type": "application/jsonx"},
     b'{"prompt":[5]}', 415, "invalid_request_error", None),
    ("a body over 1 MiB", COMPLETIONS, JSON,
     b'{"prompt":"' + b"a" * (1 << 20) + b'"}', 413,
     "invalid_request_error", None),
    ("invalid UTF-8 in a message", CHAT, JSON,
     b'{"messages":[{"role":"user","content":"caf\xc3"}]}', 400,
     "invalid_request_error", None),
    ("a surrogate in a message", CHAT, JSON,
     b'{"messages":[{"role":"user","content":"\xed\xa0\x80"}]}', 400,
     "invalid_request_error", None),
    ("invalid UTF-8 in a prompt", COMPLETIONS, JSON,
     b'{"prompt":"\xff"}', 400, "invalid_request_error", None),
    ("JSON 2048 arrays deep", COMPLETIONS, JSON,
     b'{"prompt":' + b"[" * 5000 + b"]" * 5000 + b"}", 400,
     "invalid_request_error", None),
    ("an array body", COMPLETIONS, JSON, b"[1,2]", 400,
     "invalid_request_error", None),
    ("a string body", CHAT, JSON, b'"hi"', 400, "invalid_request_error",
     None),
    ("prompt a number", COMPLETIONS, JSON, b'{"prompt":5}', 400,
     "invalid_request_error", "prompt"),
    ("an id outside the vocabulary", COMPLETIONS, JSON,
     b'{"prompt":[5,99999]}', 400, "invalid_request_error", "prompt"),
    ("a negative id", COMPLETIONS, JSON, b'{"prompt":[-1]}', 400,
     "invalid_request_error", "prompt"),
    ("messages a string", CHAT, JSON, b'{"messages":"Hello"}', 400,
     "invalid_request_error", "messages"),
    ("an assistant turn", CHAT, JSON,
     b'{"messages":[{"role":"user","content":"a"},'
     b'{"role":"assistant","content":"b"}]}', 400, "invalid_request_error",
     "messages"),
    ("stream a string", COMPLETIONS, JSON, b'{"prompt":[5],"stream":"yes"}',
     400, "invalid_request_error", "stream"),
    ("temperature a string", COMPLETIONS, JSON,
     b'{"prompt":[5],"temperature":"hot"}', 400, "invalid_request_error",
     "temperature"),
    ("a negative temperature", COMPLETIONS, JSON,
     b'{"prompt":[5],"temperature":-1}', 400, "invalid_request_error",
     "temperature"),
    ("top_p above 1", COMPLETIONS, JSON, b'{"prompt":[5],"top_p":1.5}', 400,
     "invalid_request_error", "top_p"),
    ("top_k a real", COMPLETIONS, JSON, b'{"prompt":[5],"top_k":1.5}', 400,
     "invalid_request_error", "top_k"),
    ("a negative seed", COMPLETIONS, JSON, b'{"prompt":[5],"seed":-1}', 400,
     "invalid_request_error", "seed"),
    ("stop a number", COMPLETIONS, JSON, b'{"prompt":[5],"stop":5}', 400,
     "invalid_request_error", "stop"),
    ("five stop strings", COMPLETIONS, JSON,
     b'{"prompt":[5],"stop":["a","b","c","d","e"]}', 400,
     "invalid_request_error", "stop"),
    ("a stop string without a tokenizer", COMPLETIONS, JSON,
     b'{"prompt":[5],"stop":"a"}', 400, "invalid_request_error", "stop"),
    ("model a number", COMPLETIONS, JSON, b'{"model":5,"prompt":[5]}', 400,
     "invalid_request_error", "model"),
    ("n 2", COMPLETIONS, JSON, b'{"prompt":[5],"n":2}', 400,
     "invalid_request_error", "n"),
    ("logprobs", COMPLETIONS, JSON, b'{"prompt":[5],"logprobs":3}', 400,
     "invalid_request_error", "logprobs"),
    ("tools", CHAT, JSON,
     b'{"messages":[{"role":"user","content":"a"}],"tools":[{}]}', 400,
     "invalid_request_error", "tools"),
    ("best_of 2", COMPLETIONS, JSON, b'{"prompt":[5],"best_of":2}', 400,
     "invalid_request_error", "best_of"),
    ("an unknown model", COMPLETIONS, JSON, b'{"model":"x","prompt":[5]}',
     404, "invalid_request_error", "model"),
]


def raw(server, method, path, headers, body):
    """Status and body bytes of a request sent as given."""
    conn = server.connect()
    conn.request(method, path, body, headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def check_bad(server):
    for what, path, headers, body, status, kind, param in BAD:
        got, data = raw(server, "POST", path, headers, body)
        try:
            error = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            fail(f"{what}: not an OpenAI error object: {data[:300]!r}")
        check(got == status and error["type"] == kind and
              error["param"] == param and error["message"],
              f"{what}: {got} {error}, expected {status} {kind} {param}")
    got, data = raw(server, "GET", COMPLETIONS, {}, None)
    check(got == 405, f"GET on a POST endpoint: {got} {data!r}")
    # prompt + max_tokens beyond the context: both numbers and the context
    got, data = raw(server, "POST", COMPLETIONS, JSON,
                    b'{"prompt":[5,6,7],"max_tokens":4095}')
    message = json.loads(data)["error"]["message"]
    check(got == 400 and all(n in message for n in ("3", "4095", "4096")),
          f"context overflow: {got} {message}")
    # harmless unknown fields are ignored
    got, data = raw(server, "POST", COMPLETIONS, JSON,
                    b'{"prompt":[5],"max_tokens":1,"user":"u","foo":{"b":[1]},'
                    b'"stream_options":{"include_usage":true},"n":1,'
                    b'"logit_bias":{},"echo":false,"presence_penalty":0}')
    check(got == 200, f"unknown fields: {got} {data!r}")
    check(health(server)["status"] == "ok", "unhealthy after bad requests")


# The sampled requests of draws: 4 ids, top-k 2 (at most 16 sequences).
DRAWS_PROMPT = [5, 17, 250, 3, 99, 41, 7]


def check_draws(server, seed0, out, runs):
    """runs seeded requests (seeds from seed0), one at a time: every answer
    has 4 ids of the vocabulary; the count of each sequence of ids goes to
    the JSON file out."""
    counts = {}
    for run in range(int(runs)):
        status, got = server.post("/v1/completions", {
            "prompt": DRAWS_PROMPT, "max_tokens": 4, "temperature": 1.0,
            "top_k": 2, "seed": int(seed0) + run})
        check(status == 200, f"draw {run}: {status} {got}")
        ids = got["choices"][0]["token_ids"]
        check(len(ids) == 4 and all(0 <= i < 512 for i in ids),
              f"draw {run}: ids {ids}")
        key = ",".join(map(str, ids))
        counts[key] = counts.get(key, 0) + 1
    with open(out, "w", encoding="utf-8") as f:
        json.dump(counts, f)


def chi_square(a, b):
    """The two-sample chi-square statistic of equal-sized samples (count
    dicts) over the cells either reaches, and its degrees of freedom."""
    x2, df = 0.0, -1
    for key in set(a) | set(b):
        n = a.get(key, 0) + b.get(key, 0)
        d = a.get(key, 0) - b.get(key, 0)
        x2 += d * d / n
        df += 1
    return x2, df


def critical_999(df):
    """The chi-square quantile of probability 0.999 (Wilson-Hilferty)."""
    v = 2.0 / (9.0 * df)
    return df * (1.0 - v + 3.09 * v ** 0.5) ** 3


def check_compare(_server, file_a, file_b, expect):
    """The draws of two servers (files of check_draws) pass a two-sample
    chi-square test at 0.999 (expect "same") or fail it ("differ")."""
    with open(file_a, encoding="utf-8") as f:
        a = json.load(f)
    with open(file_b, encoding="utf-8") as f:
        b = json.load(f)
    x2, df = chi_square(a, b)
    limit = critical_999(df)
    check(df >= 7, f"only {df + 1} sequences met: {a} {b}")
    if expect == "same":
        check(x2 < limit, f"chi-square {x2:.1f} >= {limit:.1f} (df {df}): "
              f"{a} against {b}")
    else:
        check(x2 > limit, f"chi-square {x2:.1f} <= {limit:.1f} (df {df}): "
              f"the test cannot tell {a} from {b}")
    print(f"chi-square {x2:.1f}, df {df}, limit {limit:.1f}")


CHECKS = {"bad": check_bad, "stop": check_stop, "metrics": check_metrics,
          "disconnect": check_disconnect, "draws": check_draws,
          "compare": check_compare}
ARGS = {"draws": 3, "compare": 3}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[2] not in CHECKS or \
            len(sys.argv) != 3 + ARGS.get(sys.argv[2], 0):
        fail(f"usage: serve_checks.py URL {'|'.join(CHECKS)} "
             "(draws SEED0 OUT RUNS, compare FILE_A FILE_B same|differ; URL - "
             "for compare)")
    server = None if sys.argv[1] == "-" else Server(sys.argv[1])
    CHECKS[sys.argv[2]](server, *sys.argv[3:])
