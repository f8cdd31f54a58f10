#!/usr/bin/env python3
"""Two plain-Python forward passes of Muse Glimmer, for converter tests on
tiny models (slow: lists of floats, no numpy):

- hf_logits(dir, ids): what transformers' MuseGlimmerForConditionalGeneration
  computes from the Hugging Face checkpoint (centered 1+w layer norms, plain
  final norm, scaleless q/k norm with q * qk_scale_factor, RoPE on halves
  (rotate_half) on layers with a non-zero rope theta, sliding window per
  layer_types, output_multiplier then tanh softcap);
- gguf_logits(path, ids): what muse-glimmer.md section 2 says llama.cpp
  computes from the GGUF (weights used as stored, q/k norm weights, RoPE on
  adjacent pairs on sliding layers only, logit_scale then softcap).
Both return the logits of every position. A correct conversion makes them
agree to float rounding (F32) or to quantization error (Q8_0, BF16).
usage: ref_forward.py HF_DIR GGUF ID [ID...]   prints the max |logit difference|
"""
import json, math, operator, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf
import hf_to_gguf


def matvec(rows, x):
    mul = operator.mul
    return [sum(map(mul, r, x)) for r in rows]


def rms(x, eps, w=None, add=0.0):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    if w is None:
        return [v * s for v in x]
    return [v * s * (wi + add) for v, wi in zip(x, w)]


def rows_of(vals, n_rows, n_cols):
    return [list(vals[r * n_cols:(r + 1) * n_cols]) for r in range(n_rows)]


def attention(qs, ks, vs, n_head, n_kv, hd, window):
    """qs[t]: list of n_head head vectors; causal, optional sliding window."""
    out = []
    g = n_head // n_kv
    scale = 1.0 / math.sqrt(hd)
    for t in range(len(qs)):
        lo = max(0, t - window + 1) if window else 0
        o = []
        for h in range(n_head):
            q = qs[t][h]
            kv = h // g
            sc = [sum(map(operator.mul, q, ks[u][kv])) * scale for u in range(lo, t + 1)]
            m = max(sc)
            e = [math.exp(s - m) for s in sc]
            z = sum(e)
            acc = [0.0] * hd
            for p, u in zip(e, range(lo, t + 1)):
                vu = vs[u][kv]
                for i in range(hd):
                    acc[i] += p / z * vu[i]
            o.extend(acc)
        out.append(o)
    return out


def silu(x):
    return x / (1.0 + math.exp(-x)) if x > -60 else 0.0


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x > -60 else 0.0


def forward(P, ids):
    """P: dict with geometry, per-layer weights (lists of rows) and flags."""
    E, L, nh, nkv, hd = P["E"], P["L"], P["nh"], P["nkv"], P["hd"]
    hs = [rms(list(P["embd"][t]), P["eps"]) for t in ids]
    for il in range(L):
        W = P["layers"][il]
        qs, ks, vs, gs = [], [], [], []
        for pos, h in enumerate(hs):
            a = rms(h, P["eps"], W["attn_norm"], P["norm_add"])
            q, k, v = matvec(W["q"], a), matvec(W["k"], a), matvec(W["v"], a)
            gs.append(matvec(W["gate"], a))
            qh = [rms(q[j * hd:(j + 1) * hd], P["eps"], W["q_norm"]) for j in range(nh)]
            kh = [rms(k[j * hd:(j + 1) * hd], P["eps"], W["k_norm"]) for j in range(nkv)]
            if W["rope"]:
                qh = [P["rope"](x, pos) for x in qh]
                kh = [P["rope"](x, pos) for x in kh]
            qs.append(qh)
            ks.append(kh)
            vs.append([v[j * hd:(j + 1) * hd] for j in range(nkv)])
        att = attention(qs, ks, vs, nh, nkv, hd, W["window"])
        new = []
        for t, h in enumerate(hs):
            o = [x * sigmoid(g) for x, g in zip(att[t], gs[t])]
            o = rms(matvec(W["o"], o), 1e-8, W["post_attn_norm"], P["norm_add"])
            h1 = [x + y for x, y in zip(h, o)]
            f = rms(h1, P["eps"], W["ffn_norm"], P["norm_add"])
            f = [silu(g) * u for g, u in zip(matvec(W["ffn_gate"], f), matvec(W["ffn_up"], f))]
            f = rms(matvec(W["ffn_down"], f), 1e-8, W["post_ffn_norm"], P["norm_add"])
            new.append([x + y for x, y in zip(h1, f)])
        hs = new
    out = []
    cap = P["softcap"]
    for h in hs:
        x = rms(h, P["eps"], P["out_norm"])
        out.append([cap * math.tanh(l * P["logit_scale"] / cap) for l in matvec(P["output"], x)])
    return out


def rope_halves(theta, hd):
    inv = [theta ** (-(2.0 * i) / hd) for i in range(hd // 2)]

    def f(x, pos):
        h = hd // 2
        out = list(x)
        for i in range(h):
            c, s = math.cos(pos * inv[i]), math.sin(pos * inv[i])
            out[i] = x[i] * c - x[i + h] * s
            out[i + h] = x[i + h] * c + x[i] * s
        return out
    return f


def rope_pairs(theta, hd):
    inv = [theta ** (-(2.0 * i) / hd) for i in range(hd // 2)]

    def f(x, pos):
        out = list(x)
        for i in range(hd // 2):
            c, s = math.cos(pos * inv[i]), math.sin(pos * inv[i])
            out[2 * i] = x[2 * i] * c - x[2 * i + 1] * s
            out[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c
        return out
    return f


def hf_params(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    h = hf_to_gguf.text_hparams(cfg)
    raw = hf_to_gguf.read_weights(d)
    T = {}
    for k, (shape, dt, data) in raw.items():
        if k.startswith(hf_to_gguf.SKIP_PREFIXES):
            continue
        for p in ("model.language_model.", "model."):
            if k.startswith(p):
                k = k[len(p):]
                break
        vals = gguf.f32_values(data, dt)
        T[k] = rows_of(vals, shape[0], shape[1]) if len(shape) == 2 else list(vals)
    E, hd = h["hidden_size"], h["head_dim"]
    lrt = h.get("layer_rope_theta") or [0 if t == "full_attention" else h["_theta"] for t in h["layer_types"]]
    P = dict(E=E, L=h["num_hidden_layers"], nh=h["num_attention_heads"], nkv=h["num_key_value_heads"], hd=hd,
             eps=h["rms_norm_eps"], norm_add=1.0, embd=T["embed_tokens.weight"], out_norm=T["norm.weight"],
             output=T.get("lm_head.weight", T["embed_tokens.weight"]), logit_scale=h["output_multiplier"],
             softcap=h["final_logit_softcapping"], rope=rope_halves(h["_theta"], hd), layers=[])
    for il in range(P["L"]):
        p = "layers.%d." % il
        P["layers"].append(dict(
            attn_norm=T[p + "input_layernorm.weight"], q=T[p + "self_attn.q_proj.weight"],
            k=T[p + "self_attn.k_proj.weight"], v=T[p + "self_attn.v_proj.weight"],
            gate=T[p + "self_attn.gate_proj.weight"], o=T[p + "self_attn.o_proj.weight"],
            q_norm=[h["qk_scale_factor"]] * hd, k_norm=[1.0] * hd,
            post_attn_norm=T[p + "post_attention_layernorm.weight"],
            ffn_norm=T[p + "pre_feedforward_layernorm.weight"], ffn_gate=T[p + "mlp.gate_proj.weight"],
            ffn_up=T[p + "mlp.up_proj.weight"], ffn_down=T[p + "mlp.down_proj.weight"],
            post_ffn_norm=T[p + "post_feedforward_layernorm.weight"],
            rope=bool(lrt[il]),
            window=h["sliding_window"] if h["layer_types"][il] == "sliding_attention" else 0))
    # the final norm is a plain x * w norm in transformers: norm_add applies to layer norms only
    return P


def gguf_params(path):
    r = gguf.Reader(path)
    kv, a = r.kv, "muse-glimmer."

    def t(name):
        dims, _, _ = r.tensors[name]
        vals = r.floats(name)
        return rows_of(vals, dims[1], dims[0]) if len(dims) == 2 else list(vals)
    hd = kv[a + "attention.key_length"]
    P = dict(E=kv[a + "embedding_length"], L=kv[a + "block_count"], nh=kv[a + "attention.head_count"],
             nkv=kv[a + "attention.head_count_kv"], hd=hd, eps=kv[a + "attention.layer_norm_rms_epsilon"],
             norm_add=0.0, embd=t("token_embd.weight"), out_norm=t("output_norm.weight"),
             output=t("output.weight"), logit_scale=kv[a + "logit_scale"],
             softcap=kv.get(a + "final_logit_softcapping", 30.0),
             rope=rope_pairs(kv[a + "rope.freq_base"], hd), layers=[])
    pat = kv[a + "attention.sliding_window_pattern"]
    for il in range(P["L"]):
        b = "blk.%d." % il
        P["layers"].append(dict(
            attn_norm=t(b + "attn_norm.weight"), q=t(b + "attn_q.weight"), k=t(b + "attn_k.weight"),
            v=t(b + "attn_v.weight"), gate=t(b + "attn_gate.weight"), o=t(b + "attn_output.weight"),
            q_norm=t(b + "attn_q_norm.weight"), k_norm=t(b + "attn_k_norm.weight"),
            post_attn_norm=t(b + "post_attention_norm.weight"), ffn_norm=t(b + "ffn_norm.weight"),
            ffn_gate=t(b + "ffn_gate.weight"), ffn_up=t(b + "ffn_up.weight"), ffn_down=t(b + "ffn_down.weight"),
            post_ffn_norm=t(b + "post_ffw_norm.weight"), rope=bool(pat[il]),
            window=kv[a + "attention.sliding_window"] if pat[il] else 0))
    return P


def hf_logits(d, ids):
    return forward(hf_params(d), ids)


def gguf_logits(path, ids):
    return forward(gguf_params(path), ids)


def main():
    d, g = sys.argv[1], sys.argv[2]
    ids = [int(x) for x in sys.argv[3:]]
    a, b = hf_logits(d, ids), gguf_logits(g, ids)
    diff = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    print("positions %d, max |logit difference| %.3e" % (len(ids), diff))


if __name__ == "__main__":
    main()
