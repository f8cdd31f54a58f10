#!/usr/bin/env python3
"""Computes transformers' answers for a Hugging Face MuseGlimmer checkpoint:
tokenization of texts and greedy continuations with the top next-token
probabilities and logits at every step (float32 weights and math, eager
attention, no TF32, full recomputation per step: no cache involved).

usage: golden.py CKPT_DIR SPEC.json OUT.json [device]
SPEC: {"tokenize": [text...], "generate": [{"name","text"} | {"name","chat":[msgs]} | {"name","ids"}],
       "n_predict": 48, "top": 8}
"""
import json, sys, time
import torch
from transformers import AutoTokenizer, MuseGlimmerForConditionalGeneration


def main():
    ckpt, spec_path, out_path = sys.argv[1:4]
    dev = sys.argv[4] if len(sys.argv) > 4 else ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    spec = json.load(open(spec_path))
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = MuseGlimmerForConditionalGeneration.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    n_predict, top = spec.get("n_predict", 48), spec.get("top", 8)
    out = {"checkpoint": ckpt.rstrip("/").split("/")[-1],
           "reference": "transformers %s, torch %s, float32, eager attention, %s" % (
               __import__("transformers").__version__, torch.__version__, dev),
           "tokenize": [], "generate": []}
    for text in spec.get("tokenize", []):
        out["tokenize"].append({"text": text,
                                "ids": tok(text, add_special_tokens=False)["input_ids"]})
    t0 = time.time()
    for g in spec.get("generate", []):
        if "ids" in g:
            ids = list(g["ids"])
        elif "chat" in g:
            ids = tok.apply_chat_template(g["chat"], add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            ids = tok(g["text"])["input_ids"]  # post-processor adds BOS
        prompt = list(ids)
        steps = []
        with torch.no_grad():
            for _ in range(n_predict):
                x = torch.tensor([ids], device=dev)
                logits = model(input_ids=x).logits[0, -1].double()
                probs = torch.softmax(logits, -1)
                p, i = torch.topk(probs, top)
                nxt = int(torch.argmax(logits))
                steps.append({"id": nxt,
                              "top": [[int(a), float("%.7g" % b)] for a, b in zip(i.tolist(), p.tolist())],
                              "top_logits": [[int(a), float("%.7g" % logits[a])] for a in i.tolist()]})
                ids.append(nxt)
        out["generate"].append({"name": g["name"], "text": g.get("text"), "prompt_ids": prompt,
                                "ids": [s["id"] for s in steps],
                                "completion": tok.decode([s["id"] for s in steps]), "steps": steps})
    out["seconds"] = round(time.time() - t0, 2)
    json.dump(out, open(out_path, "w"))
    for g in out["generate"]:
        print(f"[{g['name']}] {len(g['prompt_ids'])} prompt ids -> {g['completion']!r}")


if __name__ == "__main__":
    main()
