#!/usr/bin/env python3
"""Golden fixtures for pelican's model tests, made with Hugging Face transformers.

Runs on the GPU machine (it has torch + transformers; no downloads needed, everything is random-init):

    python3 tools/golden/make_golden.py --out /tmp/golden && tar -C /tmp -cf golden.tar golden
    python3 tools/golden/make_golden.py --out /tmp/golden --only qwen3_5_moe,qwen3_5   # just those

--only takes variant names (comma-separated) from VARIANTS and HYBRID_VARIANTS; --out defaults to
tests/golden of this checkout. The hybrid Qwen3.5 variants (Gated DeltaNet + gated attention, MoE or
dense MLP) go to <out>/hybrid/<name>/ (see make_hybrid_variant for their extra reference tensors);
they reuse the tokenizer of the committed tests/golden/qwen3 fixture when it is there (so nothing else
changes), else the one trained here.

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
import inspect
import json
import os
import random
import shutil
import sys
import types

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


# ---- hybrid Qwen3.5 (Gated DeltaNet + gated full attention; MoE or dense MLP) ------------------------

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# 4 layers with full_attention_interval 4: layers 0-2 are Gated DeltaNet, layer 3 gated full attention.
# head_dim 64 with partial rotary 0.25 (16 rotated dims, mrope_section sums to 8 as in real configs);
# linear heads 2 key / 4 value of 16; MoE: 8 experts top-2 (width 32) + a shared expert of a different
# width (48), so a swapped expert/shared size changes the shapes.
HYBRID_BASE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6,
                   hidden_act="silu", tie_word_embeddings=False, initializer_range=0.1,
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                   linear_value_head_dim=16, linear_conv_kernel_dim=4,
                   layer_types=["linear_attention"] * 3 + ["full_attention"],
                   rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                                        mrope_section=[3, 3, 2], mrope_interleaved=True),
                   bos_token_id=1, eos_token_id=2, pad_token_id=None)

HYBRID_VARIANTS = {
    "qwen3_5_moe": dict(text_model_type="qwen3_5_moe_text",
                        config_classes=("Qwen3_5MoeTextConfig",),
                        model_classes=("Qwen3_5MoeForCausalLM",),
                        overrides=dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                       shared_expert_intermediate_size=48)),
    "qwen3_5": dict(text_model_type="qwen3_5_text",
                    config_classes=("Qwen3_5TextConfig",),
                    model_classes=("Qwen3_5ForCausalLM",),
                    overrides=dict(intermediate_size=96)),
    # Qwen3-Next: the same stack with fused, per-key-head-grouped DeltaNet projections (in_proj_qkvz,
    # in_proj_ba) and per-expert modules; no mrope.
    "qwen3_next": dict(text_model_type="qwen3_next",
                       config_classes=("Qwen3NextConfig",),
                       model_classes=("Qwen3NextForCausalLM",),
                       overrides=dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                      shared_expert_intermediate_size=48, norm_topk_prob=True,
                                      decoder_sparse_step=1, mlp_only_layers=[],
                                      rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                                           partial_rotary_factor=0.25))),
}

# A prompt of well over 100 tokens of this 512-token vocabulary, so the chunked (64-token) prefill
# crosses a chunk boundary before the 32 greedy decode steps run the recurrent path.
HYBRID_PROMPT = (
    "class GatedDeltaNet(nn.Module):\n"
    "    def __init__(self, config, layer_idx):\n"
    "        super().__init__()\n"
    "        self.hidden_size = config.hidden_size\n"
    "        self.num_heads = config.num_attention_heads\n"
    "        self.head_dim = config.head_dim\n"
    "        self.layer_idx = layer_idx\n"
    "        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)\n"
    "        self.k_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)\n"
    "    def forward(self, hidden_states, attention_mask=None, position_ids=None):\n"
    "        batch_size, seq_len, _ = hidden_states.shape\n"
    "        query_states = self.q_proj(hidden_states)\n"
    "        key_states = self.k_proj(hidden_states)\n"
    "        return "
)


def find_class(names, what):
    """The first of `names` that this transformers has; a clear error listing what it has otherwise."""
    for n in names:
        cls = getattr(transformers, n, None)
        if cls is not None:
            return cls
    have = sorted(a for a in dir(transformers) if a.lower().startswith("qwen3_5") or a.lower().startswith("qwen3next"))
    print(f"make_golden.py: none of {list(names)} ({what}) in transformers {transformers.__version__}; "
          f"Qwen3.5-related names it has: {have}", file=sys.stderr)
    return None


def build_hybrid_model(spec):
    cfg_dict = dict(HYBRID_BASE)
    cfg_dict.update(spec["overrides"])
    config_cls = find_class(spec["config_classes"], "text config class")
    model_cls = find_class(spec["model_classes"], "text-only causal LM class")
    if config_cls is not None:
        config = config_cls(**cfg_dict)
    else:
        print(f"  falling back to AutoConfig.for_model({spec['text_model_type']!r})", file=sys.stderr)
        config = transformers.AutoConfig.for_model(spec["text_model_type"], **cfg_dict)
    config._attn_implementation = "eager"
    request_eager_experts(config)
    if model_cls is not None:
        model = model_cls(config)
    else:
        print("  falling back to AutoModelForCausalLM.from_config", file=sys.stderr)
        model = transformers.AutoModelForCausalLM.from_config(config)
    if list(config.layer_types) != HYBRID_BASE["layer_types"]:
        raise SystemExit(f"make_golden.py: layer_types came out as {config.layer_types}")
    select_eager_experts(model)
    return config, model.to(torch.float32)


# ---- float64 safety: MoE experts and the DeltaNet kernels ---------------------------------------------
#
# transformers 5.x picks the routed-experts backend from config._experts_implementation (a property on
# PreTrainedConfig whose setter also reaches the sub-configs); PreTrainedModel.__init__ replaces None by
# "grouped_mm", and the @use_experts_implementation forward reads self.config._experts_implementation at
# every call ("eager" = the module's own per-expert loop). grouped_mm (torch.nn.functional.grouped_mm) only
# takes f32/bf16/f16, so float64 references need "eager": ask for it on the config before the model is built,
# then through model.set_experts_implementation("eager"), then on each experts module's config; finally
# probe every experts module in float64 against an explicit loop and, if it fails or disagrees, replace its
# forward by that loop. The shared expert (a plain gate/up/down MLP of nn.Linear) and the dense MLP are
# not experts modules and are left alone.

EXPERTS_IMPL = "eager"


def _config_tree(config):
    """config and its sub-configs (text_config etc., where it has any)."""
    out, todo = [], [config]
    while todo:
        c = todo.pop()
        if c is None or any(c is o for o in out):
            continue
        out.append(c)
        for key in (getattr(c, "sub_configs", None) or {}):
            todo.append(getattr(c, key, None))
    return out


def _set_experts_attr(config):
    """Set _experts_implementation = "eager" on one config, through the property where there is one."""
    try:
        config._experts_implementation = EXPERTS_IMPL
    except Exception as e:  # noqa: BLE001 - fall through to the internal attribute
        print(f"  config._experts_implementation: {type(e).__name__}: {e}", file=sys.stderr)
    if getattr(config, "_experts_implementation", None) != EXPERTS_IMPL:
        try:
            config._experts_implementation_internal = EXPERTS_IMPL
        except Exception:  # noqa: BLE001
            pass
    return getattr(config, "_experts_implementation", None) == EXPERTS_IMPL


def _knows_experts_attr(config):
    """Whether this transformers has the attribute (5.x: a property on the config class). Not set
    elsewhere: an unknown attribute could end up in config.json."""
    return isinstance(getattr(type(config), "_experts_implementation", None), property) \
        or hasattr(config, "_experts_implementation")


def request_eager_experts(config):
    for c in _config_tree(config):
        if _knows_experts_attr(c):
            _set_experts_attr(c)


def experts_modules(model):
    """(name, module) of the routed-experts modules: 3-D gate_up_proj / down_proj parameters. The shared
    expert and dense MLPs hold nn.Linear submodules under those names, so they never match."""
    found = []
    for name, m in model.named_modules():
        gu, dn = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
        if isinstance(gu, torch.nn.Parameter) and isinstance(dn, torch.nn.Parameter) and gu.dim() == 3 \
                and dn.dim() == 3:
            found.append((name, m))
    return found


def select_eager_experts(model):
    """After the model is built: the documented switch, then each experts module's own config."""
    if not experts_modules(model):
        return
    setter = getattr(model, "set_experts_implementation", None)
    if callable(setter):
        try:
            setter(EXPERTS_IMPL)
        except Exception as e:  # noqa: BLE001 - the per-module config below still applies
            print(f"  set_experts_implementation({EXPERTS_IMPL!r}): {type(e).__name__}: {e}", file=sys.stderr)
    request_eager_experts(model.config)
    for name, m in experts_modules(model):
        cfg = getattr(m, "config", None)
        if cfg is not None and _knows_experts_attr(cfg) \
                and getattr(cfg, "_experts_implementation", None) != EXPERTS_IMPL:
            _set_experts_attr(cfg)


def experts_reference_forward(self, hidden_states, top_k_index, top_k_weights, **kwargs):
    """The eager experts computation, spelled out in float64: for each token, for each selected expert e,
    down_e(act(gate_e(x)) * up_e(x)) times its routing weight, summed over the selected experts."""
    f64 = torch.float64
    gate_up, down = self.gate_up_proj, self.down_proj
    num_experts = gate_up.shape[0]
    transposed = bool(getattr(self, "is_transposed", False))  # [E, in, out] instead of [E, out, in]
    has_bias = bool(getattr(self, "has_bias", False))
    gate_up_bias = getattr(self, "gate_up_proj_bias", None) if has_bias else None
    down_bias = getattr(self, "down_proj_bias", None) if has_bias else None
    # routing weights per selected slot [T, K] (Qwen style) or per expert [T, E] (DeepSeek style)
    per_expert = tuple(top_k_weights.shape) != tuple(top_k_index.shape) and top_k_weights.shape[-1] == num_experts
    x_all = hidden_states.to(f64)
    out = torch.zeros(x_all.shape, dtype=f64, device=hidden_states.device)
    for t in range(x_all.shape[0]):
        x = x_all[t]
        for k in range(top_k_index.shape[-1]):
            e = int(top_k_index[t, k])
            if e < 0 or e >= num_experts:  # expert-parallel sentinel: not on this rank
                continue
            w_gu, w_d = gate_up[e].to(f64), down[e].to(f64)
            gu = x @ w_gu if transposed else w_gu @ x
            if gate_up_bias is not None:
                gu = gu + gate_up_bias[e].to(f64)
            if hasattr(self, "_apply_gate"):  # transformers' default is chunk(2) -> act(gate) * up
                h = self._apply_gate(gu.unsqueeze(0)).squeeze(0)
            else:
                gate, up = gu.chunk(2, dim=-1)
                h = self.act_fn(gate) * up
            y = h @ w_d if transposed else w_d @ h
            if down_bias is not None:
                y = y + down_bias[e].to(f64)
            w = top_k_weights[t, e] if per_expert else top_k_weights[t, k]
            out[t] += y * w.to(f64)
    return out.to(hidden_states.dtype)


def ensure_float64_experts(model):
    """Call on the float64 model. Probes each experts module with random float64 routing and returns a
    description of the implementation that will run (for reference.json)."""
    mods = experts_modules(model)
    if not mods:
        return "none (dense MLP, no routed experts)"
    gen = torch.Generator().manual_seed(0)  # private: leaves the global RNG alone
    impls, patched = set(), []
    for name, m in mods:
        cfg = getattr(m, "config", None)
        impls.add(str(getattr(cfg, "_experts_implementation", None)) if cfg is not None else "n/a")
        num_experts = m.gate_up_proj.shape[0]
        hidden = m.gate_up_proj.shape[1] if getattr(m, "is_transposed", False) else m.gate_up_proj.shape[2]
        top_k = min(2, num_experts)
        tokens = 7
        x = torch.randn(tokens, hidden, generator=gen, dtype=torch.float64)
        idx = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(tokens)])
        w = torch.rand(tokens, top_k, generator=gen, dtype=torch.float64) + 0.1
        w = w / w.sum(-1, keepdim=True)
        with torch.no_grad():
            ref = experts_reference_forward(m, x, idx, w)
            why = None
            try:
                got = m(x, idx, w)
                if got.dtype != torch.float64:
                    why = f"returned {got.dtype}"
                else:
                    rel = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()
                    if not rel <= 1e-10:
                        why = f"differs from the explicit loop by {rel:.1e} (relative)"
            except Exception as e:  # noqa: BLE001 - e.g. grouped_mm refusing float64
                why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if why is not None:
            print(f"  experts {name}: {why}; using the explicit float64 loop", file=sys.stderr)
            m.forward = types.MethodType(experts_reference_forward, m)
            patched.append(name)
    if patched:
        return (f"explicit float64 per-expert loop (make_golden.experts_reference_forward) on {len(patched)} of "
                f"{len(mods)} experts modules; config._experts_implementation was {sorted(impls)}")
    return f"{'/'.join(sorted(impls))} (transformers experts forward, float64-checked on {len(mods)} modules)"


# The Gated DeltaNet / causal-conv kernels are bound when transformers imports the modeling file: the FLA
# (flash-linear-attention) or causal-conv1d package when importable (Triton/CUDA, no float64 on the CPU),
# else the torch reference functions. The torch ones take float64 (the delta rule runs in fp32 inside and
# casts back; the convolutions run in the weight dtype), so rebind the module globals to the torch functions
# (functools.wraps keeps them as __wrapped__), whatever was bound.
LINEAR_ATTN_FUNCS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
                     "causal_conv1d_fn", "causal_conv1d_update")


def _torch_only(fn):
    params = inspect.signature(fn).parameters
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn
    names = set(params)

    def call(*args, **kwargs):  # drop what the torch function does not take, as transformers' wrapper does
        return fn(*args, **{k: v for k, v in kwargs.items() if k in names})
    call.__name__, call.__module__, call.__wrapped__ = fn.__name__, fn.__module__, fn
    return call


def _bound_implementation(fn):
    """The implementation transformers' hub/fallback wrapper bound (None where it cannot be told)."""
    f = fn
    for _ in range(8):
        try:
            impl = inspect.getclosurevars(f).nonlocals.get("implementation")
        except Exception:  # noqa: BLE001 - not a plain Python function
            impl = None
        if impl is not None:
            return impl
        f = getattr(f, "__wrapped__", None)
        if f is None:
            return None
    return None


def force_torch_linear_attention(model):
    """Rebind the DeltaNet kernel functions of the model's modeling module(s) to their torch versions;
    returns {function: what runs} for reference.json."""
    report = {}
    modnames = {type(m).__module__ for m in model.modules()
                if type(m).__name__.endswith("GatedDeltaNet") or hasattr(m, "A_log")}
    for modname in sorted(modnames):
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        short = modname.rsplit(".", 1)[-1]
        for fname in LINEAR_ATTN_FUNCS:
            fn = getattr(mod, fname, None)
            if not callable(fn):
                continue
            inner = inspect.unwrap(fn)
            bound = _bound_implementation(fn)
            was = "" if bound is None or bound is inner else \
                f" (was {getattr(bound, '__module__', '?')}.{getattr(bound, '__name__', repr(bound))})"
            if inner is fn:
                report[f"{short}.{fname}"] = "torch reference"
            elif inspect.isfunction(inner) and inner.__module__ == modname and inner.__name__ == fname:
                setattr(mod, fname, _torch_only(inner))
                report[f"{short}.{fname}"] = "torch reference" + was
            else:
                report[f"{short}.{fname}"] = f"left as is: {getattr(inner, '__module__', '?')}.{fname}{was}"
                print(f"  {modname}.{fname}: cannot find its torch version; left as is", file=sys.stderr)
        # Older transformers kept the chosen kernels on each DeltaNet instance instead.
        for m in model.modules():
            if type(m).__module__ != modname:
                continue
            for attr in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                         "recurrent_gated_delta_rule"):
                v = m.__dict__.get(attr)
                if not callable(v) or (getattr(v, "__module__", "") or "").startswith("transformers"):
                    continue
                torch_fn = getattr(mod, "torch_" + attr, None)
                if callable(torch_fn):
                    setattr(m, attr, torch_fn)
                    report[f"{short}.<instance>.{attr}"] = f"torch_{attr} (was {v.__module__})"
                elif attr == "causal_conv1d_fn":  # None selects the nn.Conv1d path there
                    setattr(m, attr, None)
                    report[f"{short}.<instance>.{attr}"] = f"nn.Conv1d path (was {v.__module__})"
    return report


def perturb_hybrid(model, gen):
    """Random norm weights and gates, so miswired norms, gates or decays change the logits.

    Zero-centred RMSNorms (y = x/rms * (1 + w)) get w ~ 0.2 N(0,1); the gated output norm of the
    DeltaNet (linear_attn.norm, plain weight) gets 1 + 0.2 N(0,1). A_log is set so the per-token decay
    exp(g) stays mostly in (0.3, 1): the recurrent state then carries information across the 64-token
    chunk boundaries instead of forgetting it within a few tokens; dt_bias ~ 0.5 N(0,1).
    """
    def randn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                p.copy_((1.0 + 0.2 * randn(p.shape)).to(p.dtype))
            elif "norm" in name and name.endswith("weight"):
                p.copy_((0.2 * randn(p.shape)).to(p.dtype))
            elif name.endswith("A_log"):
                u = torch.rand(p.shape, generator=gen, dtype=torch.float64)
                p.copy_(torch.log(0.05 + 0.6 * u).to(p.dtype))
            elif name.endswith("dt_bias"):
                p.copy_((0.5 * randn(p.shape)).to(p.dtype))
            elif name.endswith("bias"):
                p.copy_((0.1 * randn(p.shape)).to(p.dtype))


def make_hybrid_variant(seed_index, name, spec, out_root, tok_dir, tok):
    """One hybrid fixture: the HF folder plus reference.safetensors with

      tokens_a [150] i32, logits_a [150, V]   random tokens: the chunked prefill crosses two 64-chunk
                                              boundaries (the C++ test also runs them token by token)
      tokens_b [17] i32, logits_b [17, V]
      greedy_prompt [P >= 100] i32, greedy_prompt_logits [P, V]   full forward over the prompt text
      greedy_tokens [32] i32, greedy_step_logits [32, V]          generate(): step 0 = the prefill's
                                              last row, step i = the logits of decode step i (recurrent path)

    All logits come from the model in float64 on the CPU (transformers runs the DeltaNet kernels,
    norms and router softmax in fp32 inside it), stored as f32. The MoE experts run the eager per-expert
    loop (grouped_mm has no float64) and the DeltaNet kernels their torch versions; reference.json
    records both (experts_implementation, linear_attention_kernels).
    """
    seed = SEED + seed_index
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    try:
        config, model = build_hybrid_model(spec)
    except Exception as e:  # noqa: BLE001 - report which variant and why, then stop
        raise SystemExit(f"make_golden.py: cannot build {name}: {type(e).__name__}: {e}")
    perturb_hybrid(model, gen)
    model.eval()

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(tok_dir, f), os.path.join(out, f))

    rng = random.Random(seed)
    tokens_a = [rng.randrange(5, VOCAB) for _ in range(150)]
    tokens_b = [rng.randrange(5, VOCAB) for _ in range(17)]
    prompt = tok.encode(HYBRID_PROMPT).ids
    if len(prompt) < 100:
        raise SystemExit(f"make_golden.py: the hybrid prompt has only {len(prompt)} tokens (need >= 100)")
    m64 = model.to(torch.float64)
    linear_attn_kernels = force_torch_linear_attention(m64)
    experts_impl = ensure_float64_experts(m64)
    print(f"  experts: {experts_impl}")
    with torch.no_grad():
        la = m64(torch.tensor([tokens_a])).logits[0].to(torch.float32)
        lb = m64(torch.tensor([tokens_b])).logits[0].to(torch.float32)
        lp = m64(torch.tensor([prompt])).logits[0].to(torch.float32)
        gen_out = m64.generate(torch.tensor([prompt]), max_new_tokens=32, min_new_tokens=32, do_sample=False,
                               eos_token_id=None, pad_token_id=0, return_dict_in_generate=True,
                               output_logits=True)
        g = gen_out.sequences[0, len(prompt):].tolist()
        if len(g) != 32:
            raise SystemExit(f"make_golden.py: generate returned {len(g)} tokens, expected 32")
        steps = getattr(gen_out, "logits", None)
        if steps is None:  # older transformers: raw logits are not kept; scores equal them under greedy
            steps = gen_out.scores
        ls = torch.stack([s[0] for s in steps]).to(torch.float32)
        # Sanity: generate's cached path (chunked prefill + recurrent decode) against one full forward
        # over prompt + continuation (chunked only).
        full = m64(torch.tensor([prompt + g[:-1]])).logits[0, len(prompt) - 1:].to(torch.float32)
        cache_diff = ((full - ls).abs().max() / full.abs().max()).item()
        prefill_diff = ((lp[-1] - ls[0]).abs().max() / lp[-1].abs().max()).item()
    if [int(t) for t in ls.argmax(-1).tolist()] != g:
        raise SystemExit(f"make_golden.py: {name}: greedy tokens are not the argmax of the step logits")
    save_file({
        "tokens_a": torch.tensor(tokens_a, dtype=torch.int32), "logits_a": la.contiguous(),
        "tokens_b": torch.tensor(tokens_b, dtype=torch.int32), "logits_b": lb.contiguous(),
        "greedy_prompt": torch.tensor(prompt, dtype=torch.int32), "greedy_prompt_logits": lp.contiguous(),
        "greedy_tokens": torch.tensor(g, dtype=torch.int32), "greedy_step_logits": ls.contiguous(),
    }, os.path.join(out, "reference.safetensors"))
    meta = dict(variant=name, model_type=config.model_type, architectures=list(config.architectures or []),
                model_class=type(model).__name__, seed=seed, torch=torch.__version__,
                transformers=transformers.__version__, tokens_a=tokens_a, tokens_b=tokens_b,
                greedy_prompt_text=HYBRID_PROMPT, greedy_prompt=prompt, greedy_tokens=g,
                greedy_text=tok.decode(g), n_params=sum(p.numel() for p in model.parameters()),
                layer_types=list(config.layer_types), experts_implementation=experts_impl,
                linear_attention_kernels=linear_attn_kernels,
                hf_cached_vs_full_max_rel=cache_diff, hf_prefill_vs_step0_max_rel=prefill_diff)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print(f"{name:20s} params {meta['n_params']:8d}  prompt {len(prompt)} tokens  HF cached-vs-full "
          f"{cache_diff:.1e}  greedy: {meta['greedy_text']!r}")


REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default: tests/golden of this checkout)")
    ap.add_argument("--only", default="",
                    help="comma-separated variant names (default: all); known: "
                         + ", ".join(list(VARIANTS) + list(HYBRID_VARIANTS)))
    args = ap.parse_args()
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in VARIANTS and n not in HYBRID_VARIANTS]
    if unknown:
        sys.exit(f"make_golden.py: unknown variant(s) {unknown}; known: {list(VARIANTS) + list(HYBRID_VARIANTS)}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, out {args.out}")
    torch.use_deterministic_algorithms(True)
    tok_dir = os.path.join(args.out, "_tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    dense = [n for n in VARIANTS if not only or n in only]
    hybrid = [n for n in HYBRID_VARIANTS if not only or n in only]
    committed = os.path.join(REPO, "tests", "golden", "qwen3")
    if not dense and all(os.path.exists(os.path.join(committed, f)) for f in TOKENIZER_FILES):
        # Only hybrid variants: reuse the committed fixtures' tokenizer, so they share one vocabulary.
        for f in TOKENIZER_FILES:
            shutil.copyfile(os.path.join(committed, f), os.path.join(tok_dir, f))
        tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        print(f"tokenizer: copied from {committed}")
    else:
        tok = train_tokenizer(tok_dir)
    for index, (name, overrides) in enumerate(VARIANTS.items()):
        if name in dense:
            make_variant(index, name, overrides, args.out, tok_dir, tok)
    for index, name in enumerate(HYBRID_VARIANTS):
        if name in hybrid:
            make_hybrid_variant(100 + index, name, HYBRID_VARIANTS[name], os.path.join(args.out, "hybrid"),
                                tok_dir, tok)


if __name__ == "__main__":
    main()
