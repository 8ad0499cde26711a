#!/usr/bin/env python3
"""Reference outputs of the tiny Gemma 4 checkpoints, computed with HF transformers.

Usage (on a machine with torch, transformers >= 5.17 (models/gemma4), safetensors, numpy; no network):

    python3 testdata/reference/gemma4_reference.py --tiny testdata/tiny --out testdata/reference

For every gemma4-* variant directory of testdata/tiny (MLX layout, internal/tinymodel/gemma4.go) it
  1. reads the safetensors files and dequantizes MLX affine tensors in numpy (make_reference.py's
     reader: LSB-first codes in little-endian uint32 words, w = scale * q + bias per group, the
     router at its own 8 bits from the config's per-module override), independently of any Go code;
  2. drops what a text model does not have (vision_tower.*, embed_vision.*, audio_tower.*,
     embed_audio.*), logging the count, as mlx-lm's gemma4.sanitize does;
  3. maps the MLX names to transformers' Gemma4ForCausalLM state dict (language_model.model. ->
     the model's body prefix; experts.switch_glu.{gate,up}_proj fused into experts.gate_up_proj
     [E,2I,H], gate rows first; down_proj [E,H,I]) and loads it strictly;
  4. runs it on the CPU in float64 (transformers keeps its float32 RMSNorm internals), eager
     attention, eval mode: a full forward over INPUT_IDS (T=12, longer than every sliding window),
     every decoder layer's output by forward hooks; then an incremental decode of the same ids one
     token at a time through transformers' cache (sliding layers' cache past the window), and a
     greedy continuation of N_CONT tokens from that cache; then a full forward over
     prompt + continuation to check that the incremental logits equal the full ones;
  5. checks the transformers logits against an independent float64 numpy forward written from
     ../shared/reference/gemma4.md (§1), so a wrong name mapping cannot pass silently;
  6. writes gemma4_<variant>.safetensors:
       input_ids I64 [T]; logits F32 [T,V] (full forward); hidden.L F32 [T,H] (output of decoder
       layer L: after layer_scalar, before the final norm); greedy I64 [T] (argmax per position);
       decode_logits F32 [T,V] (incremental decode of input_ids, one token per step);
       continuation I64 [N_CONT] (greedy tokens after input_ids, by incremental decode);
       continuation_logits F32 [N_CONT,V] (the logits that chose each of them: row 0 is logits[T-1]
       of the decode, row k the step that consumed continuation[k-1]);
     and logs to gemma4_reference.out, hashes of the checkpoint files read to gemma4_tiny.sha256.
"""

import argparse
import hashlib
import io
import json
import math
import os
import platform
import re
import sys
import traceback

import numpy as np
import torch
import safetensors
from safetensors.numpy import save_file

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference as mr  # noqa: E402  (the MLX reader and numpy dequantizer)

VARIANTS = ["gemma4-f32", "gemma4-q4g32", "gemma4-nokeqv-f32", "gemma4-towers-q4g64"]

# Fixed teacher-forcing input (T = 12, ids < 384): <|im_start|>, regular tokens, <|im_end|>,
# the last embedding row (383) and id 0.
INPUT_IDS = [357, 117, 198, 44, 256, 310, 72, 355, 358, 383, 0, 261]
N_CONT = 8

BODY = "language_model.model."
TOWERS = ("vision_tower.", "embed_vision.", "audio_tower.", "embed_audio.")

LOG = io.StringIO()


def log(*args):
    s = " ".join(str(a) for a in args)
    print(s, flush=True)
    LOG.write(s + "\n")


# ----------------------------------------------------------------------------------------
# Independent numpy forward (float64), from ../shared/reference/gemma4.md §1


def rms(x, w=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if w is None else y * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_attn(tc, l):
    full = tc["layer_types"][l] == "full_attention"
    keqv = full and tc.get("attention_k_eq_v", False)
    hd = tc["global_head_dim"] if full and tc.get("global_head_dim") else tc["head_dim"]
    kv = tc["num_global_key_value_heads"] if keqv else tc["num_key_value_heads"]
    return full, keqv, hd, kv


def inv_freq(tc, full, hd):
    rp = tc["rope_parameters"]["full_attention" if full else "sliding_attention"]
    theta = rp["rope_theta"]
    half = hd // 2
    inv = np.array([theta ** (-2.0 * d / hd) for d in range(half)])
    if rp.get("rope_type", "default") == "proportional":
        n = int(rp.get("partial_rotary_factor", 1.0) * hd // 2)
        inv[n:] = 0.0
        inv = inv / rp.get("factor", 1.0)
    return inv


def rope(x, pos, inv):
    # x [T, heads, D]; NeoX pairs (d, d + D/2)
    ang = pos[:, None] * inv[None, :]                     # [T, D/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)[:, None, :]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def numpy_forward(w, tc, ids):
    H = tc["hidden_size"]
    eps = tc["rms_norm_eps"]
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    E = w[BODY + "embed_tokens.weight"]
    x = E[ids] * math.sqrt(H)
    hiddens = []
    for l in range(tc["num_hidden_layers"]):
        p = f"{BODY}layers.{l}."
        full, keqv, hd, kv = layer_attn(tc, l)
        nh = tc["num_attention_heads"]
        hn = rms(x, w[p + "input_layernorm.weight"], eps)
        q = (hn @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
        kraw = (hn @ w[p + "self_attn.k_proj.weight"].T).reshape(T, kv, hd)
        v = kraw if keqv else (hn @ w[p + "self_attn.v_proj.weight"].T).reshape(T, kv, hd)
        q = rms(q, w[p + "self_attn.q_norm.weight"], eps)
        k = rms(kraw, w[p + "self_attn.k_norm.weight"], eps)
        v = rms(v, None, eps)
        inv = inv_freq(tc, full, hd)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        mask = np.tril(np.ones((T, T), dtype=bool))
        if not full:
            W = tc["sliding_window"]
            i, j = np.arange(T)[:, None], np.arange(T)[None, :]
            mask &= j > i - W
        out = np.zeros((T, nh, hd))
        g = nh // kv
        for hh in range(nh):
            s = q[:, hh, :] @ k[:, hh // g, :].T                     # scale 1.0
            s = np.where(mask, s, -np.inf)
            out[:, hh, :] = softmax(s) @ v[:, hh // g, :]
        a = out.reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        x = x + rms(a, w[p + "post_attention_layernorm.weight"], eps)
        r = x
        m = rms(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        m = (gelu_tanh(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        h1 = rms(m, w[p + "post_feedforward_layernorm_1.weight"], eps)
        xr = rms(x, None, eps) * w[p + "router.scale"] * H ** -0.5
        probs = softmax(xr @ w[p + "router.proj.weight"].T)
        xe = rms(x, w[p + "pre_feedforward_layernorm_2.weight"], eps)
        h2 = np.zeros_like(x)
        K = tc["top_k_experts"]
        e = p + "experts.switch_glu."
        for t in range(T):
            top = np.argsort(-probs[t], kind="stable")[:K]
            wt = probs[t, top] / probs[t, top].sum() * w[p + "router.per_expert_scale"][top]
            for ex, we in zip(top, wt):
                gg = w[e + "gate_proj.weight"][ex] @ xe[t]
                uu = w[e + "up_proj.weight"][ex] @ xe[t]
                h2[t] += we * (w[e + "down_proj.weight"][ex] @ (gelu_tanh(gg) * uu))
        h2 = rms(h2, w[p + "post_feedforward_layernorm_2.weight"], eps)
        x = (r + rms(h1 + h2, w[p + "post_feedforward_layernorm.weight"], eps)) * w[p + "layer_scalar"][0]
        hiddens.append(x.copy())
    logits = rms(x, w[BODY + "norm.weight"], eps) @ E.T
    cap = tc.get("final_logit_softcapping")
    if cap:
        logits = np.tanh(logits / cap) * cap
    return logits, hiddens


# ----------------------------------------------------------------------------------------
# transformers model


def build_model(tc):
    from transformers import Gemma4TextConfig as C, Gemma4ForCausalLM as M
    d = {k: v for k, v in tc.items() if k not in ("dtype", "torch_dtype", "architectures")}
    how = "Gemma4TextConfig(**text_config)"
    for _ in range(20):
        try:
            conf = C(**d)
            break
        except Exception as e:  # noqa: BLE001
            # transformers 5 validates field types strictly; an int where a float is wanted
            # is retried as a float, and said so (the committed configs write floats).
            m = re.search(r"field '(\w+)'", str(e))
            if not m or not isinstance(d.get(m.group(1)), int) or isinstance(d.get(m.group(1)), bool):
                raise
            log(f"  WARNING: {m.group(1)} = {d[m.group(1)]!r} refused as an int; retried as a float")
            d[m.group(1)] = float(d[m.group(1)])
            how = "Gemma4TextConfig(**text_config) with ints cast to float"
    for attr, val in (("_attn_implementation", "eager"), ("_experts_implementation", "eager")):
        try:
            setattr(conf, attr, val)
        except Exception as e:  # noqa: BLE001
            log(f"  could not set {attr}: {e}")
    torch.manual_seed(0)
    model = M(conf)
    model.eval()
    return model, conf, how


def to_hf(w, model_keys, shapes):
    body = next((k.split("layers.0.")[0] for k in model_keys if "layers.0.input_layernorm.weight" in k), None)
    if body is None:
        raise ValueError(f"cannot find the model's layer prefix in {sorted(model_keys)[:20]}")
    sd, exp = {}, {}
    for k, v in w.items():
        if not k.startswith(BODY):
            raise ValueError(f"tensor {k} outside {BODY!r}")
        rel = k[len(BODY):]
        if ".experts.switch_glu." in rel:
            layer, rest = rel.split(".experts.switch_glu.")
            exp.setdefault(layer, {})[rest] = v
            continue
        sd[body + rel] = v
    for layer, e in exp.items():
        p = body + layer + ".experts."
        gu = np.concatenate([e["gate_proj.weight"], e["up_proj.weight"]], axis=1)   # [E,2I,H], gate first
        dn = e["down_proj.weight"]                                                  # [E,H,I]
        if shapes.get(p + "gate_up_proj") != gu.shape:
            raise ValueError(f"{p}gate_up_proj: model {shapes.get(p + 'gate_up_proj')}, checkpoint {gu.shape}")
        sd[p + "gate_up_proj"], sd[p + "down_proj"] = gu, dn
    # Tied head: the model may list lm_head.weight; it is the embedding.
    for k in model_keys:
        if k not in sd and k.endswith("lm_head.weight"):
            sd[k] = sd[body + "embed_tokens.weight"]
    return sd, body


def describe(model, conf):
    layers = model.model.layers
    out = {"layer_types": list(conf.layer_types), "sliding_window": conf.sliding_window,
           "attention_k_eq_v": getattr(conf, "attention_k_eq_v", None),
           "num_global_key_value_heads": getattr(conf, "num_global_key_value_heads", None),
           "rope_parameters": getattr(conf, "rope_parameters", None),
           "final_logit_softcapping": conf.final_logit_softcapping,
           "hidden_size_per_layer_input": getattr(conf, "hidden_size_per_layer_input", None),
           "num_kv_shared_layers": getattr(conf, "num_kv_shared_layers", None),
           "attn_implementation": getattr(conf, "_attn_implementation", "?"),
           "experts_class": type(layers[0].experts).__name__}
    per = []
    for i, l in enumerate(layers):
        a = l.self_attn
        per.append(f"{i}:{conf.layer_types[i][:4]} hd={getattr(a, 'head_dim', '?')} scaling={getattr(a, 'scaling', '?')} "
                   f"sw={getattr(a, 'sliding_window', '?')} v_proj={getattr(a, 'v_proj', None) is not None}")
    out["attention"] = per
    return out


def tensors_of(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return ["model.safetensors"]


def margin(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def run_variant(tiny, name, out_dir, sums):
    d = os.path.join(tiny, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    tc = cfg["text_config"]
    log(f"\n== {name} ({cfg['model_type']} / {tc['model_type']})")
    for fn in sorted(os.listdir(d)):
        with open(os.path.join(d, fn), "rb") as f:
            sums.append(f"{hashlib.sha256(f.read()).hexdigest()}  {name}/{fn}")
    raw = mr.read_checkpoint(d)
    towers = sorted(k for k in raw if k.startswith(TOWERS))
    for k in towers:
        del raw[k]
    w = mr.to_float_weights(raw, cfg)
    nq = sum(1 for k in raw if k.endswith(".scales"))
    log(f"  {len(raw) + len(towers)} tensors read from {tensors_of(d)}; {len(towers)} tower tensors dropped "
        f"({sorted(set(k.split('.')[0] for k in towers))}); {nq} quantized modules dequantized in numpy")

    model, conf, how = build_model(tc)
    log(f"  model {type(model).__name__} from {how}")
    for k, v in describe(model, conf).items():
        log(f"  {k}: {v}")
    msd = model.state_dict()
    keys = set(msd)
    shapes = {k: tuple(v.shape) for k, v in msd.items()}
    sd, body = to_hf(w, keys, shapes)
    buffers = dict(model.named_buffers())
    own = sorted(k for k in keys - set(sd) if k in buffers)
    for k in own:  # a buffer the checkpoint does not carry (rotary tables, ...) keeps the model's value
        sd[k] = msd[k].double().numpy()
    if own:
        log(f"  buffers kept from the model (not in the checkpoint): {own}")
    missing, unexpected = sorted(keys - set(sd)), sorted(set(sd) - keys)
    if missing or unexpected:
        log("  model state_dict keys:", sorted(keys))
        raise ValueError(f"state dict mismatch: missing {missing[:20]} ({len(missing)}), unexpected {unexpected[:20]} ({len(unexpected)})")
    bad = [(k, shapes[k], sd[k].shape) for k in sd if shapes[k] != tuple(sd[k].shape)]
    if bad:
        raise ValueError(f"shape mismatch: {bad[:10]}")
    model = model.to(torch.float64)
    res = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=True)
    log(f"  load_state_dict strict ({len(sd)} keys, body {body!r}): {res}")

    hidden = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        def hook(mod, inp, out, i=i):
            hidden[i] = (out[0] if isinstance(out, tuple) else out).detach()
        hooks.append(layer.register_forward_hook(hook))
    ids = torch.tensor([INPUT_IDS])
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits[0].double().numpy()
    hs = [hidden[i][0].double().numpy() for i in range(len(model.model.layers))]
    for h in hooks:
        h.remove()

    np_logits, np_hidden = numpy_forward(w, tc, INPUT_IDS)
    dl = float(np.abs(np_logits - full).max())
    dh = max(float(np.abs(a - b).max()) for a, b in zip(np_hidden, hs))
    log(f"  numpy float64 forward vs transformers: max|dlogits| {dl:.3g}, max|dhidden| {dh:.3g}")
    problems = []
    if dl > 1e-4:
        problems.append(f"the numpy forward disagrees with transformers by {dl:.3g}")

    # Incremental decode of the prompt, then greedy continuation from the cache.
    with torch.no_grad():
        cache, dec = None, []
        for t in range(len(INPUT_IDS)):
            o = model(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            dec.append(o.logits[0, -1].double().numpy())
        dec = np.stack(dec)
        cont, cont_logits = [], [dec[-1]]
        for k in range(N_CONT):
            nxt = int(np.argmax(cont_logits[-1]))
            cont.append(nxt)
            if k == N_CONT - 1:
                break
            o = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            cont_logits.append(o.logits[0, -1].double().numpy())
        cont_logits = np.stack(cont_logits)
        allids = torch.tensor([INPUT_IDS + cont[:-1]])
        full2 = model(input_ids=allids, use_cache=False).logits[0].double().numpy()
    log(f"  cache class: {type(cache).__name__}")
    dd = float(np.abs(dec - full).max())
    dc = float(np.abs(cont_logits - full2[len(INPUT_IDS) - 1:]).max())
    log(f"  incremental decode vs full forward: prompt max|d| {dd:.3g}; continuation max|d| {dc:.3g} "
        f"(T={len(INPUT_IDS)}+{N_CONT - 1} > sliding_window {tc['sliding_window']})")
    if dd > 1e-5 or dc > 1e-5:
        problems.append("incremental decode differs from the full forward")

    greedy = full.argmax(-1)
    log(f"  logits: max|logit| {np.abs(full).max():.4f}, std {full.std():.4f}")
    log("  hidden std per layer: " + " ".join(f"{h.std():.4f}" for h in hs))
    log("  layer_scalar per layer: " + " ".join(f"{w[f'{BODY}layers.{l}.layer_scalar'][0]:.4f}" for l in range(len(hs))))
    log(f"  min greedy margin (logit1-logit2): {min(margin(r) for r in full):.4f}; continuation: {min(margin(r) for r in cont_logits):.4f}")
    log(f"  greedy: {greedy.tolist()}")
    log(f"  continuation: {cont}")

    out = {
        "input_ids": np.array(INPUT_IDS, dtype=np.int64),
        "logits": full.astype(np.float32),
        "greedy": greedy.astype(np.int64),
        "decode_logits": dec.astype(np.float32),
        "continuation": np.array(cont, dtype=np.int64),
        "continuation_logits": cont_logits.astype(np.float32),
    }
    for i, h in enumerate(hs):
        out[f"hidden.{i}"] = h.astype(np.float32)
    save_file(out, os.path.join(out_dir, f"gemma4_{name}.safetensors"),
              metadata={"variant": name, "transformers": transformers.__version__, "dtype": "float64"})
    if problems:
        raise ValueError("; ".join(problems) + " (outputs written anyway)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", default="testdata/tiny")
    ap.add_argument("--out", default="testdata/reference")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    log(f"gemma4_reference.py: python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, numpy {np.__version__}, safetensors {safetensors.__version__}")
    log(f"device: cpu, model dtype float64; input_ids {INPUT_IDS}; continuation {N_CONT} tokens")
    failed, sums = [], []
    for name in VARIANTS:
        try:
            run_variant(a.tiny, name, a.out, sums)
        except Exception:  # noqa: BLE001
            log(traceback.format_exc())
            failed.append(name)
    log(f"\nfailed: {failed}" if failed else "\nall variants done")
    with open(os.path.join(a.out, "gemma4_reference.out"), "w") as f:
        f.write(LOG.getvalue())
    with open(os.path.join(a.out, "gemma4_tiny.sha256"), "w") as f:
        f.write("\n".join(sums) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
