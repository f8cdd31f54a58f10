#!/usr/bin/env python3
"""Trains muser's default model (MuseGlimmerForConditionalGeneration from
transformers, text part only) on the Debian-text corpus, within a wall-clock
budget, and saves a Hugging Face checkpoint (bf16 safetensors).

Data: every document becomes <|begin_of_text|> tokens <|end_of_text|>; all
documents are concatenated into one stream (train) and one (held-out);
training samples random windows of SEQ+1 tokens; the held-out loss is the mean
next-token cross-entropy over consecutive SEQ windows of the held-out stream.
The weights kept are those of the evaluation (every --eval-every steps, on
the whole held-out stream) with the lowest held-out loss.
Optimizer: AdamW (0.9, 0.95), weight decay 0.1 on matrices, grad clip 1.0,
linear warm-up then cosine decay to 10%; bf16 autocast, fp32 master weights.
The number of steps is fixed after timing the first steps so that training
ends inside --budget seconds.

usage: train.py --corpus DIR --tokenizer DIR --out DIR [--budget S] [--smoke]
"""
import argparse, json, lzma, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from glimmer_model import DEFAULT, make_config, make_model, text_params


def log(*a):
    print(*a, flush=True)


def load_stream(path, tok, bos, eos, max_docs=0):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(l)["text"] for l in f]
    if max_docs:
        docs = docs[:max_docs]
    enc = tok(docs, add_special_tokens=False)["input_ids"]
    n = sum(len(e) + 2 for e in enc)
    arr = np.empty(n, dtype=np.int32)
    o = 0
    for e in enc:
        arr[o] = bos
        arr[o + 1:o + 1 + len(e)] = e
        arr[o + 1 + len(e)] = eos
        o += len(e) + 2
    return torch.from_numpy(arr), sum(len(d.encode()) for d in docs), len(docs)


@torch.no_grad()
def evaluate(model, stream, seq, batch, max_windows=None):
    model.eval()
    n_win = (len(stream) - 1) // seq
    if max_windows:
        n_win = min(n_win, max_windows)
    tot, cnt = 0.0, 0
    for b0 in range(0, n_win, batch):
        idx = torch.arange(b0, min(b0 + batch, n_win), device=stream.device) * seq
        x = torch.stack([stream[i:i + seq + 1] for i in idx.tolist()]).long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                               reduction="sum")
        tot += loss.item()
        cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt, cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=420.0, help="training seconds")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-docs", type=int, default=0, help="smoke tests: use only the first N train docs")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    t_start = time.time()

    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    bos, eos = tok.convert_tokens_to_ids("<|begin_of_text|>"), tok.convert_tokens_to_ids("<|end_of_text|>")
    train, train_bytes, train_docs = load_stream(os.path.join(a.corpus, "corpus-train.jsonl.xz"), tok, bos, eos,
                                                   a.max_docs)
    held, held_bytes, held_docs = load_stream(os.path.join(a.corpus, "corpus-heldout.jsonl.xz"), tok, bos, eos)
    train, held = train.to(dev), held.to(dev)
    log(f"data: train {train_docs} docs {train_bytes} bytes {len(train)} tokens "
        f"({train_bytes / len(train):.2f} bytes/token); held-out {held_docs} docs {held_bytes} bytes "
        f"{len(held)} tokens; tokenize {time.time() - t_start:.1f}s")

    cfg = make_config(DEFAULT, tok)
    model = make_model(cfg).to(dev)
    log("attention implementation:", model.config.text_config._attn_implementation)
    n_text = text_params(model)
    log(f"model: {n_text} text parameters; layer_types {cfg.text_config.layer_types}; "
        f"rope theta per layer {cfg.text_config.layer_rope_theta}")
    params = [p for n, p in model.named_parameters() if "language_model" in n or n.startswith("lm_head")]
    for n, p in model.named_parameters():
        if not ("language_model" in n or n.startswith("lm_head")):
            p.requires_grad_(False)
    decay = [p for p in params if p.ndim == 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if a.compile else model

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    csv = open(os.path.join(a.out, "loss.csv"), "w")
    csv.write("step,tokens,train_loss,lr,elapsed_s,heldout_loss\n")
    total_steps = a.max_steps
    tokens_per_step = a.batch * a.seq
    step, t_train0 = 0, time.time()
    timing_from, timing_t0 = 10, None
    ema = None
    best, best_loss, best_step = None, float("inf"), 0
    model.train()
    while step < total_steps:
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            pr = (step - a.warmup) / max(1, total_steps - a.warmup)
            lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, pr))))
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, len(train) - a.seq - 1, (a.batch,), device=dev, generator=gen)
        x = train[off[:, None] + torch.arange(a.seq + 1, device=dev)[None, :]].long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step == timing_from:
            torch.cuda.synchronize()
            timing_t0 = time.time()
        if step == timing_from + 20 and total_steps == a.max_steps:
            torch.cuda.synchronize()
            dt = (time.time() - timing_t0) / 20
            left = a.budget - (time.time() - t_train0)
            total_steps = min(a.max_steps, step + int(left / (dt * 1.04)))
            log(f"timing: {dt * 1000:.1f} ms/step, {tokens_per_step / dt:.0f} tokens/s -> {total_steps} steps")
        if step % 10 == 0 or step == total_steps:
            lv = loss.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            hl = ""
            if step % a.eval_every == 0 or step == total_steps:
                hv = evaluate(model, held, a.seq, 16)[0]
                hl = "%.4f" % hv
                if hv < best_loss:  # keep the weights with the best held-out loss
                    best_loss, best_step = hv, step
                    best = {k: v.detach().clone() for k, v in model.state_dict().items()}
            el = time.time() - t_train0
            csv.write(f"{step},{step * tokens_per_step},{lv:.4f},{lr:.6g},{el:.1f},{hl}\n")
            csv.flush()
            if step % 100 == 0 or hl:
                log(f"step {step}/{total_steps} loss {lv:.4f} (ema {ema:.4f}) lr {lr:.2e} "
                    f"{el:.0f}s {('held-out ' + hl) if hl else ''}")
    t_train = time.time() - t_train0
    last_step_heldout = float(hl)
    if best_step != step:
        model.load_state_dict(best)
        log(f"restored the weights of step {best_step} (held-out {best_loss:.4f} < {last_step_heldout:.4f})")
    held_loss, held_tokens = evaluate(model, held, a.seq, 16)
    train_eval, train_eval_tokens = evaluate(model, train, a.seq, 16, max_windows=256)
    summary = {"steps": step, "kept_step": best_step, "heldout_loss_last_step": last_step_heldout, "tokens_seen": step * tokens_per_step, "batch": a.batch, "seq": a.seq,
               "lr": a.lr, "warmup": a.warmup, "train_seconds": round(t_train, 1),
               "tokens_per_second": round(step * tokens_per_step / t_train),
               "final_train_loss_batch": round(loss.item(), 4), "final_train_loss_ema": round(ema, 4),
               "train_loss_eval_first_256_windows": round(train_eval, 4),
               "train_eval_tokens": train_eval_tokens,
               "heldout_loss": round(held_loss, 4), "heldout_tokens": held_tokens,
               "heldout_bits_per_byte": round(held_loss * (len(held) - 1) / math.log(2) / held_bytes, 4),
               "text_parameters": n_text, "train_tokens_in_corpus": len(train),
               "epochs": round(step * tokens_per_step / len(train), 2),
               "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "transformers": __import__("transformers").__version__}
    log("summary: " + json.dumps(summary))
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    ck = os.path.join(a.out, "hf")
    model.to(torch.bfloat16).save_pretrained(ck)
    tok.save_pretrained(ck)
    model.generation_config.eos_token_id = [eos, tok.convert_tokens_to_ids("<|eot|>")]
    model.generation_config.bos_token_id = bos
    model.generation_config.save_pretrained(ck)
    log(f"saved {ck}; total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
