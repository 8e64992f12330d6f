#!/usr/bin/env python3
"""Reloads a saved model folder with transformers (AutoModelForCausalLM.from_pretrained, as a user would) and
recomputes its held-out perplexity exactly as train.py reported it: the folder's own tokenizer.json, train.py's
tokenize_all / heldout_windows / evaluate (non-overlapping 512-token windows, fp32 compute, TF32 matmuls as in
training), 400 windows per split for pelican-tiny and 200 for pelican-small-moe. For the MoE it also rebuilds
train.py's MTP layer from the folder's mtp.* tensors and reports the t+2 top-1 of the MTP head.

Usage (GPU machine): python3 tools/train/verify_reload.py FOLDER --data DIR [--json OUT.json]
DIR holds english_heldout.jsonl.xz and code_heldout.jsonl (corpus.py english / corpus.py code).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402  (reuse the training run's tokenization and evaluation code)


def load_mtp(folder, model):
    """train.MTP with the weights stored under mtp.* (per-expert tensors fused back into transformers' layout)."""
    from safetensors import safe_open
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mod
    cfg = model.config
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    raw = {}
    for shard in sorted({v for k, v in wm.items() if k.startswith("mtp.")}):
        with safe_open(os.path.join(folder, shard), "pt") as f:
            for k in f.keys():
                if k.startswith("mtp."):
                    raw[k[4:]] = f.get_tensor(k)
    E = cfg.num_experts
    sd = {}
    for k, v in raw.items():
        if ".mlp.experts." in k and k.split(".mlp.experts.")[1][0].isdigit():
            continue
        sd[k] = v
    bases = sorted({k.split(".mlp.experts.")[0] for k in raw if ".mlp.experts." in k})
    for b in bases:
        p = f"{b}.mlp.experts."
        sd[p + "gate_up_proj"] = torch.stack([torch.cat([raw[f"{p}{e}.gate_proj.weight"],
                                                         raw[f"{p}{e}.up_proj.weight"]]) for e in range(E)])
        sd[p + "down_proj"] = torch.stack([raw[f"{p}{e}.down_proj.weight"] for e in range(E)])
    mtp = train.MTP(cfg, mod)
    mtp.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return mtp.float().cuda().eval(), len(raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--data", required=True)
    ap.add_argument("--json")
    ap.add_argument("--windows", type=int, help="held-out windows per split (default: 400 dense, 200 MoE)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    t0 = time.time()
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    res = {"folder": args.folder, "torch": torch.__version__, "transformers": transformers.__version__}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1, ensure_ascii=False)

    with open(os.path.join(args.folder, "tokenizer.json"), "rb") as f:
        res["tokenizer_sha256"] = hashlib.sha256(f.read()).hexdigest()
    data = {s: train.load_jsonl(os.path.join(args.data, f)) for s, f in [
        ("english_heldout", "english_heldout.jsonl.xz"), ("code_heldout", "code_heldout.jsonl")]}
    tok = Tokenizer.from_file(os.path.join(args.folder, "tokenizer.json"))
    streams, stats = train.tokenize_all(tok, data)
    res["data"] = stats
    # transformers' own tokenizer loader on the folder gives the same ids?
    hf = AutoTokenizer.from_pretrained(args.folder)
    docs = data["english_heldout"] + data["code_heldout"]
    res["autotokenizer_docs_agree"] = sum(
        hf(d["text"], add_special_tokens=False)["input_ids"] == tok.encode(d["text"], add_special_tokens=False).ids
        for d in docs)
    res["docs"] = len(docs)

    cfg = AutoConfig.from_pretrained(args.folder)
    res["model_type"] = cfg.model_type
    try:
        model = AutoModelForCausalLM.from_pretrained(args.folder, dtype=torch.float32)
    except Exception as e:  # no Auto mapping for the text-only config: the class named in config.json
        res["auto_error"] = repr(e)
        model = getattr(transformers, cfg.architectures[0]).from_pretrained(args.folder, dtype=torch.float32)
    model = model.cuda().eval()
    res["class"] = type(model).__name__
    res["params_loaded"] = train.nparams(model)
    V = cfg.vocab_size
    moe = cfg.model_type.startswith("qwen3_5_moe")
    mtp = None
    if moe:
        try:
            mtp, res["mtp_tensors"] = load_mtp(args.folder, model)
            res["params_mtp"] = train.nparams(mtp)
        except Exception as e:  # report the main model's perplexity regardless
            import traceback
            traceback.print_exc()
            res["mtp_error"] = repr(e)
    inner = model.model

    def fwd(x):
        inp = x[:, :-1]
        h = inner(input_ids=inp, use_cache=False).last_hidden_state
        logits = model.lm_head(h).float()
        r = {"nll": F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1), reduction="none"),
             "top1": (logits.argmax(-1) == x[:, 1:]).float()}
        if mtp is not None:
            z = mtp(h[:, :-1], inner.embed_tokens(inp[:, 1:]), inner.rotary_emb)
            ml = model.lm_head(z).float()
            r["mtp_nll_t2"] = F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1), reduction="none")
            r["mtp_top1_t2"] = (ml.argmax(-1) == x[:, 2:]).float()
        return r

    # the standard forward gives the same logits as the split one used for evaluation
    w = train.heldout_windows(streams["english_heldout"], 2).cuda()
    with torch.no_grad():
        a = model(input_ids=w[:, :-1]).logits.float()
        b = model.lm_head(inner(input_ids=w[:, :-1], use_cache=False).last_hidden_state).float()
    res["split_forward_rel_diff"] = float((a - b).norm() / a.norm())
    res["windows"] = args.windows or (200 if moe else 400)
    res["heldout"] = train.evaluate(fwd, streams, stats, max_windows=res["windows"])
    res["seconds"] = time.time() - t0
    save()
    h = res["heldout"]
    print(json.dumps({"folder": args.folder, "ppl_en": h["english"]["ppl"], "ppl_code": h["code"]["ppl"],
                      "mtp_top1_t2": [h[s].get("mtp_top1_t2") for s in ("english", "code")]}))


if __name__ == "__main__":
    main()
