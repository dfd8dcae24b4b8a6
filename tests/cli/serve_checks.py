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
"""
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


CHECKS = {"stop": check_stop}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in CHECKS:
        fail(f"usage: serve_checks.py URL {'|'.join(CHECKS)}")
    CHECKS[sys.argv[2]](Server(sys.argv[1]))
