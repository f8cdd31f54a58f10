#!/usr/bin/env python3
"""Trains a DFlash drafter for a Muse Glimmer target (muser's default model
by default) and writes it as a Hugging Face-layout checkpoint and as the
`dflash` GGUF muser and llama.cpp load (docs/speculative.md "Training").

The DFlash recipe: the target's hidden states at a few layers (the inputs
of dflash.target_layers), concatenated, condition a small block-diffusion
drafter; a block is [the last token, mask x (B-1)] and the drafter learns
to fill the B-1 masks with the target's next tokens in one pass.

Data: the texts of --corpus (files or directories of .txt/.md/.py/...),
tokenized with `muser tokenize` (the target's own tokenizer), cut into
windows of --seq tokens; a share (--heldout) is kept for evaluation. With
--gen N the last N tokens of every window are replaced by the target's own
greedy continuation (what verification sees; recommended on a GPU), else
the labels are the target's greedy next-token predictions on the text.

Each step: a batch of windows through the target (no gradients) for the
features and labels; --blocks anchors per window; for an anchor a the block
sits at positions a .. a+B-1 and sees the context rows of positions < a
(fc, encoder norm, then each layer's k/v) and the whole block; the loss is
the cross-entropy of the B-1 mask rows against the target's tokens at
a+1 .. a+B-1, weighted exp(-(k-1)/--decay) for row k (the DFlash paper's
decay). AdamW, cosine schedule, the target's embedding and output matrix
frozen (the drafter file shares them).

Evaluation (every --eval-every steps and at the end): on held-out windows,
for every --eval-stride-th anchor, the accepted length of a greedy block
(how many leading drafts equal the target's tokens), its mean and its
distribution; what muser would accept per verification step at draft max
B-1 with greedy decoding.

Outputs in --out: hf/ (config.json, model.safetensors), drafter.gguf (via
tools/convert/dflash_to_gguf.py), log.jsonl (one line per logged step and
evaluation), summary.json.

usage: dflash_train.py --target T.gguf --corpus PATH... --out DIR [--muser ./muser] [--steps N]
       [--block 16] [--layers 1] [--target-layers 1,4,7] [--seq 512] [--batch 8] [--blocks 16]
       [--lr 6e-4] [--gen 0] [--device cuda|cpu] [--smoke]
--smoke: a few steps on a few windows, for a CPU check that the pipeline runs.
"""
import argparse, json, math, os, random, subprocess, sys, time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "convert"))
from dflash_model import Drafter, Target, new_config  # noqa: E402
import dflash_to_gguf  # noqa: E402

EXTS = (".txt", ".md", ".py", ".c", ".h", ".sh", ".rst", ".json", ".1", ".8", "")


def log(*a):
    print(*a, flush=True)


def corpus_files(paths, limit):
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                for n in sorted(names):
                    if os.path.splitext(n)[1] in EXTS:
                        out.append(os.path.join(root, n))
        else:
            out.append(p)
    return out[:limit] if limit else out


def tokenize(muser, target, files, seq, max_tokens, bos):
    """Every file through `muser tokenize`, BOS first (as muser run feeds a
    prompt), concatenated, cut into windows of seq tokens."""
    ids = []
    for f in files:
        if max_tokens and len(ids) >= max_tokens:
            break
        r = subprocess.run([muser, "tokenize", "-m", target, "-f", f], capture_output=True, text=True)
        if r.returncode:
            continue  # not text the tokenizer takes (binary, too large): skip
        try:
            toks = json.loads(r.stdout)
            ids.extend(([bos] if bos is not None else []) + toks)
        except ValueError:
            continue
    n = len(ids) // seq
    return torch.tensor(ids[:n * seq], dtype=torch.long).view(n, seq)


@torch.no_grad()
def generate(target, win, n_gen, layers):
    """The target's greedy continuation of the first seq - n_gen tokens of
    each window (no KV cache: a forward per token; small models only)."""
    out = win.clone()
    p0 = win.shape[1] - n_gen
    for p in range(p0, win.shape[1]):
        _, lg = target.forward(out[:, :p], layers)
        out[:, p] = lg[:, -1].argmax(-1)
    return out


def blocks_for(n_seq, L, B, n_blocks, rng, stride=None):
    """Anchors (sequence, position) with room for a whole block after
    position >= 1 (a block sees at least one context row)."""
    if stride:
        return [(s, a) for s in range(n_seq) for a in range(1, L - B + 1, stride)]
    return [(s, rng.randrange(1, L - B + 1)) for s in range(n_seq) for _ in range(n_blocks)]


def batch_inputs(d, toks, feats, anchors, B, device):
    """Flattened inputs of Drafter.forward for a list of anchors over windows
    toks [S, L] with features feats [S, L, n_feat]: the context of every
    window (positions 0..L-1) and the blocks, with the visibility masks."""
    S, L = toks.shape
    mask_id = d.cfg["mask_token_id"]
    ctx = feats.reshape(S * L, -1)
    ctx_pos = torch.arange(L, device=device).repeat(S)
    ctx_seq = torch.arange(S, device=device).repeat_interleave(L)
    n = len(anchors)
    s_idx = torch.tensor([s for s, _ in anchors], device=device)
    a_idx = torch.tensor([a for _, a in anchors], device=device)
    k = torch.arange(B, device=device)
    blk_pos = (a_idx[:, None] + k[None, :]).reshape(-1)
    blk_seq = s_idx.repeat_interleave(B)
    blk_tok = torch.full((n, B), mask_id, dtype=torch.long, device=device)
    blk_tok[:, 0] = toks[s_idx, a_idx]
    blk_tok = blk_tok.reshape(-1)
    blk_id = torch.arange(n, device=device).repeat_interleave(B)
    a_rep = a_idx.repeat_interleave(B)
    ctx_vis = (ctx_seq[None, :] == blk_seq[:, None]) & (ctx_pos[None, :] < a_rep[:, None])
    blk_vis = blk_id[:, None] == blk_id[None, :]
    labels = toks[s_idx[:, None], (a_idx[:, None] + k[None, :]).clamp(max=L - 1)]  # [n, B]; column 0 unused
    return ctx, ctx_pos, blk_tok, blk_pos, ctx_vis, blk_vis, labels


def chunks(lst, n):
    for i in range(0, len(lst), n):
        yield lst[i:i + n]


@torch.no_grad()
def evaluate(d, target, wins, layers, B, stride, device, max_blocks_per_pass=64):
    """Mean accepted length of greedy blocks on held-out windows (labels: the
    target's greedy tokens), and the acceptance rate of each block row."""
    d.eval()
    acc_hist = [0] * B
    row_ok = [0] * (B - 1)
    row_n = [0] * (B - 1)
    for w in chunks(list(range(wins.shape[0])), 4):
        toks = wins[w].to(device)
        feats, lg = target.forward(toks, layers)
        lab = torch.cat((toks[:, :1], lg[:, :-1].argmax(-1)), dim=1)  # label[p]: the target's token at p
        anchors = blocks_for(len(w), toks.shape[1], B, 0, None, stride=stride)
        for part in chunks(anchors, max_blocks_per_pass):
            ctx, cp, bt, bp, cv, bv, _ = batch_inputs(d, toks, feats, part, B, device)
            out = d(ctx, cp, bt, bp, cv, bv).view(len(part), B, -1)[:, 1:].argmax(-1)
            s_idx = torch.tensor([s for s, _ in part], device=device)
            a_idx = torch.tensor([a for _, a in part], device=device)
            want = lab[s_idx[:, None], a_idx[:, None] + torch.arange(1, B, device=device)[None, :]]
            ok = (out == want).int()
            lead = ok.cumprod(-1).sum(-1)
            for v in lead.tolist():
                acc_hist[v] += 1
            prefix = torch.cat((torch.ones_like(ok[:, :1]), ok.cumprod(-1)[:, :-1]), dim=1)
            for r in range(B - 1):
                row_n[r] += int(prefix[:, r].sum())
                row_ok[r] += int((prefix[:, r] * ok[:, r]).sum())
    n = sum(acc_hist)
    mean = sum(i * c for i, c in enumerate(acc_hist)) / max(n, 1)
    d.train()
    return dict(blocks=n, mean_accepted=mean, tokens_per_step=mean + 1, accepted_hist=acc_hist,
                row_accept_rate=[round(o / max(c, 1), 4) for o, c in zip(row_ok, row_n)])


def main():
    ap = argparse.ArgumentParser(description="train a DFlash drafter for a Muse Glimmer target")
    ap.add_argument("--target", default=os.path.join(HERE, "..", "..", "models", "muser-default.gguf"))
    ap.add_argument("--corpus", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--muser", default=os.path.join(HERE, "..", "..", "muser"))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--ff", type=int, default=0, help="drafter FFN width (0: the target's)")
    ap.add_argument("--target-layers", default="", help="llama.cpp ids: inputs of these target layers (default 3 spread)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=16, help="anchors per window and step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--decay", type=float, default=7.0)
    ap.add_argument("--gen", type=int, default=0, help="replace the last N tokens of each window by the target's greedy continuation")
    ap.add_argument("--heldout", type=float, default=0.05)
    ap.add_argument("--max-files", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-stride", type=int, default=7)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.seq, a.batch, a.blocks, a.eval_every = 6, 64, 2, 4, 3
        a.max_tokens, a.eval_windows, a.block = a.max_tokens or 2048, 2, min(a.block, 8)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "log.jsonl"), "w")

    def rec(**kw):
        logf.write(json.dumps(kw) + "\n")
        logf.flush()

    t0 = time.time()
    target = Target(a.target, a.device)
    tl = [int(x) for x in a.target_layers.split(",")] if a.target_layers else None
    cfg = new_config(target, n_layer=a.layers, block_size=a.block, target_layers=tl, n_ff=a.ff or None)
    layers = [i + 1 for i in cfg["target_layer_ids"]]
    log("target %s: %d layers, width %d, vocab %d; drafter: %d layers, block %d, target layers %s, mask %d" % (
        a.target, target.n_layer, target.n_embd, target.n_vocab, a.layers, a.block, layers, cfg["mask_token_id"]))
    files = corpus_files(a.corpus, a.max_files)
    wins = tokenize(a.muser, a.target, files, a.seq, a.max_tokens, target.bos)
    if wins.shape[0] < 2:
        sys.exit("dflash_train: the corpus gave %d windows of %d tokens" % (wins.shape[0], a.seq))
    perm = torch.randperm(wins.shape[0], generator=torch.Generator().manual_seed(a.seed))
    n_held = max(1, int(wins.shape[0] * a.heldout))
    held, train = wins[perm[:n_held]][:a.eval_windows], wins[perm[n_held:]]
    log("corpus: %d files, %d windows of %d tokens (%d held out, %d evaluated)" % (
        len(files), wins.shape[0], a.seq, n_held, held.shape[0]))
    if a.gen:
        log("generating the target's continuations (%d tokens per window)..." % a.gen)
        train = torch.cat([generate(target, c.to(a.device), a.gen, layers).cpu() for c in train.split(32)])
        held = torch.cat([generate(target, c.to(a.device), a.gen, layers).cpu() for c in held.split(32)])
    d = Drafter(cfg, target.tok_embd, target.output).to(a.device)
    n_params = sum(p.numel() for p in d.parameters())
    log("drafter parameters: %d" % n_params)
    opt = torch.optim.AdamW([p for p in d.parameters()], lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1, s / a.steps)))))
    wdecay = torch.tensor([math.exp(-(k - 1) / a.decay) for k in range(1, a.block)], device=a.device)
    ev = evaluate(d, target, held, layers, a.block, a.eval_stride, a.device)
    log("step 0: held-out mean accepted %.3f" % ev["mean_accepted"])
    rec(step=0, eval=ev)
    best = None
    for step in range(1, a.steps + 1):
        idx = torch.randint(0, train.shape[0], (a.batch,))
        toks = train[idx].to(a.device)
        feats, lg = target.forward(toks, layers)
        lab = torch.cat((toks[:, :1], lg[:, :-1].argmax(-1)), dim=1)
        anchors = blocks_for(a.batch, a.seq, a.block, a.blocks, rng)
        ctx, cp, bt, bp, cv, bv, _ = batch_inputs(d, toks, feats, anchors, a.block, a.device)
        logits = d(ctx, cp, bt, bp, cv, bv).view(len(anchors), a.block, -1)[:, 1:]
        s_idx = torch.tensor([s for s, _ in anchors], device=a.device)
        a_idx = torch.tensor([p for _, p in anchors], device=a.device)
        want = lab[s_idx[:, None], a_idx[:, None] + torch.arange(1, a.block, device=a.device)[None, :]]
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), want.reshape(-1), reduction="none")
        loss = (ce.view(len(anchors), -1) * wdecay).sum() / (wdecay.sum() * len(anchors))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % max(1, a.eval_every // 10) == 0 or step == 1:
            log("step %d: loss %.4f lr %.2e (%.0f s)" % (step, loss.item(), sched.get_last_lr()[0], time.time() - t0))
            rec(step=step, loss=round(loss.item(), 5), lr=sched.get_last_lr()[0], t=round(time.time() - t0, 1))
        if step % a.eval_every == 0 or step == a.steps:
            ev = evaluate(d, target, held, layers, a.block, a.eval_stride, a.device)
            log("step %d: held-out mean accepted %.3f (tokens per step %.3f) rows %s" % (
                step, ev["mean_accepted"], ev["tokens_per_step"], ev["row_accept_rate"][:6]))
            rec(step=step, eval=ev)
            if best is None or ev["mean_accepted"] > best[1]["mean_accepted"]:
                best = (step, ev, {k: v.detach().clone() for k, v in d.state_dict().items()})
    d.load_state_dict(best[2])
    hf = os.path.join(a.out, "hf")
    d.save_hf(hf)
    gg = os.path.join(a.out, "drafter.gguf")
    dflash_to_gguf.convert(hf, gg, a.target, {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8}[a.outtype],
                           name="muser-dflash-%s" % os.path.splitext(os.path.basename(a.target))[0], log=log)
    summary = dict(target=a.target, steps=a.steps, best_step=best[0], heldout=best[1], block=a.block,
                   layers=a.layers, target_layers=layers, params=n_params, seconds=round(time.time() - t0, 1),
                   windows=dict(train=int(train.shape[0]), heldout=int(held.shape[0]), seq=a.seq), gen=a.gen,
                   files=len(files))
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    log("done: %s (best step %d, held-out mean accepted %.3f)" % (gg, best[0], best[1]["mean_accepted"]))


if __name__ == "__main__":
    main()
