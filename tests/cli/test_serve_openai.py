"""`foundry serve` through the official openai Python client (PyPI), on a
micro checkpoint of the Llama 3 vocabulary with its tokenizer (CPU
backend, loopback, --api-key): the model list; greedy completions of text
prompts equal to `foundry generate` (ids and text) alone and 16 at once
with different prompts and lengths on 4 slots; chat equal to `foundry
generate --chat`; streamed completions and chat equal to the whole
answers, ending with their finish reason; a stop string; a wrong key
(AuthenticationError) and a bad field (BadRequestError naming it);
SIGTERM exits 0.

usage: test_serve_openai.py FOUNDRY_BINARY
The client comes from build-venv/ (scripts/setup-python.sh) when the
python running this lacks it; without either the test is skipped (77)
saying so. It is skipped too under the sanitizer presets (ASAN_OPTIONS or
FOUNDRY_TSAN set), where the server runs many times slower and cli_serve
and cli_serve_load check it: these checks are of the client's view.
"""
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
VENV = os.path.join(ROOT, "build-venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python3")

if os.environ.get("ASAN_OPTIONS") or os.environ.get("FOUNDRY_TSAN"):
    print("a sanitizer build: the openai client checks run in the plain "
          "build: skipped")
    sys.exit(77)

try:
    import openai
except ImportError:
    if os.path.exists(VENV_PYTHON) and os.path.realpath(
            sys.prefix) != os.path.realpath(VENV):
        os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)
    print("the openai package is not installed (scripts/setup-python.sh "
          "installs it into build-venv/, from PyPI): skipped")
    sys.exit(77)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}", file=sys.stderr)


# 16 prompts of different lengths, each with its max_tokens
PROMPTS = [(" ".join(["word"] * (i % 5) + [f"number {i}", "The sky is"]),
            1 + (i * 5) % 12) for i in range(16)]
KEY = "test-key"


def generate(foundry, model, work):
    """The ids and text of `foundry generate` for PROMPTS (one call with
    --prompts-file) and of `generate --chat`."""
    path = os.path.join(work, "prompts.jsonl")
    with open(path, "w") as f:
        for prompt, n in PROMPTS:
            f.write(json.dumps({"prompt": prompt, "max_tokens": n}) + "\n")
    out = subprocess.run([foundry, "generate", "--model", model,
                          "--prompts-file", path, "--threads", "2"],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    expected = {line["index"]: line for line in lines}
    chat = subprocess.run([foundry, "generate", "--model", model, "--chat",
                           "--system", "Be", "--prompt", "Hello",
                           "--max-tokens", "6", "--threads", "2", "--json"],
                          check=True, capture_output=True, text=True).stdout
    return expected, json.loads(chat)["ids"]


def start(foundry, model, work):
    log = open(os.path.join(work, "server.log"), "w+")
    server = subprocess.Popen(
        [foundry, "serve", "--model", model, "--port", "0", "--threads", "2",
         "--max-sequences", "4", "--api-key", KEY], stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"listening on (http://[0-9.]+:[0-9]+)", log.read())
        if found:
            return server, found.group(1)
        if server.poll() is not None:
            break
        time.sleep(0.1)
    log.seek(0)
    sys.exit(f"the server did not start: {log.read()}")


def ids_of(choice):
    return choice.model_extra.get("token_ids")


def main():
    foundry = sys.argv[1]
    work = tempfile.mkdtemp()
    model = os.path.join(work, "chat")
    subprocess.run([foundry, "make-model", "--preset", "micro-llama3-vocab",
                    "--seed", "1", "--out", model], check=True,
                   capture_output=True)
    expected, chat_ids = generate(foundry, model, work)
    server, url = start(foundry, model, work)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY,
                               max_retries=0, timeout=120)
        run_checks(client, url, expected, chat_ids)
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    check(code == 0, f"serve exited {code} after SIGTERM")
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("all openai client checks passed")


def complete(client, i):
    prompt, n = PROMPTS[i]
    return client.completions.create(model="chat", prompt=prompt,
                                     max_tokens=n, temperature=0)


def run_checks(client, url, expected, chat_ids):
    models = [m.id for m in client.models.list()]
    check(models == ["chat"], f"models: {models}")

    # alone, then 16 at once
    got = complete(client, 0)
    choice = got.choices[0]
    check(ids_of(choice) == expected[0]["ids"],
          f"completion ids {ids_of(choice)}, generate {expected[0]['ids']}")
    check(choice.text == expected[0]["text"],
          f"completion text {choice.text!r}, generate "
          f"{expected[0]['text']!r}")
    check(choice.finish_reason == "length", f"finish {choice.finish_reason}")
    check(got.usage.completion_tokens == PROMPTS[0][1], f"usage {got.usage}")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: complete(client, i), range(16)))
    for i, got in enumerate(answers):
        choice = got.choices[0]
        check(ids_of(choice) == expected[i]["ids"] and
              choice.text == expected[i]["text"],
              f"concurrent prompt {i}: {ids_of(choice)} {choice.text!r}, "
              f"generate {expected[i]['ids']} {expected[i]['text']!r}")

    # chat, whole and streamed
    messages = [{"role": "system", "content": "Be"},
                {"role": "user", "content": "Hello"}]
    got = client.chat.completions.create(model="chat", messages=messages,
                                         max_tokens=6, temperature=0)
    answer = got.choices[0].message
    check(ids_of(got.choices[0]) == chat_ids,
          f"chat ids {ids_of(got.choices[0])}, generate --chat {chat_ids}")
    check(answer.role == "assistant", f"chat role {answer.role}")
    chunks = list(client.chat.completions.create(
        model="chat", messages=messages, max_tokens=6, temperature=0,
        stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    check(text == answer.content,
          f"streamed chat {text!r}, whole {answer.content!r}")
    check(chunks[0].choices[0].delta.role == "assistant",
          f"first chat chunk {chunks[0]}")
    check(chunks[-1].choices[0].finish_reason == got.choices[0].finish_reason,
          f"streamed chat finish {chunks[-1]}")

    # a streamed completion
    prompt, n = PROMPTS[5]
    chunks = list(client.completions.create(model="chat", prompt=prompt,
                                            max_tokens=n, temperature=0,
                                            stream=True))
    text = "".join(c.choices[0].text for c in chunks)
    check(text == expected[5]["text"],
          f"streamed completion {text!r}, generate {expected[5]['text']!r}")
    check(len(chunks) == n and chunks[-1].choices[0].finish_reason == "length",
          f"{len(chunks)} chunks for {n} ids, last {chunks[-1]}")

    # a stop string taken from the middle of a longer answer
    whole = complete(client, 15).choices[0].text
    if len(whole) >= 4:
        stop = whole[len(whole) // 2:len(whole) // 2 + 2]
        prompt, n = PROMPTS[15]
        got = client.completions.create(model="chat", prompt=prompt,
                                        max_tokens=n, temperature=0,
                                        stop=[stop])
        check(got.choices[0].text == whole[:whole.index(stop)] and
              got.choices[0].finish_reason == "stop",
              f"stop {stop!r}: {got.choices[0]} (whole {whole!r})")
    else:
        check(False, f"answer too short for a stop string: {whole!r}")

    # errors the client raises
    wrong = openai.OpenAI(base_url=url + "/v1", api_key="wrong",
                          max_retries=0)
    try:
        wrong.models.list()
        check(False, "a wrong key was accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"wrong key: {e}")
    try:
        client.completions.create(model="chat", prompt="x", max_tokens=1,
                                  extra_body={"top_k": -1})
        check(False, "top_k -1 was accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "top_k", f"bad top_k: {e.body}")
    try:
        client.completions.create(model="other", prompt="x", max_tokens=1)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError as e:
        check(e.body.get("code") == "model_not_found", f"model: {e.body}")


if __name__ == "__main__":
    main()
