#!/usr/bin/env python3
"""llama-server-shim.py: runs `muser serve` where llama.cpp's server test
suite (the server tests of llama.cpp's source: tools, server, tests) starts `llama-server`, so
the suite can judge muser's compatibility. Point the suite at it:

    LLAMA_SERVER_BIN_PATH=/path/to/tools/llama-server-shim.py \\
    MUSER_SHIM_MODEL=models/muser-default.gguf MUSER_BIN=./muser \\
    python3 -m pytest -q unit/...        (in that tests folder of llama.cpp's server)

Flag mapping: --port, --host, --threads, --parallel (at most 4), --alias,
--pooling, --cors-origins (-> --cors), --seed, --temp, --n-predict (request
defaults), --batch-size (prompt tokens per step), --tags, --slot-save-path, --no-slots and --no-ui carry over
(--alias a,b,c as three), and so do --context-shift / --no-context-shift; --cache-prompt is always on (llama-server's cache_prompt default);
without --metrics muser gets --no-metrics, without --cors-origins --cors '*'
(llama-server's defaults: no /metrics, every origin);
--any-model is always on (llama-server ignores the model name when it serves
one model); --embedding without --pooling adds --pooling mean (the suite's embedding
models carry a pooling type; the substitute model has none); --ctx-size is llama.cpp's
total context, split over the slots as llama.cpp does (muser's --ctx is per
slot) and capped at the model's training context (muser refuses more), or
whole per slot with --kv-unified (llama.cpp's one pool any sequence may fill);
--model-draft (-md) is replaced as the model is, by the served model's DFlash
drafter (--spec dflash), an ngram --spec-type without one is --spec ngram, and
--spec-draft-n-max / -min are --draft-max / --draft-min; --api-key K becomes a mode-0600 key file for --api-key-file. The
model flags (--model, --hf-repo, --hf-file, --model-url) are ignored: muser
serves MUSER_SHIM_MODEL (a Muse Glimmer GGUF), so tests that expect a
particular model's text fail by design. Everything else (--jinja, --reranking,
--chat-template, --spec-synth-rates, ...) has no muser equivalent and is
dropped (listed on stderr)."""
import os
import re
import stat
import subprocess
import sys
import tempfile

TAKES_VALUE = {
    "--port", "--host", "--temp", "--seed", "--model", "-m", "--model-url", "--model-draft", "-md", "--hf-repo",
    "--hf-file", "--models-dir", "--models-max", "--models-preset", "--cors-origins", "--batch-size", "-b",
    "--ubatch-size", "-ub", "--threads", "-t", "--n-gpu-layers", "-ngl", "--pooling", "--alias", "--tags",
    "--ctx-size", "-c", "--parallel", "-np", "-ctk", "-ctv", "-fa", "--n-predict", "-n", "--slot-save-path",
    "--grp-attn-n", "--grp-attn-w", "--lora", "--spec-type", "--api-key", "--spec-draft-n-max",
    "--spec-draft-n-min", "--spec-synth-len", "--spec-synth-rates", "--reasoning-format", "--reasoning",
    "--chat-template", "--chat-template-file", "--mmproj-url", "--media-path", "--sleep-idle-seconds",
    "--cache-ram", "--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json", "--draft",
    "--draft-max", "--draft-min", "--keep", "--n-probs",
}


def main():
    args = sys.argv[1:]
    opts, dropped = {}, []
    i = 0
    while i < len(args):
        a = args[i]
        if a in TAKES_VALUE and i + 1 < len(args):
            opts[a] = args[i + 1]
            i += 2
        else:
            dropped.append(a)
            i += 1
    muser = os.environ.get("MUSER_BIN", "muser")
    model = os.environ.get("MUSER_SHIM_MODEL")
    if not model:
        sys.exit("llama-server-shim: set MUSER_SHIM_MODEL to a Muse Glimmer GGUF")
    # llama-server answers any model name when it serves one model: --any-model
    out = [muser, "serve", "-m", model, "--port", opts.get("--port", "8080"), "--host", opts.get("--host", "127.0.0.1"),
           "--any-model"]
    par = min(int(opts.get("--parallel", opts.get("-np", "1"))), 4)
    out += ["--parallel", str(par)]
    ctx = opts.get("--ctx-size", opts.get("-c"))
    # --kv-unified: one KV pool of --ctx-size that any one sequence may fill;
    # muser's slots have their own KV, so each gets the whole --ctx-size
    # (what a single sequence can use is the same; the slots no longer compete)
    unified = "--kv-unified" in dropped or "-kvu" in dropped
    if ctx and int(ctx) > 0:
        # llama.cpp runs a context past the model's training length; muser
        # refuses one: cap it at the model's (`muser info`)
        train = 1 << 30
        try:
            info = subprocess.run([muser, "info", "-m", model], capture_output=True, text=True).stdout
            train = int(re.search(r"^context\s+(\d+)", info, re.M).group(1))
        except (OSError, AttributeError, ValueError):
            pass
        out += ["--ctx", str(max(16, min(int(ctx) // (1 if unified else par), train)))]
    th = opts.get("--threads", opts.get("-t"))
    if th:
        out += ["--threads", th]
    for a in opts.get("--alias", "").split(","):
        if a:
            out += ["--alias", a]
    if "--pooling" in opts:
        out += ["--pooling", opts["--pooling"]]
    elif "--embedding" in dropped or "--embeddings" in dropped:
        # the embedding models the suite loads carry a pooling type; the
        # substitute Muse Glimmer model does not: give it mean pooling
        out += ["--pooling", "mean"]
    if "--cors-origins" in opts:
        out += ["--cors", opts["--cors-origins"]]
    elif "--tools" in opts:
        out += ["--cors", "localhost"]  # llama-server's default with built-in tools
    else:
        out += ["--cors", "*"]  # llama-server's default: every origin (muser's is none)
    # request defaults the server sets: --seed, --temp, --n-predict (-n)
    for flag, name in (("--seed", "--seed"), ("--temp", "--temp"), ("--n-predict", "--n-predict"), ("-n", "--n-predict")):
        if flag in opts:
            out += [name, opts[flag]]
    for flag in ("--batch-size", "-b"):  # prompt tokens per step (all slots)
        if flag in opts:
            out += ["--batch-size", opts[flag]]
    # speculative decoding: the suite's draft model is replaced as the model
    # is, by the served model's own DFlash drafter (muser --spec dflash finds
    # models/muser-default.dflash.gguf); --spec-type without a draft model
    # and of an ngram type (llama.cpp's ngram-*) is muser's ngram; the draft
    # bounds carry over
    spec = opts.get("--spec-type")
    if "--model-draft" in opts or "-md" in opts:
        out += ["--spec", "dflash"]
    elif spec and spec.startswith("ngram"):
        out += ["--spec", "ngram"]
    for flag, name in (("--spec-draft-n-max", "--draft-max"), ("--draft-max", "--draft-max"),
                       ("--spec-draft-n-min", "--draft-min"), ("--draft-min", "--draft-min")):
        if flag in opts:
            out += [name, opts[flag]]
    if "--tags" in opts:
        out += ["--tags", opts["--tags"]]
    out.append("--cache-prompt")  # llama-server's requests reuse the slot's prefix unless they say cache_prompt: false
    if "--slot-save-path" in opts:  # /slots/{id}?action=save|restore files (muser writes KV packs there)
        out += ["--slot-save-path", opts["--slot-save-path"]]
    for flag in ("--no-slots", "--no-ui", "--context-shift", "--no-context-shift"):
        if flag in dropped:
            out.append(flag)
    if "--metrics" not in dropped:
        out.append("--no-metrics")  # llama-server serves /metrics only with --metrics
    if "--api-key" in opts:
        fd, path = tempfile.mkstemp(prefix="muser-shim-key-")
        os.write(fd, opts["--api-key"].encode())
        os.close(fd)
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        out += ["--api-key-file", path]
    ignored = [k for k in opts if k not in ("--port", "--host", "--parallel", "-np", "--ctx-size", "-c", "--threads",
                                            "-t", "--alias", "--pooling", "--cors-origins", "--api-key", "--seed",
                                            "--temp", "--n-predict", "-n", "--tags", "--batch-size", "-b",
                                            "--slot-save-path", "--model-draft", "-md", "--spec-type",
                                            "--spec-draft-n-max", "--spec-draft-n-min", "--draft-max",
                                            "--draft-min")]
    dropped = [d for d in dropped if d not in ("--no-slots", "--no-ui", "--slots", "--metrics", "--kv-unified", "-kvu",
                                               "--context-shift", "--no-context-shift")]
    sys.stderr.write("llama-server-shim: %s (dropped: %s)\n" % (" ".join(out), " ".join(ignored + dropped)))
    sys.stderr.flush()
    os.execvp(out[0], out)


if __name__ == "__main__":
    main()
