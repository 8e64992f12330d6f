#!/usr/bin/env python3
"""Golden fixtures for pelican's Llama-family tests, made with Hugging Face transformers.

Runs on the GPU machine (it has torch + transformers; no downloads needed, everything is random-init):

    python3 tools/golden/make_golden.py --out /tmp/golden && tar -C /tmp -cf golden.tar golden

For each architecture variant it writes tests/golden/<name>/:
  config.json, model.safetensors (f32), generation_config.json   the HF model folder
  tokenizer.json, tokenizer_config.json                          a 512-token byte-level BPE trained here
  reference.safetensors   tokens_a [Ta] i32, logits_a [Ta, V] f32, tokens_b [Tb] i32, logits_b [Tb, V] f32,
                          greedy_prompt [P] i32, greedy_tokens [32] i32
  reference.json          the same token lists + greedy text, versions, seed
Reference logits are computed in float64 on the CPU (then stored as f32), so they are the exact function of
the stored f32 weights up to f32 storage rounding; greedy continuations come from model.generate in float64.
"""
import argparse
import glob
import json
import os
import random

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 1234
VOCAB = 512

# hidden 64, GQA 4 query heads / 2 KV heads everywhere; each variant adds what makes its architecture differ.
BASE = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
            vocab_size=VOCAB, tie_word_embeddings=False, initializer_range=0.1,
            bos_token_id=1, eos_token_id=2, pad_token_id=None)

VARIANTS = {
    "llama": dict(model_type="llama"),
    "llama-rope-llama3": dict(model_type="llama", num_hidden_layers=3,
                              rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0, original_max_position_embeddings=64)),
    "llama-rope-yarn": dict(model_type="llama",
                            max_position_embeddings=128,
                            rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32)),
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True, rope_theta=1000000.0),
    "qwen3": dict(model_type="qwen3", head_dim=32, num_hidden_layers=3),
    "mistral": dict(model_type="mistral", sliding_window=None),
    "granite": dict(model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22,
                    attention_multiplier=0.0625, logits_scaling=8.0),
}

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

GREEDY_PROMPT = "def forward(self, hidden_states):\n    "


def train_tokenizer(out_dir):
    """A small byte-level BPE (256 bytes + specials + merges = 512) trained on transformers' own sources."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(transformers.__file__), "models", "llama", "*.py")))
    files += sorted(glob.glob(os.path.join(os.path.dirname(transformers.__file__), "models", "qwen2", "*.py")))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    cfg = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", add_bos_token=False, add_eos_token=False,
               clean_up_tokenization_spaces=False, model_max_length=256, chat_template=CHATML,
               tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return tok


def perturb(model, gen):
    """Random norm weights and biases, so a wrong norm/bias wiring changes the logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))


def make_variant(index, name, overrides, out_root, tok_dir, tok):
    seed = SEED + index  # a different seed per variant, so no two fixtures share weights
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg_dict = dict(BASE)
    cfg_dict.update(overrides)
    model_type = cfg_dict.pop("model_type")
    if int(transformers.__version__.split(".")[0]) >= 5:
        # transformers 5 keeps rope settings in rope_parameters (theta included).
        rope = dict(cfg_dict.pop("rope_scaling", None) or {"rope_type": "default"})
        rope["rope_theta"] = cfg_dict.pop("rope_theta")
        cfg_dict["rope_parameters"] = rope
    config = transformers.AutoConfig.for_model(model_type, **cfg_dict)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.float32)
    perturb(model, gen)
    model.eval()

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, f), "rb") as src, open(os.path.join(out, f), "wb") as dst:
            dst.write(src.read())

    rng = random.Random(seed)
    tokens_a = [rng.randrange(5, VOCAB) for _ in range(40)]
    tokens_b = [rng.randrange(5, VOCAB) for _ in range(17)]
    m64 = model.to(torch.float64)
    with torch.no_grad():
        la = m64(torch.tensor([tokens_a])).logits[0].to(torch.float32)
        lb = m64(torch.tensor([tokens_b])).logits[0].to(torch.float32)
        prompt = tok.encode(GREEDY_PROMPT).ids
        g = m64.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False, min_new_tokens=32,
                         eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    save_file({
        "tokens_a": torch.tensor(tokens_a, dtype=torch.int32), "logits_a": la.contiguous(),
        "tokens_b": torch.tensor(tokens_b, dtype=torch.int32), "logits_b": lb.contiguous(),
        "greedy_prompt": torch.tensor(prompt, dtype=torch.int32), "greedy_tokens": torch.tensor(g, dtype=torch.int32),
    }, os.path.join(out, "reference.safetensors"))
    meta = dict(variant=name, model_type=model_type, seed=seed, torch=torch.__version__,
                transformers=transformers.__version__, tokens_a=tokens_a, tokens_b=tokens_b,
                greedy_prompt_text=GREEDY_PROMPT, greedy_prompt=prompt, greedy_tokens=g,
                greedy_text=tok.decode(g), n_params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print(f"{name:20s} params {meta['n_params']:8d}  greedy: {meta['greedy_text']!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    tok_dir = os.path.join(args.out, "_tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tok = train_tokenizer(tok_dir)
    for index, (name, overrides) in enumerate(VARIANTS.items()):
        make_variant(index, name, overrides, args.out, tok_dir, tok)


if __name__ == "__main__":
    main()
