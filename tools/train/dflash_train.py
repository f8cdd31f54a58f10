#!/usr/bin/env python3
"""Trains a DFlash drafter for a Muse Glimmer target (muser's default model
by default) on the target's own continuations, and writes it as a Hugging
Face-layout checkpoint and as the `dflash` GGUF muser and llama.cpp load
(docs/speculative.md "Training").

The DFlash recipe: the target's hidden states at a few layers (the inputs
of dflash.target_layers), concatenated, condition a small block-diffusion
drafter; a block is [the last token, mask x (B-1)] and the drafter learns
to fill the B-1 masks with the target's next tokens in one pass.

Data (all made here, from the target GGUF and a corpus):
1. the corpus (.jsonl or .jsonl.xz of {"text": ...} lines as
   tools/train/make_corpus.py writes them, or files/directories of text)
   tokenized with `muser tokenize --json-in` (the target's own tokenizer;
   parts of 256 documents in parallel; a document it refuses is skipped
   with a warning), every document after a BOS, concatenated;
2. --windows prompts of --prompt tokens: BOS, then --prompt - 1 tokens from
   a random offset of that stream (muser run's layout: BOS at position 0);
3. the target's continuation of every prompt by --gen tokens (PyTorch, KV
   cache, from the GGUF: dflash_model.Target, muser's graph): greedy, and a
   share --sample-frac sampled at --temp (contexts like those of sampled
   requests); a share --copy-frac of the training prompts (default none)
   repeat their first tokens at their end, so their continuations copy;
   with --prompt-min N every other chunk of --gen-chunk windows has a
   shorter prompt (one length a chunk, log-uniform in [N, --prompt)),
   continued to the same window length (short requests' positions);
4. one forward over each whole window: the features (the target layers'
   inputs; kept in bfloat16 on cuda, where the drafter runs under bf16
   autocast anyway, else float32) and the labels (label[p] = the target's greedy token at
   p, i.e. the argmax of the logits at p - 1; on greedy rows the
   continuation itself).
Held-out windows are made the same way from --heldout-corpus (default: the
last --heldout share of the stream, never used for training).

Training: each step --batch windows, --blocks anchors each, anchors in the
generated part (a >= --prompt: drafting starts after the prompt); a block
at a sees the context rows of positions < a and the whole block; the loss
is the cross-entropy of its B-1 mask rows against label[a+1 .. a+B-1],
row k weighted exp(-(k-1)/--decay) (the DFlash paper's decay). AdamW,
warmup then cosine over the run, whose length is --steps or, with
--time-budget / --deadline, the time left (the schedule follows the
elapsed share of it). The target's embedding and output matrix are frozen
(the drafter file shares them).

Checkpoints: every --ckpt-every seconds (and at the end) a held-out
evaluation; when it is the best so far, hf/, drafter.gguf and summary.json
are rewritten in --out (each through a temporary name and a rename), so a
run that is killed still leaves its best drafter.

Evaluation (policy-free): on the held-out windows, every --eval-stride-th
anchor of the generated part: the accepted length of a greedy block (how
many leading drafts equal the target's tokens), its mean, its
distribution, and each row's acceptance rate after an accepted prefix.

--check-muser N: before training, muser's own greedy continuation
(`muser run --prompt-ids`) of N held-out prompts against the PyTorch
target's: agreeing tokens, and the largest difference of the top token's
probability (muser run --json --top 1); logged and in summary.json.

Outputs in --out: hf/ (config.json, model.safetensors), drafter.gguf (via
tools/convert/dflash_to_gguf.py), log.jsonl (one line per logged step and
evaluation), summary.json, heldout-prompts.json (the held-out prompts' ids,
for tools/train/dflash_accept.py); with --mirror DIR also the best drafter
(named --mirror-name) and summary.json in DIR, updated with them.

usage: dflash_train.py --corpus PATH... --out DIR [--target T.gguf] [--muser ./muser]
       [--windows 4096] [--prompt 128] [--gen 256] [--block 16] [--layers 2] [--target-layers 1,4,7]
       [--copy-frac 0] [--prompt-min 0] [--batch 32] [--blocks 16] [--lr 6e-4] [--steps N | --time-budget S | --deadline UNIX_TIME]
       [--ckpt-every 60] [--device cuda|cpu] [--init D.gguf [--seed N]] [--smoke]
--smoke: tiny sizes and a 20-second budget, for a CPU check that the pipeline runs.
--init D.gguf: start from that drafter's weights (dequantized from its GGUF) instead of random ones,
with its shape; the first held-out evaluation is then D's, so a run writes a drafter only when it
beats D. With another --seed each run makes other training windows: several device calls of ten
minutes can train one drafter on more data than one call makes.
"""
import argparse, json, lzma, math, os, random, shutil, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "convert"))
from dflash_model import Drafter, Target, drafter_from_gguf, new_config  # noqa: E402
import dflash_to_gguf  # noqa: E402

EXTS = (".txt", ".md", ".py", ".c", ".h", ".sh", ".rst", ".json", ".1", ".8", "")
T0 = time.time()


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


# ---------------------------------------------------------------- corpus


def read_docs(paths, limit_bytes):
    """Texts of the corpus paths: JSONL (optionally .xz) lines with "text",
    or the files of directories, in order, until limit_bytes (0: all)."""
    out, n = [], 0
    for p in paths:
        files = []
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                files += [os.path.join(root, x) for x in sorted(names) if os.path.splitext(x)[1] in EXTS]
        else:
            files = [p]
        for f in files:
            if f.endswith((".jsonl", ".jsonl.xz")):
                op = lzma.open if f.endswith(".xz") else open
                with op(f, "rt", encoding="utf-8") as fh:
                    for line in fh:
                        if line.strip():
                            out.append(json.loads(line)["text"])
                            n += len(out[-1])
                            if limit_bytes and n >= limit_bytes:
                                return out
            else:
                with open(f, encoding="utf-8", errors="replace") as fh:
                    out.append(fh.read())
                n += len(out[-1])
            if limit_bytes and n >= limit_bytes:
                return out
    return out


def tokenize_part(muser, target, docs):
    """The ids of docs (one `muser tokenize --json-in` process); a document
    muser refuses gives None (the part is retried one document at a time)."""
    with tempfile.TemporaryDirectory() as td:
        fn = os.path.join(td, "docs.json")
        with open(fn, "w", encoding="utf-8") as f:
            json.dump(docs, f)
        r = subprocess.run([muser, "tokenize", "-m", target, "--json-in", fn], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    if r.returncode == 0 and len(lines) == len(docs):
        return [json.loads(x) for x in lines]
    if len(docs) == 1:
        log("warning: muser tokenize refused a document (%s): skipped" % r.stderr.strip()[:200])
        return [None]
    return [x for d in docs for x in tokenize_part(muser, target, [d])]


def muser_ok(muser):
    return bool(muser) and os.access(muser, os.X_OK)


def tokenize_hf(docs, bos):
    """Fallback when muser cannot run: the tokenizer the bundled model was
    trained with (tools/train/tokenizer/tokenizer.json, Hugging Face
    tokenizers), each document after a BOS."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("dflash_train: muser cannot run and the tokenizers package is missing: no tokenizer")
    tk = Tokenizer.from_file(os.path.join(HERE, "tokenizer", "tokenizer.json"))
    ids = []
    for e in tk.encode_batch(docs, add_special_tokens=False):
        ids.extend(([bos] if bos is not None else []) + list(e.ids))
    return ids


def tokenize(muser, target, docs, bos, jobs=8):
    """The docs through `muser tokenize --json-in` (parts of 256 documents,
    `jobs` processes at once), each after a BOS, concatenated; without a
    runnable muser, tokenize_hf."""
    if not muser_ok(muser):
        log("warning: no runnable muser (%r): tokenizing with tools/train/tokenizer/tokenizer.json" % muser)
        return tokenize_hf(docs, bos)
    parts = [docs[i:i + 256] for i in range(0, len(docs), 256)]
    ids = []
    with ThreadPoolExecutor(jobs) as ex:
        for res in ex.map(lambda p: tokenize_part(muser, target, p), parts):
            for toks in res:
                if toks is not None:
                    ids.extend(([bos] if bos is not None else []) + toks)
    return ids


def make_windows(target, stream, n, P, G, sample_frac, temp, device, chunk, layers, seed, until=0,
                 feat_dtype=torch.float32, copy_frac=0.0, prompt_min=0):
    """n windows: prompts [BOS] + P-1 tokens of the stream at random offsets,
    continued by the target (greedy; every row i with i % k == 0 sampled at
    temp, k = round(1 / sample_frac)), then features and labels from one
    forward each (in parts of at most 256 windows). With copy_frac, every
    row i with i % c == c // 2 (c = round(1 / copy_frac)) is a prompt that
    repeats itself: h = 5/8 of its P-1 tokens from the stream, then the
    first P-1-h of them again, so the target's continuation mostly copies
    (as when a user's prompt restates code or text to be continued).
    With prompt_min, every other chunk's prompts are shorter: [BOS] + p - 1
    tokens, p drawn once for the chunk, log-uniform in [prompt_min, P), and
    continued by P + G - p tokens (so short requests' positions and contexts
    are trained too; the windows keep their length).
    Stops after the chunk that passes the unix time until (0: no limit), so
    fewer windows may come back. -> (toks [m, P+G], feats [m, P+G, n_feat]
    (feat_dtype; the labels come from the float32 logits), labels [m, P+G],
    sampled [m] bool, plen [m]: each window's prompt length), on device."""
    g = torch.Generator().manual_seed(seed)
    hi = len(stream) - P
    if hi <= 0:
        sys.exit("dflash_train: the corpus has %d tokens, fewer than a prompt of %d" % (len(stream), P))
    st = torch.tensor(stream, dtype=torch.long)
    offs = torch.randint(0, hi, (n,), generator=g)
    ce = int(round(1 / copy_frac)) if copy_frac > 0 else 0

    def prompt_at(i, o, p):
        if ce and i % ce == ce // 2:
            h = (p - 1) * 5 // 8
            a = st[o:o + h]
            return torch.cat((a, a[:p - 1 - h]))
        return st[o:o + p - 1]

    def chunk_prompt_len(c):
        if not prompt_min or prompt_min >= P or c % 2 == 0:
            return P
        l0, l1 = math.log(prompt_min), math.log(P)
        return min(P - 1, int(math.exp(l0 + (l1 - l0) * float(torch.rand((), generator=g)))))
    every = int(round(1 / sample_frac)) if sample_frac > 0 else 0
    temps = torch.tensor([temp if every and i % every == 0 else 0.0 for i in range(n)])
    gg = torch.Generator(device=device).manual_seed(seed + 1)
    L = P + G
    toks = torch.empty(n, L, dtype=torch.long, device=device)
    labels = torch.empty(n, L, dtype=torch.long, device=device)
    plen = torch.full((n,), P, dtype=torch.long)
    feats = None  # allocated at the first forward, once its width is known (no copy of the whole at the end)
    m = 0
    for i in range(0, n, chunk):
        pc = chunk_prompt_len(i // chunk)
        k = min(chunk, n - i)
        p = torch.stack([prompt_at(j, o, pc) for j, o in enumerate(offs[i:i + k].tolist(), i)])
        p = torch.cat((torch.full((k, 1), target.bos, dtype=torch.long), p), 1).to(device)
        plen[i:i + k] = pc
        t = temps[i:i + chunk].to(device)
        w = target.generate(p, L - pc, t if every else None, gg)
        for j in range(0, w.shape[0], 256):
            f, lg = target.forward(w[j:j + 256], layers)
            if feats is None:
                feats = torch.empty(n, L, f.shape[-1], dtype=feat_dtype, device=device)
            k = f.shape[0]
            toks[m:m + k], feats[m:m + k] = w[j:j + 256], f
            labels[m:m + k] = torch.cat((w[j:j + 256, :1], lg[:, :-1].argmax(-1)), dim=1)
            m += k
            del lg, f
        if until and time.time() > until:
            break
    return toks[:m], feats[:m], labels[:m], (temps > 0)[:m], plen[:m].to(device)


def check_muser(muser, target_path, target, toks, labels, P, n, n_gen, log_rec):
    """muser's greedy continuation of n held-out prompts against the
    PyTorch target's (the generated windows' greedy rows)."""
    res = []
    for i in range(min(n, toks.shape[0])):
        ids = toks[i, :P].tolist()
        r = subprocess.run([muser, "run", "-m", target_path, "--prompt-ids", ",".join(map(str, ids)), "-n", str(n_gen),
                            "--temp", "0", "--ignore-eos", "--json", "--top", "1", "--threads", "4"],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit("dflash_train: muser run failed: %s" % r.stderr.strip())
        got = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{\"id\"")]
        mid = [x["id"] for x in got]
        want = toks[i, P:P + n_gen].tolist()
        agree = next((k for k in range(min(len(mid), len(want))) if mid[k] != want[k]), min(len(mid), len(want)))
        # the top probability of muser's first token against the target's on the same prefix
        _, lg = target.forward(toks[i:i + 1, :P + agree], [])
        pr = torch.softmax(lg[0].float(), -1)
        dp = 0.0
        for k in range(agree):
            tid, tp = got[k]["top"][0]
            dp = max(dp, abs(float(pr[P - 1 + k, tid]) - tp))
        res.append(dict(prompt=i, agree=agree, compared=min(len(mid), len(want)), max_top_prob_diff=round(dp, 5)))
        log("check-muser prompt %d: %d of %d greedy tokens agree; top-probability difference <= %.5f" % (
            i, agree, res[-1]["compared"], dp))
    log_rec(check_muser=res)
    return res


# ---------------------------------------------------------------- training


def anchors_for(S, nb, lo, L, B, g, device):
    """S x nb anchors, row s's uniform in [lo[s], L - B] (lo: prompt lengths)"""
    lo = lo.cpu()
    u = torch.rand((S, nb), generator=g)
    return (lo[:, None] + (u * (L - B + 1 - lo)[:, None]).long()).to(device)


def block_tokens(d, toks, anchors, B):
    S, nb = anchors.shape
    bt = torch.full((S, nb, B), d.cfg["mask_token_id"], dtype=torch.long, device=toks.device)
    bt[:, :, 0] = toks.gather(1, anchors)
    return bt.view(S, nb * B)


def block_labels(labels, anchors, B):
    S, nb = anchors.shape
    idx = anchors[:, :, None] + torch.arange(1, B, device=anchors.device)
    return labels.gather(1, idx.view(S, -1)).view(S, nb, B - 1)


def drafter_logits(d, feats, toks, anchors, B):
    S, nb = anchors.shape
    if not (AMP and feats.is_cuda):
        feats = feats.float()  # stored in bf16 for the autocast path
    h = d.forward_windows(feats, anchors, block_tokens(d, toks, anchors, B)).view(S, nb, B, -1)[:, :, 1:]
    return h @ d.output.T.to(h.dtype)


@torch.no_grad()
def evaluate(d, toks, feats, labels, P, B, stride, chunk):
    """Accepted lengths of greedy blocks at every stride-th anchor of the
    generated part of each held-out window."""
    d.eval()
    L = toks.shape[1]
    a = torch.arange(P, L - B + 1, stride, device=toks.device)
    hist = torch.zeros(B, dtype=torch.long)
    row_ok = torch.zeros(B - 1, dtype=torch.long)
    row_n = torch.zeros(B - 1, dtype=torch.long)
    for i in range(0, toks.shape[0], chunk):
        S = min(chunk, toks.shape[0] - i)
        an = a[None, :].expand(S, -1).contiguous()
        with autocast(toks.device):
            lg = drafter_logits(d, feats[i:i + S], toks[i:i + S], an, B)
        ok = (lg.argmax(-1) == block_labels(labels[i:i + S], an, B)).long().view(-1, B - 1)
        pre = ok.cumprod(-1)
        lead = pre.sum(-1)
        hist += torch.bincount(lead, minlength=B).cpu()
        before = torch.cat((torch.ones_like(ok[:, :1]), pre[:, :-1]), 1)
        row_n += before.sum(0).cpu()
        row_ok += (before * ok).sum(0).cpu()
    d.train()
    n = int(hist.sum())
    mean = float((hist * torch.arange(B)).sum()) / max(n, 1)
    return dict(blocks=n, mean_accepted=round(mean, 4), tokens_per_step=round(mean + 1, 4), accepted_hist=hist.tolist(),
                row_accept_rate=[round(int(o) / max(int(c), 1), 4) for o, c in zip(row_ok, row_n)])


AMP = True  # bf16 autocast of the drafter on cuda (--amp 0: float32)


def autocast(device):
    if device.type == "cuda" and AMP:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def write_atomic(path, fn):
    tmp = path + ".tmp"
    fn(tmp)
    os.replace(tmp, path)


def save_result(d, a, out, summary, state):
    """hf/, drafter.gguf, summary.json in out, from state (a state dict)."""
    cur = {k: v.detach().clone() for k, v in d.state_dict().items()}
    d.load_state_dict(state)
    tmp_hf = os.path.join(out, "hf.tmp")
    d.save_hf(tmp_hf)
    d.load_state_dict(cur)
    write_atomic(os.path.join(out, "drafter.gguf"), lambda p: dflash_to_gguf.convert(
        tmp_hf, p, a.target, {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8}[a.outtype],
        name="muser-dflash-%s" % os.path.splitext(os.path.basename(a.target))[0], log=lambda *x: None))
    hf = os.path.join(out, "hf")
    if os.path.isdir(hf):
        for f in os.listdir(hf):
            os.remove(os.path.join(hf, f))
        os.rmdir(hf)
    os.replace(tmp_hf, hf)
    write_atomic(os.path.join(out, "summary.json"), lambda p: json.dump(summary, open(p, "w"), indent=1))
    if a.mirror:
        write_atomic(os.path.join(a.mirror, a.mirror_name), lambda p: shutil.copyfile(os.path.join(out, "drafter.gguf"), p))
        write_atomic(os.path.join(a.mirror, "summary.json"), lambda p: json.dump(summary, open(p, "w"), indent=1))


def main():
    ap = argparse.ArgumentParser(description="train a DFlash drafter for a Muse Glimmer target")
    ap.add_argument("--target", default=os.path.join(HERE, "..", "..", "models", "muser-default.gguf"))
    ap.add_argument("--corpus", nargs="+", required=True)
    ap.add_argument("--heldout-corpus", nargs="*", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--muser", default=os.path.join(HERE, "..", "..", "muser"))
    ap.add_argument("--max-bytes", type=int, default=0, help="read at most this much text (0: all)")
    ap.add_argument("--windows", type=int, default=4096)
    ap.add_argument("--heldout-windows", type=int, default=64)
    ap.add_argument("--heldout", type=float, default=0.03, help="share of the stream held out without --heldout-corpus")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--sample-frac", type=float, default=0.25)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--copy-frac", type=float, default=0.0,
                    help="share of training prompts that repeat themselves (make_windows; held-out: none)")
    ap.add_argument("--prompt-min", type=int, default=0,
                    help="every other chunk of windows has a shorter prompt, at least this long (0: all --prompt)")
    ap.add_argument("--gen-chunk", type=int, default=1024, help="windows generated at once")
    ap.add_argument("--data-budget", type=float, default=0,
                    help="stop making training windows after the chunk that passes this many seconds (0: all)")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=0, help="drafter FFN width (0: the target's)")
    ap.add_argument("--target-layers", default="", help="llama.cpp ids: inputs of these target layers (default 3 spread)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=16, help="anchors per window and step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--decay", type=float, default=7.0)
    ap.add_argument("--steps", type=int, default=0, help="a fixed step count (else the time budget decides)")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training")
    ap.add_argument("--deadline", type=float, default=0, help="unix time by which everything is written")
    ap.add_argument("--ckpt-every", type=float, default=60)
    ap.add_argument("--eval-stride", type=int, default=5)
    ap.add_argument("--check-muser", type=int, default=4)
    ap.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--mirror", help="also copy the best drafter (as --mirror-name) and summary.json here")
    ap.add_argument("--mirror-name", default="drafter.gguf")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", help="a dflash GGUF to continue training (its shape replaces --layers, --block, "
                                   "--target-layers, --ff; a new --seed gives new windows)")
    ap.add_argument("--amp", type=int, default=1, help="bf16 autocast of the drafter on cuda (0: float32)")
    ap.add_argument("--feat-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="how the features are kept (auto: bfloat16 on cuda with --amp 1, else float32)")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    global AMP
    AMP = bool(a.amp)
    if a.smoke:
        a.windows, a.heldout_windows, a.prompt, a.gen, a.block = 8, 2, 24, 24, min(a.block, 8)
        a.batch, a.blocks, a.max_bytes, a.gen_chunk, a.check_muser = 2, 2, a.max_bytes or 200000, 4, min(a.check_muser, 1)
        a.time_budget, a.ckpt_every = a.time_budget or 20, min(a.ckpt_every, 8)
    if not (a.steps or a.time_budget or a.deadline):
        a.steps = 3000
    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the target in float32 like muser
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "log.jsonl"), "w")

    def rec(**kw):
        kw["t"] = round(time.time() - T0, 1)
        logf.write(json.dumps(kw) + "\n")
        logf.flush()

    target = Target(a.target, device)
    tl = [int(x) for x in a.target_layers.split(",")] if a.target_layers else None
    init = None
    if a.init:
        # continue training a drafter: its shape decides (--layers, --block, --target-layers, --ff ignored)
        init, tl = drafter_from_gguf(a.init, target)
        ic = init.cfg
        a.layers, a.block, a.ff = ic["num_hidden_layers"], ic["block_size"], ic["intermediate_size"]
    cfg = new_config(target, n_layer=a.layers, block_size=a.block, target_layers=tl, n_ff=a.ff or None)
    if init is not None:
        for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "mask_token_id",
                  "target_layer_ids"):
            if init.cfg[k] != cfg[k]:
                sys.exit("dflash_train: --init %s: %s is %s, the target's drafter needs %s" % (
                    a.init, k, init.cfg[k], cfg[k]))
    layers = [i + 1 for i in cfg["target_layer_ids"]]
    P, G, B, L = a.prompt, a.gen, a.block, a.prompt + a.gen
    log("target %s: %d layers, width %d, vocab %d; drafter: %d layers, block %d, target layers %s, mask %d; device %s" % (
        a.target, target.n_layer, target.n_embd, target.n_vocab, a.layers, B, layers, cfg["mask_token_id"], device))
    rec(args=vars(a), drafter=cfg)

    docs = read_docs(a.corpus, a.max_bytes)
    stream = tokenize(a.muser, a.target, docs, target.bos, jobs=max(1, min(16, (os.cpu_count() or 2) - 1)))
    if a.heldout_corpus:
        hdocs = read_docs(a.heldout_corpus, a.max_bytes)
        hstream = tokenize(a.muser, a.target, hdocs, target.bos, jobs=max(1, min(16, (os.cpu_count() or 2) - 1)))
    else:
        cut = int(len(stream) * (1 - a.heldout))
        stream, hstream = stream[:cut], stream[cut:]
    log("corpus: %d documents, %d training tokens, %d held-out tokens" % (len(docs), len(stream), len(hstream)))
    fdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(
        a.feat_dtype, torch.bfloat16 if device.type == "cuda" and a.amp else torch.float32)
    htoks, hfeats, hlabels, _, _ = make_windows(target, hstream, a.heldout_windows, P, G, 0.0, 0.0, device,
                                                a.gen_chunk, layers, 8, feat_dtype=fdt)  # whatever --seed
    until = 0
    if a.data_budget:
        until = time.time() + a.data_budget
    toks, feats, labels, samp, plen = make_windows(target, stream, a.windows, P, G, a.sample_frac, a.temp, device,
                                                   a.gen_chunk, layers, a.seed, until, feat_dtype=fdt,
                                                   copy_frac=a.copy_frac, prompt_min=a.prompt_min)
    agree = float((toks[~samp.to(device), P:] == labels[~samp.to(device), P:]).float().mean()) if (~samp).any() else 1.0
    log("windows: %d training (%d sampled, %d with prompts shorter than %d), %d held-out, %d + %d tokens each; "
        "greedy rows' tokens = labels: %.4f" % (toks.shape[0], int(samp.sum()), int((plen < P).sum()), P,
                                                htoks.shape[0], P, G, agree))
    rec(windows=int(toks.shape[0]), sampled=int(samp.sum()), heldout=int(htoks.shape[0]), label_agree=agree)
    with open(os.path.join(a.out, "heldout-prompts.json"), "w") as f:
        json.dump([htoks[i, :P].tolist() for i in range(htoks.shape[0])], f)
    chk = check_muser(a.muser, a.target, target, htoks, hlabels, P, a.check_muser, min(G, 64), rec) \
        if a.check_muser and muser_ok(a.muser) else []

    d = Drafter(cfg, target.tok_embd, target.output)
    if init is not None:
        d.load_state_dict(init.state_dict())
        log("drafter weights from %s (its GGUF types, dequantized)" % a.init)
        del init
    d = d.to(device)
    n_params = sum(p.numel() for p in d.parameters())
    log("drafter parameters: %d (without the shared embedding and output)" % n_params)
    opt = torch.optim.AdamW(list(d.parameters()), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    wdecay = torch.tensor([math.exp(-(k - 1) / a.decay) for k in range(1, B)], device=device)
    t_start = time.time()
    end = None
    if a.time_budget:
        end = t_start + a.time_budget
    if a.deadline:
        # leave room for the last evaluation and the GGUF
        end = min(end or a.deadline, a.deadline - 15)
    if end is not None and end <= t_start:
        log("warning: no time left for training (deadline); writing the untrained drafter")

    def progress(step):
        if a.steps:
            return step / a.steps
        return (time.time() - t_start) / max(end - t_start, 1e-9)

    def lr_at(fr):
        warm = 0.05
        return a.lr * (min(1.0, fr / warm) if fr < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, fr))))

    g = torch.Generator().manual_seed(a.seed + 3)
    ev_chunk = 8 if device.type == "cuda" else 1
    best = None
    step, last_ck, ck_step, ema = 0, time.time(), -1, None

    def checkpoint(final=False):
        nonlocal best
        ev = evaluate(d, htoks, hfeats, hlabels, P, B, a.eval_stride, ev_chunk)
        rec(step=step, eval=ev)
        log("step %d: held-out mean accepted %.3f (tokens per step %.3f) rows %s" % (
            step, ev["mean_accepted"], ev["tokens_per_step"], ev["row_accept_rate"][:6]))
        if best is None or ev["mean_accepted"] > best[1]["mean_accepted"]:
            best = (step, ev, {k: v.detach().clone() for k, v in d.state_dict().items()})
            summary = dict(target=os.path.basename(a.target), best_step=step, steps=step, heldout=ev, block=B,
                           layers=a.layers, target_layers=layers, params=n_params,
                           seconds=round(time.time() - T0, 1), train_seconds=round(time.time() - t_start, 1),
                           windows=dict(train=int(toks.shape[0]), sampled=int(samp.sum()),
                                        heldout=int(htoks.shape[0]), prompt=P, gen=G,
                                        short_prompts=int((plen < P).sum()), prompt_min=a.prompt_min,
                                        copy_frac=a.copy_frac),
                           lr=a.lr, batch=a.batch, blocks=a.blocks, decay=a.decay, check_muser=chk,
                           greedy_rows_token_equals_label=round(agree, 5), device=str(device),
                           torch=torch.__version__, final=final)
            save_result(d, a, a.out, summary, best[2])
        elif final:
            s = json.load(open(os.path.join(a.out, "summary.json")))
            s.update(steps=step, final=True, seconds=round(time.time() - T0, 1),
                     train_seconds=round(time.time() - t_start, 1), last_eval=ev)
            write_atomic(os.path.join(a.out, "summary.json"), lambda p: json.dump(s, open(p, "w"), indent=1))
            if a.mirror:
                write_atomic(os.path.join(a.mirror, "summary.json"), lambda p: json.dump(s, open(p, "w"), indent=1))

    checkpoint()
    while (step < a.steps) if a.steps else (time.time() < end):
        step += 1
        fr = progress(step)
        for pg in opt.param_groups:
            pg["lr"] = lr_at(fr)
        idx = torch.randint(0, toks.shape[0], (a.batch,), generator=g).to(device)
        an = anchors_for(a.batch, a.blocks, plen[idx], L, B, g, device)
        with autocast(device):
            lg = drafter_logits(d, feats[idx], toks[idx], an, B)
        want = block_labels(labels[idx], an, B)
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), want.reshape(-1), reduction="none")
        loss = (ce.view(-1, B - 1) * wdecay).sum() / (wdecay.sum() * ce.numel() / (B - 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        opt.step()
        lv = loss.item() if step % 10 == 0 or step == 1 else None
        if lv is not None:
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
        if step % 100 == 0 or step == 1 or (a.smoke and step % 5 == 0):
            log("step %d: loss %.4f (ema %.4f) lr %.2e" % (step, lv if lv is not None else loss.item(), ema, lr_at(fr)))
            rec(step=step, loss=round(loss.item(), 5), lr=lr_at(fr))
        if time.time() - last_ck >= a.ckpt_every:
            checkpoint()
            last_ck, ck_step = time.time(), step
    if ck_step == step:  # the last step was just evaluated: record it as final
        s = json.load(open(os.path.join(a.out, "summary.json")))
        s.update(steps=step, final=True, seconds=round(time.time() - T0, 1), train_seconds=round(time.time() - t_start, 1))
        write_atomic(os.path.join(a.out, "summary.json"), lambda p: json.dump(s, open(p, "w"), indent=1))
        if a.mirror:
            write_atomic(os.path.join(a.mirror, "summary.json"), lambda p: json.dump(s, open(p, "w"), indent=1))
    else:
        checkpoint(final=True)
    log("done: %s/drafter.gguf (best step %d of %d, held-out mean accepted %.3f, %.1f s of training)" % (
        a.out, best[0], step, best[1]["mean_accepted"], time.time() - t_start))


if __name__ == "__main__":
    main()
