#!/usr/bin/env python3
"""Renders every (template, context) pair of tests/jinja with Python's Jinja2
in the environment Hugging Face transformers uses for chat templates, and
writes the expected outputs that tests/unit/test_jinja.c compares byte for byte.

Environment (transformers chat_template_utils._compile_jinja_template):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[jinja2.ext.loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"](fmt) = now.strftime(fmt); here now is fixed at
  2024-07-26 00:00:00 so the outputs are reproducible (the C test passes the
  same instant, in UTC).

Needs: python3-jinja2 (Debian), tested with Jinja2 3.1.6.
Usage: python3 tests/jinja/make-expected.py      (from anywhere)
Writes tests/jinja/expected/<template>.<context>.out (the rendering) or .err
("<ExceptionType>: <message>") and errors.<name>.err for tests/jinja/errors/.
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2024, 7, 26, 0, 0, 0)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def render(env, path, ctx):
    with open(path, encoding="utf-8", newline="") as f:
        src = f.read()
    try:
        return "out", env.from_string(src).render(**ctx)
    except Exception as e:  # noqa: BLE001 - every failure is an expected error case
        return "err", f"{type(e).__name__}: {e}"


def write(name, kind, text):
    with open(os.path.join(HERE, "expected", f"{name}.{kind}"), "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main():
    env = environment()
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    for old in os.listdir(os.path.join(HERE, "expected")):
        os.remove(os.path.join(HERE, "expected", old))
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    n = {"out": 0, "err": 0}
    for tmpl, ctxs in cases.items():
        for c in ctxs:
            with open(os.path.join(HERE, "contexts", c + ".json"), encoding="utf-8") as f:
                ctx = json.load(f)
            kind, text = render(env, os.path.join(HERE, "templates", tmpl + ".jinja"), ctx)
            write(f"{tmpl}.{c}", kind, text)
            n[kind] += 1
    with open(os.path.join(HERE, "contexts", "basic.json"), encoding="utf-8") as f:
        basic = json.load(f)
    for name in sorted(os.listdir(os.path.join(HERE, "errors"))):
        if not name.endswith(".jinja"):
            continue
        kind, text = render(env, os.path.join(HERE, "errors", name), basic)
        if kind != "err":
            sys.exit(f"errors/{name} rendered without an error")
        write("errors." + name[:-6], "err", text)
        n["err"] += 1
    print(f"wrote {n['out']} outputs and {n['err']} expected errors (jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()
