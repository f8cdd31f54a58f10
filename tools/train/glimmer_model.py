"""Shared by the device scripts: the transformers MuseGlimmer configuration of
muser's default model (and of the tiny random converter-test model), built with
the model classes transformers itself ships (MuseGlimmerForConditionalGeneration).

The vision tower is kept only because the checkpoint class requires one: it is
given a token-sized geometry and is not trained or converted.
"""
import torch
from transformers import MuseGlimmerConfig, MuseGlimmerForConditionalGeneration

# muser-default geometry (same family as the 30B: 3 sliding + 1 NoPE full layer
# per group of 4, attention width 512 != hidden 384, GQA 8/2, head_dim 64).
DEFAULT = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
               num_attention_heads=8, num_key_value_heads=2, head_dim=64,
               max_position_embeddings=2048, sliding_window=256, rope_theta=10000.0,
               qk_scale_factor=3.87, final_logit_softcapping=20.0)
# converter test model: tiny, window 8 so that sliding matters on short prompts.
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            max_position_embeddings=512, sliding_window=8, rope_theta=10000.0,
            qk_scale_factor=3.87, final_logit_softcapping=20.0)


def make_config(geo, tok):
    """geo: a geometry dict above; tok: a transformers tokenizer (ids of specials)."""
    sid = tok.convert_tokens_to_ids
    text = dict(vocab_size=len(tok), hidden_size=geo["hidden_size"],
                intermediate_size=geo["intermediate_size"],
                num_hidden_layers=geo["num_hidden_layers"],
                num_attention_heads=geo["num_attention_heads"],
                num_key_value_heads=geo["num_key_value_heads"], head_dim=geo["head_dim"],
                max_position_embeddings=geo["max_position_embeddings"],
                sliding_window=geo["sliding_window"],
                rope_parameters={"rope_type": "default", "rope_theta": geo["rope_theta"]},
                rms_norm_eps=1e-5, post_norm_eps=1e-8,
                qk_scale_factor=geo["qk_scale_factor"],
                output_multiplier=(geo["hidden_size"] / 256) ** -0.5,
                final_logit_softcapping=geo["final_logit_softcapping"],
                bos_token_id=sid("<|begin_of_text|>"), eos_token_id=sid("<|end_of_text|>"),
                pad_token_id=None, tie_word_embeddings=False)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, pos_emb_height=4, pos_emb_width=4)
    patch = sid("<|patch|>")
    kw = dict(text_config=text, vision_config=vision, out_hidden_size=32 * 4,
              projector_hidden_size=64, image_token_id=patch, video_token_id=patch)
    try:
        return MuseGlimmerConfig(tie_word_embeddings=False, **kw)
    except TypeError:
        return MuseGlimmerConfig(**kw)


def make_model(config, norm_init=None):
    """Builds the model and sets the norm weights explicitly: centered (1+w)
    layer norms start at w=0, the final (plain) norm at 1. norm_init=std adds
    noise to both, for converter tests that must see the +1 folding."""
    model = MuseGlimmerForConditionalGeneration(config)
    lm = model.model.language_model
    emb = lm.embed_tokens.weight
    if model.lm_head.weight.data_ptr() == emb.data_ptr():  # keep the output matrix untied
        model.lm_head.weight = torch.nn.Parameter(emb.detach().clone())
    with torch.no_grad():
        for name, mod in lm.named_modules():
            cls = type(mod).__name__
            if cls == "MuseGlimmerTextCenteredRMSNorm":
                mod.weight.zero_()
                if norm_init:
                    mod.weight.normal_(0.0, norm_init)
            elif cls == "MuseGlimmerRMSNorm" and getattr(mod, "with_scale", False):
                mod.weight.fill_(1.0)
                if norm_init:
                    mod.weight.add_(torch.randn_like(mod.weight) * norm_init)
    return model


def text_params(model):
    return sum(p.numel() for n, p in model.named_parameters()
               if not n.startswith(("model.vision_tower", "model.vision_adapter", "model.vision_projection")))
