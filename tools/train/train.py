#!/usr/bin/env python3
"""Trains pelican's reference models on the GPU machine, end to end, in one process (run_all.sh calls it).

Stages (each writes under --work; a failing model stage is logged and the next one still runs):
  tokenizer  byte-level BPE, 8192 ids (3 specials first: <|endoftext|> <|im_start|> <|im_end|>), Qwen2
             pre-tokenizer (NFC + the Qwen2 split regex + ByteLevel), trained with HF tokenizers on the
             English training split plus as many bytes of the code training split; saved as tokenizer.json +
             tokenizer_config.json (ChatML template). Also tokenizer_ref.json: ids of held-out texts as HF
             tokenizers encodes them, for pelican's tokenizer test.
  tokenize   every split -> one token stream per split, each document preceded by <|endoftext|>.
  tiny       pelican-tiny, HF qwen3 (dense). Batches: half English, half code rows, random 512-token
             windows (seeded). AdamW, bf16 autocast, linear warm-up then cosine to 10%. Weights rounded to
             bf16 at the end; the saved bf16 folder is the model, and everything reported (held-out
             perplexity, reference logits) is computed from exactly those weights.
  moe        pelican-small-moe, HF qwen3_5_moe_text (Gated DeltaNet + gated full attention every 4th layer,
             routed experts + sigmoid-gated shared expert, untied embeddings) built with transformers' own
             classes, plus one MTP layer in the Qwen3.5/vLLM layout trained jointly with a t+2 loss.
Seeded (torch, data sampling). The number of steps is either given (--tiny-steps/--moe-steps) or sized
from the measured step time to fit --tiny-seconds/--moe-seconds; the steps taken are recorded in
results.json, so a rerun with those step counts repeats the run (up to GPU non-determinism).
"""
import argparse
import json
import lzma
import math
import os
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20251129
VOCAB = 8192
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT = 0
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SEQ = 512
PROMPT = "The history of the United States"


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def load_jsonl(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------------------------------- tokenizer

def train_tokenizer(data, out_dir):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    eng = [d["text"] for d in data["english_train"]]
    budget = sum(len(t) for t in eng)
    code, n = [], 0
    for d in data["code_train"]:
        if n >= budget:
            break
        code.append(d["text"])
        n += len(d["text"])
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t0 = time.time()
    tok.train_from_iterator(eng + code, trainer, length=len(eng) + len(code))
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id("<|endoftext|>") == EOT
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = dict(bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token=None,
               add_bos_token=False, add_eos_token=False, clean_up_tokenization_spaces=False, errors="replace",
               model_max_length=2048, chat_template=CHATML, tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    log(f"tokenizer: {VOCAB} ids from {budget + n} characters in {time.time() - t0:.1f} s")
    return tok


def tokenizer_reference(tok, data, tok_dir, path):
    """Held-out texts and the ids HF tokenizers gives them (specials in the text are matched)."""
    cases = []
    for d in data["english_heldout"]:
        cases.append({"name": f"{d['source']}/{d['id']}", "text": d["text"][:3000]})
    for d in data["code_heldout"][:12]:
        cases.append({"name": f"{d['source']}/{d['id']}", "text": d["text"][:3000]})
    cases += [
        {"name": "chatml", "text": "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n"},
        {"name": "unicode", "text": "Café naïve résumé — “quotes” ‘single’ ½ € 日本語 😀 e\u0301 Ω"},
        {"name": "whitespace", "text": "  leading\tand\t\ttabs\n\n\n   trailing   \r\nwindows\r\n    "},
        {"name": "digits", "text": "In 1776, 13 colonies; pi=3.14159, x1 = 0x1F, 1,000,000 and 2nd/3rd."},
        {"name": "contractions", "text": "I'm sure you'll agree it's THEIR'S, we'VE done it, don't."},
    ]
    for c in cases:
        c["ids"] = tok.encode(c["text"], add_special_tokens=False).ids
    # transformers' own loader of the folder must agree
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(tok_dir)
        bad = [c["name"] for c in cases if hf(c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
        log(f"transformers AutoTokenizer on the folder: {len(cases) - len(bad)}/{len(cases)} cases agree {bad}")
    except Exception:
        traceback.print_exc()
    with open(path, "w") as f:
        json.dump({"tokenizers": __import__("tokenizers").__version__, "cases": cases}, f, ensure_ascii=False)
    log(f"tokenizer reference: {len(cases)} cases, {sum(len(c['ids']) for c in cases)} ids")


def tokenize_all(tok, data):
    streams, stats = {}, {}
    for split, docs in data.items():
        t0 = time.time()
        enc = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
        arr = np.concatenate([np.asarray([EOT] + e.ids, dtype=np.int32) for e in enc])
        streams[split] = arr
        nbytes = sum(len(d["text"].encode("utf-8")) for d in docs)
        stats[split] = {"documents": len(docs), "tokens": int(arr.size), "bytes": nbytes,
                        "bytes_per_token": nbytes / max(1, arr.size - len(docs))}
        log(f"tokenize {split}: {len(docs)} docs, {arr.size} tokens, {stats[split]['bytes_per_token']:.2f} B/tok, "
            f"{time.time() - t0:.1f} s")
    return streams, stats


# ----------------------------------------------------------------------------------------- training

class Sampler:
    """Random windows of SEQ+1 tokens; each batch is half English rows, half code rows."""

    def __init__(self, streams, batch, seed):
        self.eng = torch.from_numpy(streams["english_train"]).long().cuda()
        self.code = torch.from_numpy(streams["code_train"]).long().cuda()
        self.batch = batch
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self.ar = torch.arange(SEQ + 1, device="cuda")

    def _rows(self, s, n):
        starts = torch.randint(0, s.numel() - SEQ - 1, (n,), generator=self.gen, device="cuda")
        return s[starts[:, None] + self.ar]

    def next(self):
        h = self.batch // 2
        return torch.cat([self._rows(self.eng, h), self._rows(self.code, self.batch - h)])


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def train_loop(name, params, loss_fn, sampler, steps, seconds, peak_lr, warmup, wd):
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=peak_lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    total = steps or 10**9
    t0 = time.time()
    step = 0
    hist = []
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, peak_lr, warmup)
        x = sampler.next()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, parts = loss_fn(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if steps is None and step == 30:  # size the run from the measured step time (steps 10..30)
            torch.cuda.synchronize()
            per = (time.time() - t10) / 20
            total = max(warmup + 50, int(seconds / per))
            log(f"{name}: {per * 1000:.1f} ms/step -> {total} steps for {seconds} s")
        if step == 10:
            torch.cuda.synchronize()
            t10 = time.time()
        if step % 100 == 0 or step == total:
            vals = {k: float(v) for k, v in parts.items()}
            hist.append({"step": step, **vals})
            log(f"{name} step {step}/{total} lr {opt.param_groups[0]['lr']:.2e} " +
                " ".join(f"{k} {v:.3f}" for k, v in vals.items()) + f" ({time.time() - t0:.0f} s)")
    torch.cuda.synchronize()
    return {"steps": step, "tokens_seen": step * sampler.batch * SEQ, "train_seconds": time.time() - t0,
            "history": hist}


@torch.no_grad()
def heldout_windows(stream, max_windows):
    n = min(max_windows, (stream.size - 1) // SEQ)
    t = torch.from_numpy(stream[: n * SEQ + 1]).long()
    return torch.stack([t[i * SEQ: i * SEQ + SEQ + 1] for i in range(n)])


@torch.no_grad()
def evaluate(fwd, streams, stats, max_windows=400, batch=32):
    """Perplexity over non-overlapping SEQ-token windows of each held-out stream (fp32 compute).
    fwd(x) -> dict of per-position log-prob tensors to average: 'nll' [B, SEQ], optional 'mtp_hit'."""
    out = {}
    for split in ("english_heldout", "code_heldout"):
        w = heldout_windows(streams[split], max_windows)
        sums = {}
        for i in range(0, w.shape[0], batch):
            r = fwd(w[i:i + batch].cuda())
            for k, v in r.items():
                s, c = sums.get(k, (0.0, 0))
                sums[k] = (s + float(v.double().sum()), c + v.numel())
        nll = sums["nll"][0] / sums["nll"][1]
        res = {"tokens": sums["nll"][1], "ppl": math.exp(nll),
               "bits_per_byte": nll / math.log(2) / stats[split]["bytes_per_token"]}
        for k in sums:
            if k != "nll":
                res[k] = sums[k][0] / sums[k][1]
        out[split.replace("_heldout", "")] = res
        log(f"  held-out {split}: " + ", ".join(f"{k} {v:.4g}" for k, v in res.items()))
    return out


def nparams(module):
    return sum(p.numel() for p in module.parameters())


def round_to_bf16_(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))


def samples(model, tok, prompts, n=40):
    out = {}
    for p in prompts:
        ids = torch.tensor([tok.encode(p).ids], device="cuda")
        g = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=EOT)
        torch.manual_seed(SEED)
        s = model.generate(ids, max_new_tokens=n, do_sample=True, temperature=0.8, top_k=40, eos_token_id=None,
                           pad_token_id=EOT)
        out[p] = {"greedy": tok.decode(g[0, ids.shape[1]:].tolist()), "sampled": tok.decode(s[0, ids.shape[1]:].tolist())}
        log(f"  {p!r} greedy -> {out[p]['greedy']!r}")
        log(f"  {p!r} sampled -> {out[p]['sampled']!r}")
    return out


def copy_tokenizer(tok_dir, out):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, f), "rb") as a, open(os.path.join(out, f), "wb") as b:
            b.write(a.read())


# -------------------------------------------------------------------------------------------- tiny

def stage_tiny(args, streams, stats, tok, tok_dir, data):
    import transformers
    from safetensors.torch import save_file
    torch.manual_seed(SEED)
    cfg = transformers.AutoConfig.for_model(
        "qwen3", vocab_size=VOCAB, hidden_size=256, intermediate_size=768, num_hidden_layers=5,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.02, bos_token_id=None,
        eos_token_id=EOT, pad_token_id=None, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().cuda()
    n = nparams(model)
    log(f"tiny: {n} parameters")

    def loss_fn(x):
        logits = model(input_ids=x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        return loss, {"loss": loss.detach()}

    model.train()
    run = train_loop("tiny", list(model.parameters()), loss_fn, Sampler(streams, 128, SEED + 1), args.tiny_steps,
                     args.tiny_seconds, peak_lr=3e-3, warmup=200, wd=0.1)
    model.eval()
    round_to_bf16_(model)

    def fwd(x):
        logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
        return {"nll": F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1), reduction="none"),
                "top1": (logits.argmax(-1) == x[:, 1:]).float()}

    ev = evaluate(fwd, streams, stats)
    smp = samples(model, tok, [PROMPT, "def forward(self", "Call me"])

    out = os.path.join(args.work, "pelican-tiny")
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    copy_tokenizer(tok_dir, out)
    gc = {}
    if os.path.exists(os.path.join(out, "generation_config.json")):
        with open(os.path.join(out, "generation_config.json")) as f:
            gc = json.load(f)
    gc.update({"eos_token_id": [0, 2], "pad_token_id": 0, "bos_token_id": None})
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gc, f, indent=2)

    # Reference logits for pelican's test: float64 on the CPU from the saved (bf16) weights.
    ref_dir = os.path.join(args.work, "tiny-ref")
    os.makedirs(ref_dir, exist_ok=True)
    m64 = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager")
    m64.eval()
    eng = next(d for d in data["english_heldout"] if d["source"] == "sotu")
    tokens_a = tok.encode(eng["text"], add_special_tokens=False).ids[:40]
    tokens_b = tok.encode(data["code_heldout"][0]["text"], add_special_tokens=False).ids[:24]
    prompt = tok.encode(PROMPT).ids
    with torch.no_grad():
        la = m64(torch.tensor([tokens_a])).logits[0].float()
        lb = m64(torch.tensor([tokens_b])).logits[0].float()
        g = m64.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False,
                         eos_token_id=None, pad_token_id=EOT)[0, len(prompt):].tolist()
        # the GPU model (f32) agrees with the f64 reference? (sanity, reported)
        lg = model.float()(torch.tensor([tokens_a], device="cuda")).logits[0].cpu()
    gpu_rel = float((lg - la).norm() / la.norm())
    save_file({"tokens_a": torch.tensor(tokens_a, dtype=torch.int32), "logits_a": la.contiguous(),
               "tokens_b": torch.tensor(tokens_b, dtype=torch.int32), "logits_b": lb.contiguous(),
               "greedy_prompt": torch.tensor(prompt, dtype=torch.int32),
               "greedy_tokens": torch.tensor(g, dtype=torch.int32)}, os.path.join(ref_dir, "reference.safetensors"))
    meta = {"model": "pelican-tiny", "torch": torch.__version__, "transformers": transformers.__version__,
            "seed": SEED, "source_a": f"{eng['source']}/{eng['id']} (held out)",
            "source_b": f"{data['code_heldout'][0]['source']}/{data['code_heldout'][0]['id']} (held out)",
            "tokens_a": tokens_a, "tokens_b": tokens_b, "greedy_prompt_text": PROMPT, "greedy_prompt": prompt,
            "greedy_tokens": g, "greedy_text": tok.decode(g), "gpu_f32_vs_cpu_f64_rel": gpu_rel,
            "note": "logits from transformers in float64 on the CPU, from the bf16 weights of pelican-tiny"}
    with open(os.path.join(ref_dir, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    log(f"tiny reference: greedy {meta['greedy_text']!r}; GPU f32 vs CPU f64 rel {gpu_rel:.2e}")
    return {"params": n, "config": {k: cfg.to_dict()[k] for k in ("hidden_size", "intermediate_size",
                                                                 "num_hidden_layers", "num_attention_heads",
                                                                 "num_key_value_heads", "head_dim")},
            **{k: v for k, v in run.items() if k != "history"}, "loss_history": run["history"],
            "heldout": ev, "samples": smp}


# --------------------------------------------------------------------------------------------- moe

class MTP(torch.nn.Module):
    """One Qwen3.5 MTP layer (vLLM layout): z = fc([norm_e(embed(x_{t+1})), norm_h(h_t)]) -> full-attention
    MoE decoder layer at position t+1 -> norm -> shared lm_head -> logits for x_{t+2}."""

    def __init__(self, cfg, mod):
        super().__init__()
        H = cfg.hidden_size
        self.pre_fc_norm_embedding = mod.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = mod.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        self.fc = torch.nn.Linear(2 * H, H, bias=False)
        full = cfg.layer_types.index("full_attention")
        self.layers = torch.nn.ModuleList([mod.Qwen3_5MoeDecoderLayer(cfg, full)])
        self.norm = mod.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(0.0, cfg.initializer_range)
            for m in self.modules():
                if isinstance(m, mod.Qwen3_5MoeRMSNorm):
                    m.weight.zero_()  # zero-centred RMSNorm: weight 0 is the identity scale

    def forward(self, h, next_embeds, rotary):
        B, T, _ = h.shape
        z = self.fc(torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(h)], dim=-1))
        pos = torch.arange(1, T + 1, device=h.device)[None].expand(B, -1)
        pe = rotary(z, pos[None].expand(3, B, T))  # text-only M-RoPE: three equal position rows
        mask = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()[None, None]
        z = self.layers[0](z, position_embeddings=pe, attention_mask=mask, position_ids=pos)
        return self.norm(z)


def stage_moe(args, streams, stats, tok, tok_dir):
    import transformers
    from safetensors.torch import save_file
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mod
    torch.manual_seed(SEED + 100)
    layer_types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(8)]
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=8, layer_types=layer_types,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256,
        shared_expert_intermediate_size=256, max_position_embeddings=2048, rms_norm_eps=1e-6,
        tie_word_embeddings=False, initializer_range=0.02, bos_token_id=None, eos_token_id=EOT, pad_token_id=None,
        router_aux_loss_coef=0.001,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 3, 2], "mrope_interleaved": True})
    cfg._attn_implementation = "sdpa"
    model = mod.Qwen3_5MoeForCausalLM(cfg).float().cuda()
    mtp = MTP(cfg, mod).float().cuda()
    inner = model.model
    E, K = cfg.num_experts, cfg.num_experts_per_tok
    n_main, n_mtp = nparams(model), nparams(mtp)
    # active per token: everything but the unchosen routed experts; embedding rows counted as one lookup
    per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    n_active = n_main - cfg.num_hidden_layers * (E - K) * per_expert
    log(f"moe: {n_main} parameters (+{n_mtp} MTP), {n_active} active per token; fast path "
        f"{getattr(mod, 'is_fast_path_available', '?')}")

    # the MTP layer is causal: outputs on a prefix do not change when the sequence grows
    with torch.no_grad():
        x = torch.randint(3, VOCAB, (1, 33), device="cuda")
        h = torch.randn(1, 32, cfg.hidden_size, device="cuda")
        e = inner.embed_tokens(x[:, 1:])
        full = mtp(h, e, inner.rotary_emb)
        part = mtp(h[:, :16], e[:, :16], inner.rotary_emb)
        diff = float((full[:, :16] - part).abs().max())
        log(f"moe: MTP causality check, prefix max |diff| {diff:.2e} (tf32 matmuls)")
        assert diff < 2e-2, "MTP layer is not causal"

    aux_ok = [True]

    def forward_all(x):
        inp = x[:, :-1]
        out = inner(input_ids=inp, use_cache=False, output_router_logits=aux_ok[0])
        h = out.last_hidden_state  # post model.norm, as vLLM hands it to the MTP layer
        logits = model.lm_head(h)
        z = mtp(h[:, :-1], inner.embed_tokens(inp[:, 1:]), inner.rotary_emb)
        mtp_logits = model.lm_head(z)
        return out, logits, mtp_logits

    def loss_fn(x):
        out, logits, mtp_logits = forward_all(x)
        main = F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        l2 = F.cross_entropy(mtp_logits.float().reshape(-1, VOCAB), x[:, 2:].reshape(-1))
        loss = main + 0.3 * l2
        parts = {"loss": main.detach(), "mtp": l2.detach()}
        rl = getattr(out, "router_logits", None)
        if aux_ok[0] and rl is not None and len(rl) > 0:
            aux = mod.load_balancing_loss_func(rl, E, K, None)
            loss = loss + cfg.router_aux_loss_coef * aux
            parts["aux"] = aux.detach()
        return loss, parts

    model.train()
    mtp.train()
    params = list(model.parameters()) + list(mtp.parameters())
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss_fn(torch.randint(0, VOCAB, (2, SEQ + 1), device="cuda"))
    except Exception:
        traceback.print_exc()
        log("moe: router logits unavailable; training without the load-balancing loss")
        aux_ok[0] = False
    run = train_loop("moe", params, loss_fn, Sampler(streams, 64, SEED + 2), args.moe_steps, args.moe_seconds,
                     peak_lr=2e-3, warmup=150, wd=0.1)
    model.eval()
    mtp.eval()
    round_to_bf16_(model)
    round_to_bf16_(mtp)
    aux_ok[0] = False

    def fwd(x):
        _, logits, mtp_logits = forward_all(x)
        logits, mtp_logits = logits.float(), mtp_logits.float()
        return {"nll": F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1), reduction="none"),
                "top1": (logits.argmax(-1) == x[:, 1:]).float(),
                "mtp_nll_t2": F.cross_entropy(mtp_logits.reshape(-1, VOCAB), x[:, 2:].reshape(-1), reduction="none"),
                "mtp_top1_t2": (mtp_logits.argmax(-1) == x[:, 2:]).float()}

    ev = evaluate(fwd, streams, stats, max_windows=200)
    smp = samples(model, tok, [PROMPT, "def forward(self"])

    # HF folder: transformers' own tensors + mtp.* (experts per expert, as Qwen3.5 checkpoints store MTP)
    out = os.path.join(args.work, "pelican-small-moe")
    os.makedirs(out, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    I = cfg.moe_intermediate_size
    for k, v in mtp.state_dict().items():
        v = v.detach().to(torch.bfloat16).cpu()
        if k.endswith("mlp.experts.gate_up_proj"):
            base = "mtp." + k[: -len("gate_up_proj")]
            assert v.shape == (E, 2 * I, cfg.hidden_size), v.shape
            for e in range(E):
                sd[f"{base}{e}.gate_proj.weight"] = v[e, :I].contiguous()
                sd[f"{base}{e}.up_proj.weight"] = v[e, I:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = "mtp." + k[: -len("down_proj")]
            assert v.shape == (E, cfg.hidden_size, I), v.shape
            for e in range(E):
                sd[f"{base}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            sd["mtp." + k] = v.contiguous()
    shards, cur, cur_bytes = [], {}, 0
    for k in sorted(sd):
        b = sd[k].numel() * 2
        if cur and cur_bytes + b > 15_000_000:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur[k] = sd[k]
        cur_bytes += b
    shards.append(cur)
    index = {"metadata": {"total_size": sum(v.numel() * 2 for v in sd.values())}, "weight_map": {}}
    for i, sh in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(out, name), metadata={"format": "pt"})
        for k in sh:
            index["weight_map"][k] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    model.config.architectures = ["Qwen3_5MoeForCausalLM"]
    model.config.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c.update({"dtype": "bfloat16", "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [0, 2], "pad_token_id": 0, "do_sample": False}, f, indent=2)
    copy_tokenizer(tok_dir, out)

    # reload with transformers (ignores mtp.*): same logits as the trained model
    reload_rel = None
    try:
        back = mod.Qwen3_5MoeForCausalLM.from_pretrained(out, dtype=torch.float32).cuda().eval()
        w = heldout_windows(streams["english_heldout"], 2).cuda()[:, :-1]
        with torch.no_grad():
            a, b = model(input_ids=w).logits.float(), back(input_ids=w).logits.float()
        reload_rel = float((a - b).norm() / a.norm())
    except Exception:
        traceback.print_exc()
    log(f"moe: reload rel diff {reload_rel}; {len(shards)} shards, {index['metadata']['total_size']} bytes")
    return {"params_total": n_main + n_mtp, "params_main": n_main, "params_mtp": n_mtp,
            "params_active_main": n_active, "aux_loss": aux_ok[0] or "see log",
            **{k: v for k, v in run.items() if k != "history"}, "loss_history": run["history"],
            "heldout": ev, "samples": smp, "reload_rel_diff": reload_rel}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder with english_*.jsonl.xz and code_*.jsonl")
    ap.add_argument("--work", required=True)
    ap.add_argument("--stages", default="tiny,moe")
    ap.add_argument("--tiny-steps", type=int)
    ap.add_argument("--tiny-seconds", type=float, default=160)
    ap.add_argument("--moe-steps", type=int)
    ap.add_argument("--moe-seconds", type=float, default=180)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.work, exist_ok=True)
    t_start = time.time()
    data = {s: load_jsonl(os.path.join(args.data, f)) for s, f in [
        ("english_train", "english_train.jsonl.xz"), ("english_heldout", "english_heldout.jsonl.xz"),
        ("code_train", "code_train.jsonl"), ("code_heldout", "code_heldout.jsonl")]}
    tok_dir = os.path.join(args.work, "tokenizer")
    tok = train_tokenizer(data, tok_dir)
    tokenizer_reference(tok, data, tok_dir, os.path.join(args.work, "tokenizer_ref.json"))
    streams, stats = tokenize_all(tok, data)
    results = {"seed": SEED, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "data": stats, "seq_len": SEQ}
    import transformers
    results["transformers"] = transformers.__version__
    res_path = os.path.join(args.work, "results.json")

    def save():
        with open(res_path, "w") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)

    save()
    for stage in args.stages.split(","):
        t0 = time.time()
        try:
            if stage == "tiny":
                results["tiny"] = stage_tiny(args, streams, stats, tok, tok_dir, data)
            elif stage == "moe":
                results["moe"] = stage_moe(args, streams, stats, tok, tok_dir)
            results[stage]["stage_wall_seconds"] = time.time() - t0
        except Exception as e:
            traceback.print_exc()
            results[stage + "_error"] = repr(e)
        save()
        if stage == "tiny":
            os.system(f"bash {os.path.dirname(os.path.abspath(__file__))}/pack.sh tiny")
    results["total_seconds"] = time.time() - t_start
    save()
    log("done")


if __name__ == "__main__":
    main()
