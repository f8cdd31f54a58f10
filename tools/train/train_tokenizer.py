#!/usr/bin/env python3
"""Trains the default model's byte-level BPE tokenizer with Hugging Face
`tokenizers` and writes a transformers tokenizer directory.

- Pre-tokenizer: the llama4 / GPT-4o split regex (docs/default-model.md and
  muse-glimmer.md section 4), then byte-level mapping without prefix space,
  exactly what llama.cpp's `llama4` pre-tokenizer does.
- Vocabulary: VOCAB-len(SPECIALS) merged tokens, then the Muse special tokens
  appended at the end (the real model also keeps them above the text vocab).
- BOS is added by the post-processor (add_bos_token = true in the GGUF).
usage: train_tokenizer.py CORPUS_DIR OUT_DIR [VOCAB]
"""
import json, lzma, os, sys
from tokenizers import Tokenizer, Regex, decoders, models, pre_tokenizers, processors, trainers

LLAMA4_REGEX = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
                r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>", "<|eot|>",
            "<|eom|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|mask|>"]

# Simplified Muse chat template: same turn format as the real one
# (<|start|>{role}<|message|>{content}<|eot|>, generation prompt
# "<|start|>assistant"), no default system block, no tools, no reasoning.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|start|>assistant to=user<|message|>{{ m['content'] }}<|eot|>"
    "{% else %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|eot|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}")


def texts(corpus_dir):
    with lzma.open(os.path.join(corpus_dir, "corpus-train.jsonl.xz"), "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if not d["src"].startswith("chat:"):
                yield d["text"]


def main():
    corpus_dir, out_dir = sys.argv[1], sys.argv[2]
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA4_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(texts(corpus_dir), trainer=trainer)
    n_text = tok.get_vocab_size()
    assert n_text == vocab - len(SPECIALS), f"trainer produced {n_text} tokens"
    tok.add_special_tokens(SPECIALS)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    os.makedirs(out_dir, exist_ok=True)
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                 eos_token="<|end_of_text|>", pad_token="<|end_of_text|>",
                                 mask_token="<|mask|>")
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(out_dir)
    # transformers may store the template in chat_template.jinja; keep both forms.
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = True
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    print("tokenizer:", tok.get_vocab_size(), "tokens; specials", ids)
    print("sample:", tok.encode("Hello world! def f(x): return x**2  # 12345").tokens)


if __name__ == "__main__":
    main()
