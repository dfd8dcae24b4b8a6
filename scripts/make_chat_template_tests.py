#!/usr/bin/env python3
"""Renders the chat templates of tests/data/chat_templates/ for a set of
conversations as Hugging Face transformers' apply_chat_template does (its
own render_jinja_template: jinja2 with trim_blocks and lstrip_blocks, its
tojson, raise_exception and strftime_now) and writes
tests/data/chat_templates/cases.json: one case per template and
conversation, with the text the template renders or the error it raises.
tests/chat/test_chat_template.c renders the same cases with Foundry's
interpreter and compares.

Usage (transformers and jinja2 in the environment, e.g. a virtualenv):
    python3 scripts/make_chat_template_tests.py
"""
import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

DIR = os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                   "chat_templates")

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello!"}
ANSWER = {"role": "assistant", "content": "Hi there. How can I help?"}
SECOND = {"role": "user", "content": "What is 2 + 2?"}
# whitespace, quotes, a special-token spelling and non-ASCII text
ODD = {"role": "user",
       "content": "  two\n lines \"quoted\" 'single' <|im_end|> [INST] "
                  "caf\u00e9 \u4e2d\u6587 \u00a0\n"}
THINK = {"role": "assistant",
         "content": "<think>\nLet me add.\n</think>\n\n4."}

CONVERSATIONS = {
    "system_user": [SYSTEM, USER],
    "user": [USER],
    "two_turns": [SYSTEM, USER, ANSWER, SECOND],
    "answered": [USER, ANSWER],
    "odd_text": [ODD],
    "thinking": [USER, THINK, SECOND],
    "empty": [],
    "not_alternating": [USER, SECOND],
    "system_only": [SYSTEM],
}

# template file -> (bos_token, eos_token, extra variables per case name)
TEMPLATES = {
    "llama3-foundry.jinja": ("<|begin_of_text|>", "<|eot_id|>", {}),
    "llama3-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>", {}),
    "llama-3.1-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>", {}),
    "llama-3.2-instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>",
                                 {"*": {"date_string": "26 Jul 2024"}}),
    "smollm2-instruct.jinja": ("<|im_start|>", "<|im_end|>", {}),
    "qwen2.5-instruct.jinja": (None, "<|im_end|>", {}),
    "qwen3.jinja": (None, "<|im_end|>",
                    {"thinking_off": {"enable_thinking": False}}),
    "mistral-v0.3-instruct.jinja": ("<s>", "</s>", {}),
    "phi-3-mini-instruct.jinja": ("<s>", "<|endoftext|>", {}),
    "phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>", {}),
    "features.jinja": ("<s>", "</s>", {}),
}


def render(template, messages, add_generation_prompt, bos, eos, variables):
    kwargs = dict(variables)
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        text, _ = render_jinja_template(
            conversations=[messages], chat_template=template,
            add_generation_prompt=add_generation_prompt, **kwargs)
        return {"expected": text[0]}
    except Exception as e:  # the template's raise_exception, an undefined
        return {"error": type(e).__name__, "message": str(e)}


def main():
    cases = []
    for name, (bos, eos, extra) in TEMPLATES.items():
        with open(os.path.join(DIR, name), encoding="utf-8") as f:
            template = f.read()
        runs = [(conv, gen, {}) for conv in CONVERSATIONS
                for gen in (True, False)]
        for case, variables in extra.items():
            if case != "*":
                runs.append(("two_turns", True, variables))
        for conv, gen, variables in runs:
            variables = {**extra.get("*", {}), **variables}
            case = {"template": name, "conversation": conv,
                    "messages": CONVERSATIONS[conv],
                    "add_generation_prompt": gen, "bos_token": bos,
                    "eos_token": eos, "variables": variables}
            case.update(render(template, CONVERSATIONS[conv], gen, bos, eos,
                               variables))
            cases.append(case)
    with open(os.path.join(DIR, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, "
          f"{sum('error' in c for c in cases)} of them errors")


if __name__ == "__main__":
    main()
