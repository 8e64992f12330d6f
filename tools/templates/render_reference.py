#!/usr/bin/env python3
"""Reference renderings of every real chat template with Python jinja2 (pelican's ground truth).

Reproduces the environment Hugging Face transformers uses in apply_chat_template (written from
its documented behaviour, not copied):
  * jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
  * extensions: jinja2.ext.loopcontrols and a `{% generation %}...{% endgeneration %}` block
    that simply renders its body (HF's AssistantTracker does the same when not tracking masks)
  * globals: raise_exception(msg) -> raises TemplateError(msg);
             strftime_now(fmt)    -> the PINNED instant below, formatted (see settings.json)
  * filter tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    = json.dumps with those arguments
Context: what transformers' render_jinja_template passes, compiled_template.render(messages=...,
tools=..., documents=..., add_generation_prompt=..., **special_tokens_map):
  * messages; tools = the conversation's "tools" list, or None when it has none (so in the template
    `tools is defined` and `tools is none` are both true); documents = None; add_generation_prompt;
  * the tokenizer's special_tokens_map, which holds only the special tokens that are set: here
    bos_token and eos_token with the fixed test values of tests/data/chat/settings.json (an empty
    value would leave the variable undefined). No chat template here reads unk/sep/pad/cls/
    mask_token or additional_special_tokens, which pelican does not pass.
The settings file is read by the C++ test (tests/unit/chat_template_test.cpp) too. Conversations
are loaded with json.load, so every object keeps its key order from the file, as in Python; the
conversation files are written in natural OpenAI order, and tool_calls_key_order.json nests keys
that are deliberately not alphabetical.

One normalisation mirrors pelican's chat layer (src/jinja/chat_template.cpp): a tool call whose
function.arguments is a JSON *string* holding an object is turned into that object, keys in the
string's order (OpenAI-style requests send a string; HF templates expect a dict; vLLM and
llama.cpp convert the same way). Other strings stay. Conversations whose arguments are already
objects render exactly as transformers renders them.

Time: strftime_now returns 2026-01-15 10:30:00 as a naive datetime, i.e. that wall-clock time
in UTC; pelican pins RenderOptions::now to the same epoch second and the test runs with TZ=UTC.

Output: one JSON file per template, tests/data/chat/expected/<template stem>.json, mapping
"<conversation>/gen" | "<conversation>/nogen" (add_generation_prompt true/false) to
  {"ok": true, "text": "..."}                                     rendered text, or
  {"ok": false, "raised": true,  "error": "<message>"}            raise_exception(message), or
  {"ok": false, "raised": false, "error": "<Type>: <message>"}    any other jinja2/Python error.

Run from the repository root (deterministic, rewrites the expected files):
  python3 tools/templates/render_reference.py
Options: --templates DIR (default ../shared/data/chat-templates), --out DIR, --check (exit 1 if
any expected file would change; writes nothing).
"""

import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAT_DATA = os.path.join(REPO, "tests", "data", "chat")


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """raise_exception() called by the template itself."""


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}body{% endgeneration %} renders body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body", [], [], lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def strftime_now(fmt):
        return now.strftime(fmt)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def normalize_messages(messages):
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if not isinstance(calls, list):
            continue
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
    return messages


def render_one(env, source, conv, gen, settings):
    try:
        tmpl = env.from_string(source)
        ctx = {
            "messages": normalize_messages(json.loads(json.dumps(conv["messages"]))),
            "tools": conv.get("tools"),
            "documents": None,
            "add_generation_prompt": gen,
        }
        for key in ("bos_token", "eos_token"):  # special_tokens_map: only the tokens that are set
            if settings.get(key):
                ctx[key] = settings[key]
        return {"ok": True, "text": tmpl.render(**ctx)}
    except RaisedByTemplate as e:
        return {"ok": False, "raised": True, "error": str(e.message)}
    except Exception as e:  # any jinja2 or Python error is an expected failure
        return {"ok": False, "raised": False, "error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", default=os.path.join(os.path.dirname(REPO), "shared", "data", "chat-templates"))
    ap.add_argument("--out", default=os.path.join(CHAT_DATA, "expected"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    with open(os.path.join(CHAT_DATA, "settings.json"), encoding="utf-8") as f:
        settings = json.load(f)
    now = datetime.datetime.fromtimestamp(settings["now_epoch"], datetime.timezone.utc).replace(tzinfo=None)
    env = make_env(now)

    conv_dir = os.path.join(CHAT_DATA, "conversations")
    convs = {}
    for name in sorted(os.listdir(conv_dir)):
        if name.endswith(".json"):
            with open(os.path.join(conv_dir, name), encoding="utf-8") as f:
                convs[name[: -len(".json")]] = json.load(f)

    templates = sorted(n for n in os.listdir(args.templates) if n.endswith(".jinja"))
    os.makedirs(args.out, exist_ok=True)
    changed, n_ok, n_all = [], 0, 0
    for tname in templates:
        with open(os.path.join(args.templates, tname), encoding="utf-8") as f:
            source = f.read()
        result = {}
        for cname, conv in convs.items():
            for gen in (False, True):
                r = render_one(env, source, conv, gen, settings)
                result[f"{cname}/{'gen' if gen else 'nogen'}"] = r
                n_all += 1
                n_ok += r["ok"]
        text = json.dumps(result, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
        path = os.path.join(args.out, tname[: -len(".jinja")] + ".json")
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if old != text:
            changed.append(path)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    print(f"{len(templates)} templates x {len(convs)} conversations x 2: {n_ok}/{n_all} rendered, "
          f"{n_all - n_ok} errors; {len(changed)} files {'differ' if args.check else 'written'} (jinja2 {jinja2.__version__})")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
