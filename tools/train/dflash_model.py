"""The DFlash drafter and its target in PyTorch, for training and checks.

Owns: the drafter's forward as llama.cpp's `dflash` architecture computes
it (docs/speculative.md "DFlash"): the target's layer inputs at the target
layers, concatenated, through fc and the encoder norm, give every context
position's K/V in each drafter layer (k norm and NeoX RoPE on K); the block
[last, mask, ...] runs through the layers (attention norm, q/k/v, q/k
norms, NeoX RoPE, attention over the context rows and the whole block,
output projection, residual, FFN norm, SwiGLU, residual), the final norm
and the target's output matrix (no logit scale, no softcap). Also a Muse
Glimmer target read from a muser/llama.cpp GGUF (F32, F16, BF16, Q8_0
weights dequantized), the HF-layout checkpoint the converter reads
(tools/convert/dflash_to_gguf.py), and a minimal safetensors reader/writer.

Does not own: training (dflash_train.py) or the GGUF layout of a drafter
(the converter).

Key design choice: one function computes a batch of blocks against their
sequences' context rows with an explicit mask, so training and the
reference check run the same code as drafting.
"""
import json, math, os, struct, sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "convert"))
import gguf  # noqa: E402  (tools/convert/gguf.py)

# ---------------------------------------------------------------- tensors from GGUF


def gguf_tensor(r, name):
    """A GGUF tensor as a float32 torch tensor of shape [ne1, ne0] (rows)."""
    dims, t, raw = r.tensors[name]
    if t == gguf.F32:
        a = np.frombuffer(raw, dtype=np.float32)
    elif t == gguf.F16:
        a = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    elif t == gguf.BF16:
        a = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif t == gguf.Q8_0:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = b[:, :2].copy().view(np.float16).astype(np.float32)
        q = b[:, 2:].copy().view(np.int8).astype(np.float32)
        a = (q * d).reshape(-1)
    else:
        raise ValueError("dflash_model: tensor %s has type %d (F32, F16, BF16, Q8_0 are read)" % (name, t))
    shape = list(reversed(dims)) if len(dims) > 1 else [dims[0]]
    return torch.from_numpy(np.ascontiguousarray(a).reshape(shape).copy())


def rms(x, w, eps):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * w if w is not None else x


# ---------------------------------------------------------------- the target (Muse Glimmer)


class Target:
    """Muse Glimmer from a GGUF, eval only: hidden(ids) gives the layer inputs
    at the requested layers and the logits (muser's / llama.cpp's graph:
    unweighted norm after the embedding, gated attention, RoPE with adjacent
    pairs on sliding layers only, post norms at eps 1e-8, logit scale, softcap)."""

    def __init__(self, path, device="cpu"):
        r = gguf.Reader(path)
        kv = r.kv
        a = kv["general.architecture"]
        g = lambda k, d=None: kv.get("%s.%s" % (a, k), d)  # noqa: E731
        self.n_layer = g("block_count")
        self.n_embd = g("embedding_length")
        self.n_ff = g("feed_forward_length")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv")
        self.hd = g("attention.key_length", self.n_embd // self.n_head)
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.n_swa = g("attention.sliding_window", 0)
        pat = g("attention.sliding_window_pattern", 4)
        self.swa = list(pat) if isinstance(pat, list) else [il % pat < pat - 1 for il in range(self.n_layer)]
        self.base = g("rope.freq_base", 10000.0)
        self.base_swa = g("rope.freq_base_swa", self.base)
        self.logit_scale = g("logit_scale", 1.0)
        self.softcap = g("final_logit_softcapping", 30.0)
        self.mask_id = kv.get("tokenizer.ggml.mask_token_id")
        self.bos = kv.get("tokenizer.ggml.bos_token_id")
        T = lambda n: gguf_tensor(r, n).to(device)  # noqa: E731
        self.tok_embd = T("token_embd.weight")
        self.output = T("output.weight")
        self.output_norm = T("output_norm.weight")
        self.L = []
        for il in range(self.n_layer):
            p = "blk.%d." % il
            self.L.append({k: T(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_gate", "attn_q_norm", "attn_k_norm", "attn_output",
                "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")})
        self.n_vocab = self.tok_embd.shape[0]
        self.path = path

    @torch.no_grad()
    def forward(self, ids, layers):
        """ids [B, T] -> (feats [B, T, len(layers) * n_embd], logits [B, T, V])."""
        return self._run(ids, 0, None, layers)

    def _run(self, ids, p0, cache, layers):
        """The layers over ids [B, T] at positions p0 .. p0+T-1. cache: None
        (no past), or a list of per-layer [K, V] tensors [B, HK, Lmax, hd]
        holding positions < p0 and receiving these. Returns (feats or None,
        logits [B, T, V])."""
        B, Tn = ids.shape
        hd, H, HK = self.hd, self.n_head, self.n_head_kv
        x = rms(self.tok_embd[ids], None, self.eps)
        pos = torch.arange(p0, p0 + Tn, device=ids.device)
        kpos = torch.arange(0, p0 + Tn, device=ids.device)
        causal = kpos[None, :] <= pos[:, None]
        feats = [None] * len(layers)
        for il, L in enumerate(self.L):
            for k, lid in enumerate(layers):
                if lid == il:
                    feats[k] = x
            a = rms(x, L["attn_norm"], self.eps)
            q = (a @ L["attn_q"].T).view(B, Tn, H, hd)
            kk = (a @ L["attn_k"].T).view(B, Tn, HK, hd)
            v = (a @ L["attn_v"].T).view(B, Tn, HK, hd)
            gate = torch.sigmoid(a @ L["attn_gate"].T)
            q = rms(q, L["attn_q_norm"], self.eps)
            kk = rms(kk, L["attn_k_norm"], self.eps)
            mask = causal
            if self.swa[il]:
                q, kk = rope_adjacent(q, pos, self.base_swa), rope_adjacent(kk, pos, self.base_swa)
                mask = causal & (pos[:, None] - kpos[None, :] < self.n_swa)
            kk, v = kk.transpose(1, 2), v.transpose(1, 2)  # [B, HK, T, hd]
            if cache is not None:
                cache[il][0][:, :, p0:p0 + Tn] = kk
                cache[il][1][:, :, p0:p0 + Tn] = v
                kk, v = cache[il][0][:, :, :p0 + Tn], cache[il][1][:, :, :p0 + Tn]
            o = attend(q.transpose(1, 2), kk, v, mask, 1.0 / math.sqrt(hd))  # [B, H, T, hd]
            o = o.transpose(1, 2).reshape(B, Tn, H * hd) * gate
            o = o @ L["attn_output"].T
            x = x + rms(o, L["post_attention_norm"], 1e-8)
            a = rms(x, L["ffn_norm"], self.eps)
            f = F.silu(a @ L["ffn_gate"].T) * (a @ L["ffn_up"].T)
            x = x + rms(f @ L["ffn_down"].T, L["post_ffw_norm"], 1e-8)
        lg = rms(x, self.output_norm, self.eps) @ self.output.T * self.logit_scale
        if self.softcap:
            lg = torch.tanh(lg / self.softcap) * self.softcap
        return (torch.cat(feats, dim=-1) if layers else None), lg

    @torch.no_grad()
    def generate(self, ids, n_gen, temp=None, gen=None):
        """The target's continuation of ids [B, P] by n_gen tokens with a KV
        cache -> [B, P + n_gen]. temp: None (greedy) or a tensor [B] of
        temperatures, 0 meaning greedy for that row (plain softmax sampling,
        no top-k/top-p); gen: a torch.Generator for the samples."""
        B, P = ids.shape
        Lmax = P + n_gen
        cache = [[torch.zeros(B, self.n_head_kv, Lmax, self.hd, device=ids.device) for _ in range(2)]
                 for _ in range(self.n_layer)]
        out = torch.empty(B, Lmax, dtype=torch.long, device=ids.device)
        out[:, :P] = ids
        _, lg = self._run(ids, 0, cache, [])
        for t in range(n_gen):
            last = lg[:, -1].float()
            nxt = last.argmax(-1)
            if temp is not None and bool((temp > 0).any()):
                pr = torch.softmax(last / temp.clamp(min=1e-3)[:, None], -1)
                smp = torch.multinomial(pr, 1, generator=gen)[:, 0]
                nxt = torch.where(temp > 0, smp, nxt)
            out[:, P + t] = nxt
            if t + 1 < n_gen:
                _, lg = self._run(nxt[:, None], P + t, cache, [])
        return out


def attend(q, k, v, mask, scale):
    """Attention q [B, H, T, hd] over k, v [B, HK, S, hd] (grouped heads),
    mask [T, S] or [B, 1, T, S] (True: visible) -> [B, H, T, hd]."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    att = (q @ k.transpose(-1, -2)) * scale
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return att @ v


def rope_adjacent(x, pos, base):
    """RoPE on pairs (x[2i], x[2i+1]) (ggml's normal mode); x [B, T, H, hd]."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    ang = pos[:, None].float() * inv[None, :]
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def rope_neox(x, pos, base):
    """RoPE on pairs (x[i], x[i + hd/2]) (NeoX, transformers' rotate_half);
    x [..., T, H, hd], pos [T] or broadcastable to x[..., T]."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    ang = pos[..., None].float() * inv
    c, s = ang.cos().unsqueeze(-2), ang.sin().unsqueeze(-2)
    x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


# ---------------------------------------------------------------- the drafter


class Drafter(torch.nn.Module):
    """Weights in the HF assistant layout (names as the converter reads them):
    encoder.fc, encoder.output_norm_enc, model.layers.{i}.(input_layernorm,
    self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
    mlp.{gate,up,down}_proj), model.norm. The token embedding and the output
    matrix are the target's (frozen buffers)."""

    def __init__(self, cfg, tok_embd, output):
        super().__init__()
        self.cfg = cfg
        E, Hq, Hk, hd, Fd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
            cfg["head_dim"], cfg["intermediate_size"]
        n_t = len(cfg["target_layer_ids"])
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(n_t * cfg["target_hidden_size"], E)
        self.enc_norm = torch.nn.Parameter(torch.ones(E))
        self.layers = torch.nn.ModuleList()
        for _ in range(cfg["num_hidden_layers"]):
            m = torch.nn.Module()
            m.attn_norm = torch.nn.Parameter(torch.ones(E))
            m.q, m.k, m.v, m.o = lin(E, Hq * hd), lin(E, Hk * hd), lin(E, Hk * hd), lin(Hq * hd, E)
            m.q_norm, m.k_norm = torch.nn.Parameter(torch.ones(hd)), torch.nn.Parameter(torch.ones(hd))
            m.ffn_norm = torch.nn.Parameter(torch.ones(E))
            m.gate, m.up, m.down = lin(E, Fd), lin(E, Fd), lin(Fd, E)
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(E))
        self.register_buffer("tok_embd", tok_embd, persistent=False)
        self.register_buffer("output", output, persistent=False)

    def forward(self, feat, ctx_pos, blk_tok, blk_pos, ctx_vis, blk_vis):
        """feat [C, n_feat] context features at positions ctx_pos [C];
        blk_tok, blk_pos [N] the blocks' tokens and positions; ctx_vis [N, C]
        and blk_vis [N, N] which keys each block row sees. -> logits [N, V]."""
        c = self.cfg
        eps, hd, Hq, Hk, base = c["rms_norm_eps"], c["head_dim"], c["num_attention_heads"], \
            c["num_key_value_heads"], c["rope_theta"]
        g = rms(self.fc(feat), self.enc_norm, eps)
        x = self.tok_embd[blk_tok]
        N, C = blk_tok.shape[0], feat.shape[0]
        mask = torch.cat((ctx_vis, blk_vis), dim=1)  # [N, C + N]
        for m in self.layers:
            kc = rope_neox(rms(m.k(g).view(C, Hk, hd), m.k_norm, eps), ctx_pos, base)
            vc = m.v(g).view(C, Hk, hd)
            a = rms(x, m.attn_norm, eps)
            q = rope_neox(rms(m.q(a).view(N, Hq, hd), m.q_norm, eps), blk_pos, base)
            kb = rope_neox(rms(m.k(a).view(N, Hk, hd), m.k_norm, eps), blk_pos, base)
            vb = m.v(a).view(N, Hk, hd)
            k = torch.cat((kc, kb), 0).repeat_interleave(Hq // Hk, dim=1)
            v = torch.cat((vc, vb), 0).repeat_interleave(Hq // Hk, dim=1)
            att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
            att = att.masked_fill(~mask[None], float("-inf")).softmax(-1)
            o = torch.einsum("hqk,khd->qhd", att, v).reshape(N, Hq * hd)
            x = x + m.o(o)
            a = rms(x, m.ffn_norm, eps)
            x = x + m.down(F.silu(m.gate(a)) * m.up(a))
        return rms(x, self.norm, eps) @ self.output.T

    def forward_windows(self, feat, anchors, blk_tok):
        """The same function as forward, batched per window (training):
        feat [S, L, n_feat] the context features of S windows at positions
        0..L-1; anchors [S, nb] the position of each block's first row (a
        block sees the context rows before it and itself); blk_tok [S, nb*B]
        the blocks' tokens. -> hidden rows after the final norm [S, nb*B, E]
        (the caller applies the output matrix to the rows it needs)."""
        c = self.cfg
        eps, hd, Hq, Hk, base = c["rms_norm_eps"], c["head_dim"], c["num_attention_heads"], \
            c["num_key_value_heads"], c["rope_theta"]
        S, L, _ = feat.shape
        nb, M = anchors.shape[1], blk_tok.shape[1]
        B = M // nb
        dev = feat.device
        blk_pos = (anchors[:, :, None] + torch.arange(B, device=dev)).reshape(S, M)
        ctx_pos = torch.arange(L, device=dev)
        bid = torch.arange(M, device=dev) // B
        ctx_vis = ctx_pos[None, None, :] < anchors.repeat_interleave(B, dim=1)[:, :, None]  # [S, M, L]
        blk_vis = (bid[:, None] == bid[None, :]).expand(S, M, M)
        mask = torch.cat((ctx_vis, blk_vis), dim=2)[:, None]  # [S, 1, M, L + M]
        g = rms(self.fc(feat), self.enc_norm, eps)
        x = self.tok_embd[blk_tok]
        for m in self.layers:
            kc = rope_neox(rms(m.k(g).view(S, L, Hk, hd), m.k_norm, eps), ctx_pos, base)
            vc = m.v(g).view(S, L, Hk, hd)
            a = rms(x, m.attn_norm, eps)
            q = rope_neox(rms(m.q(a).view(S, M, Hq, hd), m.q_norm, eps), blk_pos, base)
            kb = rope_neox(rms(m.k(a).view(S, M, Hk, hd), m.k_norm, eps), blk_pos, base)
            vb = m.v(a).view(S, M, Hk, hd)
            k = torch.cat((kc, kb), 1).transpose(1, 2)
            v = torch.cat((vc, vb), 1).transpose(1, 2)
            o = attend(q.transpose(1, 2), k.to(q.dtype), v.to(q.dtype), mask, 1.0 / math.sqrt(hd))
            x = x + m.o(o.transpose(1, 2).reshape(S, M, Hq * hd))
            a = rms(x, m.ffn_norm, eps)
            x = x + m.down(F.silu(m.gate(a)) * m.up(a))
        return rms(x, self.norm, eps)

    # ---- the HF-layout checkpoint (what the converter reads)

    def hf_state(self):
        s = {"encoder.fc.weight": self.fc.weight, "encoder.output_norm_enc.weight": self.enc_norm,
             "model.norm.weight": self.norm}
        for i, m in enumerate(self.layers):
            p = "model.layers.%d." % i
            s.update({p + "input_layernorm.weight": m.attn_norm, p + "self_attn.q_proj.weight": m.q.weight,
                      p + "self_attn.k_proj.weight": m.k.weight, p + "self_attn.v_proj.weight": m.v.weight,
                      p + "self_attn.o_proj.weight": m.o.weight, p + "self_attn.q_norm.weight": m.q_norm,
                      p + "self_attn.k_norm.weight": m.k_norm, p + "post_attention_layernorm.weight": m.ffn_norm,
                      p + "mlp.gate_proj.weight": m.gate.weight, p + "mlp.up_proj.weight": m.up.weight,
                      p + "mlp.down_proj.weight": m.down.weight})
        return {k: v.detach().float().cpu().contiguous() for k, v in s.items()}

    def save_hf(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        cfg = dict(self.cfg)
        cfg.update(architectures=["MuseGlimmerAssistantModel"], model_type="muse_glimmer_assistant",
                   hidden_act="silu")
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        save_safetensors(os.path.join(out_dir, "model.safetensors"), self.hf_state())


def new_config(target, n_layer=1, block_size=16, target_layers=None, n_ff=None):
    """A drafter configuration for target (a Target): the target's width and
    heads; target_layers are llama.cpp's ids (inputs of those layers); the
    HF config stores them as outputs of the layer before (id - 1)."""
    if target_layers is None:
        n_t = 3 if target.n_layer >= 4 else target.n_layer
        target_layers = [1 + round(k * (target.n_layer - 2) / (n_t - 1)) for k in range(n_t)] if n_t > 1 else [1]
    return dict(hidden_size=target.n_embd, target_hidden_size=target.n_embd, num_hidden_layers=n_layer,
                intermediate_size=n_ff or target.n_ff,
                num_attention_heads=target.n_head, num_key_value_heads=target.n_head_kv, head_dim=target.hd,
                rms_norm_eps=target.eps, rope_theta=10000.0, max_position_embeddings=4096,
                block_size=block_size, target_layer_ids=[int(i) - 1 for i in target_layers],
                mask_token_id=int(target.mask_id if target.mask_id is not None else target.n_vocab - 1),
                vocab_size=int(target.n_vocab))


# ---------------------------------------------------------------- safetensors (F32 only)


def save_safetensors(path, tensors):
    head, off, blobs = {}, 0, []
    for k, t in tensors.items():
        b = t.numpy().astype(np.float32).tobytes()
        head[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """{name: (dtype, shape, bytes)} of a .safetensors file (any dtype)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    head = json.loads(buf[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], buf[8 + n + a:8 + n + b])
    return out


def drafter_from_gguf(path, target):
    """A Drafter with the weights of a `dflash` GGUF (the token embedding and
    output matrix from the GGUF when it has them, else the target's)."""
    r = gguf.Reader(path)
    kv = r.kv
    g = lambda k, d=None: kv.get("dflash." + k, d)  # noqa: E731
    E, H = g("embedding_length"), g("attention.head_count")
    tl = list(g("target_layers"))
    cfg = dict(hidden_size=E, target_hidden_size=target.n_embd, num_hidden_layers=g("block_count"),
               intermediate_size=g("feed_forward_length"), num_attention_heads=H,
               num_key_value_heads=g("attention.head_count_kv", H), head_dim=g("attention.key_length", E // H),
               rms_norm_eps=g("attention.layer_norm_rms_epsilon"), rope_theta=g("rope.freq_base", 10000.0),
               block_size=g("block_size", 16), target_layer_ids=[i - 1 for i in tl],
               mask_token_id=kv["tokenizer.ggml.mask_token_id"], vocab_size=target.n_vocab)
    T = lambda n: gguf_tensor(r, n)  # noqa: E731
    emb = T("token_embd.weight") if "token_embd.weight" in r.tensors else target.tok_embd
    out = T("output.weight") if "output.weight" in r.tensors else (
        emb if "token_embd.weight" in r.tensors else target.output)
    d = Drafter(cfg, emb, out)
    with torch.no_grad():
        d.fc.weight.copy_(T("fc.weight"))
        d.enc_norm.copy_(T("enc.output_norm.weight"))
        d.norm.copy_(T("output_norm.weight"))
        for il, m in enumerate(d.layers):
            p = "blk.%d." % il
            m.attn_norm.copy_(T(p + "attn_norm.weight"))
            m.q.weight.copy_(T(p + "attn_q.weight"))
            m.k.weight.copy_(T(p + "attn_k.weight"))
            m.v.weight.copy_(T(p + "attn_v.weight"))
            m.o.weight.copy_(T(p + "attn_output.weight"))
            m.q_norm.copy_(T(p + "attn_q_norm.weight"))
            m.k_norm.copy_(T(p + "attn_k_norm.weight"))
            m.ffn_norm.copy_(T(p + "ffn_norm.weight"))
            m.gate.weight.copy_(T(p + "ffn_gate.weight"))
            m.up.weight.copy_(T(p + "ffn_up.weight"))
            m.down.weight.copy_(T(p + "ffn_down.weight"))
    return d, tl


@torch.no_grad()
def draft_block(d, feat, n_ctx, last, n_draft):
    """What muser's mu_draft_seq_draft computes: the block [last, mask x
    n_draft] at positions n_ctx.., over context rows 0..n_ctx-1 (feat
    [n_ctx, n_feat]); returns the logits of rows 1..n_draft."""
    B = n_draft + 1
    tok = torch.tensor([last] + [d.cfg["mask_token_id"]] * n_draft)
    pos = torch.arange(n_ctx, n_ctx + B)
    ctx_pos = torch.arange(n_ctx)
    lg = d(feat[:n_ctx], ctx_pos, tok, pos, torch.ones(B, n_ctx, dtype=torch.bool), torch.ones(B, B, dtype=torch.bool))
    return lg[1:]


def test_features(n, n_feat):
    """The features both this module and tests/unit/test_dflash.c make:
    feat[p][i] = 2 sin(0.37 p + 0.011 i (i % 7 + 1)), in double, then float."""
    p = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(n_feat, dtype=np.float64)[None, :]
    return torch.from_numpy((2.0 * np.sin(0.37 * p + 0.011 * i * (i % 7 + 1))).astype(np.float32))
