#!/usr/bin/env python3
"""Reference outputs of the tiny test checkpoints, computed with HF transformers.

Usage (on a machine with torch, transformers 5.x, safetensors, numpy; no network):

    python3 testdata/reference/make_reference.py --tiny testdata/tiny --out testdata/reference

For every variant directory of testdata/tiny (MLX layout, see notes/TINY.md) this script
  1. reads the safetensors files with the `safetensors` package,
  2. dequantizes MLX affine tensors itself in numpy (LSB-first bit stream per row in the
     little-endian uint32 words; w = scale * q + bias per group), independently of any Go code,
  3. converts MLX names/layouts to the state dict of the transformers model (experts fused
     into gate_up_proj/down_proj or split per expert, whichever the model has; conv1d
     [C,K,1] -> [C,1,K]; 1 subtracted from the zero-centred RMSNorm weights; the gated norm
     unchanged), and loads it strictly: every model key filled, every checkpoint tensor used,
  4. runs the model on the CPU in float64 (transformers keeps its own float32 internals in
     the RMSNorms, the router softmax and the chunked gated-delta rule), eval mode, no cache,
     teacher forcing on INPUT_IDS, with the torch (non-FLA) Gated DeltaNet path,
  5. writes <variant>.safetensors: input_ids I64 [T], logits F32 [T,V], hidden.L F32 [T,H]
     (output of decoder layer L, before the final norm), greedy I64 [T],
and logs what ran to make_reference.out. It also writes tokenizer_cases.json: encodings of a
few strings by the `tokenizers` library with the tiny tokenizer.json.
"""

import argparse
import importlib
import io
import json
import os
import platform
import sys
import traceback

import numpy as np
import torch
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

import transformers

VARIANTS = [
    "qwen3_next-f32",
    "qwen3_next-q4g64",
    "qwen3_next-q8g32",
    "qwen3_5_moe-f32",
    "qwen3_5_moe-q4g32",
    "qwen3_5_moe-q8g64",
]

# Fixed teacher-forcing input (T = 12, ids < 384): <|im_start|> then assorted regular
# tokens, <|im_end|>, the last embedding row (383, padding) and id 0.
INPUT_IDS = [357, 117, 198, 44, 256, 310, 72, 355, 358, 383, 0, 261]

LOG = io.StringIO()


def log(*args):
    s = " ".join(str(a) for a in args)
    print(s, flush=True)
    LOG.write(s + "\n")


# ----------------------------------------------------------------------------------------
# Reading the MLX checkpoint


def read_checkpoint(d):
    """Returns {name: numpy array} (BF16 widened to float32 exactly, U32 as uint32)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), framework="pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                if t.dtype == torch.bfloat16:
                    a = t.to(torch.float32).numpy()
                elif t.dtype == torch.float32:
                    a = t.numpy()
                elif str(t.dtype) == "torch.uint32":
                    a = t.view(torch.int32).numpy().view(np.uint32)
                else:
                    raise ValueError(f"{d}/{fn}: tensor {k}: unexpected dtype {t.dtype}")
                if k in out:
                    raise ValueError(f"{d}: tensor {k} in two shards")
                out[k] = a.copy()
    return out


def dequantize(w, scales, biases, bits, group):
    """MLX affine dequantization in numpy, float64. w: uint32 [..., out, in*bits/32]."""
    lead = w.shape[:-1]
    n_in = w.shape[-1] * 32 // bits
    if scales.shape != lead + (n_in // group,) or biases.shape != scales.shape:
        raise ValueError(f"scales {scales.shape} / biases {biases.shape} do not fit weight {w.shape} "
                         f"at {bits} bits, group {group}")
    raw = np.ascontiguousarray(w.astype("<u4")).view(np.uint8)           # little-endian bytes
    bitstream = np.unpackbits(raw, axis=-1, bitorder="little")           # [..., out, in*bits]
    codes = bitstream.reshape(lead + (n_in, bits)).astype(np.int64)
    q = (codes << np.arange(bits, dtype=np.int64)).sum(axis=-1)         # element i = bits [i*b, i*b+b)
    s = np.repeat(scales.astype(np.float64), group, axis=-1)
    b = np.repeat(biases.astype(np.float64), group, axis=-1)
    return s * q + b


def to_float_weights(raw, cfg):
    """Dequantizes every module with .scales; returns {name: float64 array} with MLX names."""
    quant = cfg.get("quantization")
    out = {}
    done = set()
    for k in sorted(raw):
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        module = k[: -len(".weight")] if k.endswith(".weight") else None
        if module is not None and module + ".scales" in raw:
            if quant is None:
                raise ValueError(f"{k}: quantized tensor but config.json has no quantization")
            ov = quant.get(module)
            bits, group = (ov["bits"], ov["group_size"]) if isinstance(ov, dict) else (quant["bits"], quant["group_size"])
            w = raw[k]
            s, b = raw[module + ".scales"], raw[module + ".biases"]
            n_in = s.shape[-1] * group
            if w.dtype != np.uint32 or w.shape[-1] * 32 != n_in * bits:
                raise ValueError(f"{k}: weight {w.dtype} {w.shape} inconsistent with {bits} bits group {group}")
            out[k] = dequantize(w, s, b, bits, group)
            done.update([k, module + ".scales", module + ".biases"])
        else:
            out[k] = raw[k].astype(np.float64)
            done.add(k)
    left = set(raw) - done
    if left:
        raise ValueError(f"unused tensors: {sorted(left)}")
    return out


# ----------------------------------------------------------------------------------------
# MLX names -> transformers state dict

ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def to_hf(weights, arch, model_keys, model_shapes, down_transposed):
    """Maps MLX names/layouts to the model's state-dict names. Returns (state dict, used names)."""
    if arch == "qwen3_next":
        body, head = "model.", "lm_head."
    else:
        body, head = "language_model.model.", "language_model.lm_head."
    # Prefix the model uses for its body: "model." or "model.language_model."
    hf_body = "model.language_model." if any(k.startswith("model.language_model.") for k in model_keys) else "model."
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in model_keys)
    sd, used = {}, set()
    experts = {}
    for k, v in weights.items():
        if k.startswith(head):
            sd["lm_head." + k[len(head):]] = v
            used.add(k)
            continue
        if not k.startswith(body):
            raise ValueError(f"tensor {k} outside {body!r} / {head!r}")
        rel = k[len(body):]
        if ".mlp.switch_mlp." in rel:
            layer, rest = rel.split(".mlp.switch_mlp.")
            experts.setdefault(layer, {})[rest] = v
            used.add(k)
            continue
        if rel.endswith("conv1d.weight"):
            v = np.transpose(v, (0, 2, 1))  # [C,K,1] -> [C,1,K]
        elif rel == "norm.weight" or rel.endswith(ZERO_CENTRED):
            v = v - 1.0  # MLX stores 1+w; transformers' Qwen3NextRMSNorm multiplies by (1+w)
        sd[hf_body + rel] = v
        used.add(k)
    for layer, e in experts.items():
        g, u, dn = e["gate_proj.weight"], e["up_proj.weight"], e["down_proj.weight"]  # [E,I,H],[E,I,H],[E,H,I]
        if down_transposed:
            dn = np.transpose(dn, (0, 2, 1))
        p = hf_body + layer + ".mlp.experts."
        if fused:
            gu = np.concatenate([g, u], axis=1)  # [E, 2I, H], rows 0..I-1 = gate
            if tuple(model_shapes[p + "gate_up_proj"]) != gu.shape and tuple(model_shapes[p + "gate_up_proj"]) == gu.shape[:1] + gu.shape[:0:-1]:
                gu = np.transpose(gu, (0, 2, 1))
            sd[p + "gate_up_proj"] = gu
            sd[p + "down_proj"] = dn
        else:
            for i in range(g.shape[0]):
                sd[p + f"{i}.gate_proj.weight"] = g[i]
                sd[p + f"{i}.up_proj.weight"] = u[i]
                sd[p + f"{i}.down_proj.weight"] = dn[i]
    return sd, used


# ----------------------------------------------------------------------------------------
# Model construction


MODELING = ("transformers.models.qwen3_next.modeling_qwen3_next",
            "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")
CALLS = {}  # "module.function" -> number of calls, for the torch_* gated-delta / conv functions


def torch_causal_conv1d(x, weight, bias=None, activation=None, **kwargs):
    """Depthwise causal conv over x [B,C,T] with weight [C,K], as transformers' own torch
    fallback does it (nn.Conv1d with padding K-1, first T outputs, then SiLU). Used only if the
    modeling module offers no torch version of causal_conv1d_fn."""
    T, K = x.shape[-1], weight.shape[-1]
    y = torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias, padding=K - 1, groups=x.shape[1])[..., :T]
    if activation in ("silu", "swish"):
        y = torch.nn.functional.silu(y)
    elif activation is not None:
        raise ValueError(f"activation {activation}")
    return y


KERNELS = {  # module-level kernel name -> the torch fallback's name in the modeling module
    "causal_conv1d_fn": "torch_causal_conv1d_fn",
    "causal_conv1d_update": "torch_causal_conv1d_update",
    "chunk_gated_delta_rule": "torch_chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule": "torch_recurrent_gated_delta_rule",
}


def describe_fn(fn):
    if fn is None:
        return "None"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def force_torch_paths():
    """Points every causal-conv / gated-delta kernel name of the modeling modules at a torch
    implementation (the module's own torch_* fallback; for causal_conv1d_fn, if the module has
    none, torch_causal_conv1d above), disables FusedRMSNormGated, and wraps each chosen function
    with a call counter so the log shows what ran."""
    notes = []
    for mod in MODELING:
        m = importlib.import_module(mod)
        short = mod.rsplit(".", 1)[1]
        if getattr(m, "FusedRMSNormGated", None) is not None:
            notes.append(f"{short}.FusedRMSNormGated was {describe_fn(m.FusedRMSNormGated)}; disabled")
        if hasattr(m, "FusedRMSNormGated"):
            m.FusedRMSNormGated = None
        if hasattr(m, "is_fast_path_available"):
            m.is_fast_path_available = False
        for name, fallback in KERNELS.items():
            cur = getattr(m, name, None)
            own = cur is not None and (getattr(cur, "__module__", "") == mod or getattr(cur, "__name__", "").startswith("torch_"))
            if own:
                chosen, how = cur, "kept (the module's own torch code)"
            elif getattr(m, fallback, None) is not None:
                chosen, how = getattr(m, fallback), f"replaced by {short}.{fallback}"
            elif name == "causal_conv1d_fn":
                chosen, how = torch_causal_conv1d, "replaced by make_reference.torch_causal_conv1d"
            else:
                chosen, how = None, "no torch fallback found; left None"
            notes.append(f"{short}.{name}: was {describe_fn(cur)}; {how}")
            if chosen is None:
                setattr(m, name, None)
                continue
            key = f"{short}.{name}"
            CALLS[key] = 0

            def counted(*args, _fn=chosen, _key=key, **kwargs):
                CALLS[_key] += 1
                return _fn(*args, **kwargs)
            counted.__name__ = getattr(chosen, "__name__", name)
            counted.__module__ = getattr(chosen, "__module__", mod)
            setattr(m, name, counted)
            if getattr(m, fallback, None) is not None:
                setattr(m, fallback, counted)  # code that calls the torch_* name directly counts too
    return notes


def build_model(arch, cfg):
    cfg = {k: v for k, v in cfg.items() if k not in ("quantization", "quantization_config")}
    if arch == "qwen3_next":
        from transformers import Qwen3NextConfig as C, Qwen3NextForCausalLM as M
        d = cfg
    else:
        from transformers import Qwen3_5MoeTextConfig as C, Qwen3_5MoeForCausalLM as M
        d = dict(cfg["text_config"])
    d = {k: v for k, v in d.items() if k not in ("dtype", "torch_dtype")}
    try:
        conf = C(**d)
        how = f"{C.__name__}(**cfg)"
    except Exception as e:  # noqa: BLE001
        log(f"  {C.__name__}(**cfg) failed ({type(e).__name__}: {e}); using from_dict")
        conf = C.from_dict(d)
        how = f"{C.__name__}.from_dict(cfg)"
    for attr, val in (("_attn_implementation", "eager"), ("_experts_implementation", "eager")):
        try:
            setattr(conf, attr, val)
        except Exception as e:  # noqa: BLE001
            log(f"  could not set {attr}: {e}")
    torch.manual_seed(0)
    model = M(conf)
    model.eval()
    return model, conf, how, M.__name__


def describe_impl(model, conf):
    layers = model.model.layers
    lin = next(l for l in layers if hasattr(l, "linear_attn")).linear_attn
    full = next(l for l in layers if hasattr(l, "self_attn"))
    moe = layers[0].mlp
    fns = {k: f"{getattr(v, '__module__', '?')}.{getattr(v, '__name__', repr(v))}"
           for k, v in vars(lin).items() if not k.startswith("_") and (callable(v) or v is None)
           and not isinstance(v, torch.nn.Module)}
    return {
        "gated_deltanet_class": type(lin).__name__,
        "gated_deltanet_function_attrs": fns,
        "gated_norm": type(lin.norm).__name__,
        "attn_implementation": getattr(conf, "_attn_implementation", "?"),
        "experts_implementation": getattr(conf, "_experts_implementation", "?"),
        "experts_class": type(moe.experts).__name__,
        "layer_types": list(getattr(conf, "layer_types", [])),
        "rope_parameters": getattr(conf, "rope_parameters", None),
        "full_attn_class": type(full.self_attn).__name__,
    }


# ----------------------------------------------------------------------------------------
# Independent numpy check of the MoE block (catches a wrong expert layout)


def np_silu(x):
    return x / (1.0 + np.exp(-x))


def moe_numpy(x, w, prefix, top_k, norm_topk):
    """x [N,H] float64; w MLX float weights; prefix like 'model.layers.0.mlp.'"""
    logits = x @ w[prefix + "gate.weight"].T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for n in range(x.shape[0]):
        top = np.argsort(-p[n], kind="stable")[:top_k]
        wt = p[n, top]
        if norm_topk:
            wt = wt / wt.sum()
        for e, we in zip(top, wt):
            g = w[prefix + "switch_mlp.gate_proj.weight"][e] @ x[n]
            u = w[prefix + "switch_mlp.up_proj.weight"][e] @ x[n]
            out[n] += we * (w[prefix + "switch_mlp.down_proj.weight"][e] @ (np_silu(g) * u))
    se = prefix + "shared_expert."
    s = w[se + "down_proj.weight"] @ (np_silu(w[se + "gate_proj.weight"] @ x.T) * (w[se + "up_proj.weight"] @ x.T))
    gate = 1.0 / (1.0 + np.exp(-(x @ w[prefix + "shared_expert_gate.weight"].T)))
    return out + gate * s.T


def check_moe(model, w, arch, conf):
    body = "model." if arch == "qwen3_next" else "language_model.model."
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, conf.hidden_size))
    want = moe_numpy(x, w, body + "layers.0.mlp.", conf.num_experts_per_tok, True)
    with torch.no_grad():
        got = model.model.layers[0].mlp(torch.from_numpy(x)[None].to(torch.float64))
    if isinstance(got, tuple):
        got = got[0]
    got = got[0].double().numpy()
    return float(np.abs(got - want).max()), float(np.abs(want).max())


# ----------------------------------------------------------------------------------------


def run_variant(tiny, name, out_dir, f32_logits):
    d = os.path.join(tiny, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg["model_type"]
    log(f"\n== {name} ({arch})")
    raw = read_checkpoint(d)
    w = to_float_weights(raw, cfg)
    nq = sum(1 for k in raw if k.endswith(".scales"))
    log(f"  {len(raw)} tensors read, {nq} quantized modules dequantized in numpy")

    model, conf, how, cls = build_model(arch, cfg)
    log(f"  model {cls} from {how}")
    impl = describe_impl(model, conf)
    for k, v in impl.items():
        log(f"  {k}: {v}")
    if impl["layer_types"] != ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]:
        raise ValueError(f"unexpected layer types {impl['layer_types']}")
    msd = model.state_dict()
    keys = set(msd)
    shapes = {k: tuple(v.shape) for k, v in msd.items()}

    chosen = None
    for down_t in (False, True):
        sd, used = to_hf(w, arch, keys, shapes, down_t)
        missing, unexpected = sorted(keys - set(sd)), sorted(set(sd) - keys)
        if missing or unexpected:
            log("  model state_dict keys (first 40):", sorted(keys)[:40])
            raise ValueError(f"state dict mismatch: missing {missing[:20]} ({len(missing)}), unexpected {unexpected[:20]} ({len(unexpected)})")
        bad = [(k, shapes[k], sd[k].shape) for k in sd if shapes[k] != sd[k].shape]
        if bad:
            raise ValueError(f"shape mismatch: {bad[:10]}")
        if set(w) - used:
            raise ValueError(f"checkpoint tensors not used: {sorted(set(w) - used)}")
        model = model.to(torch.float64)
        res = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=True)
        err, scale = check_moe(model, w, arch, conf)
        log(f"  load_state_dict strict: {res}; experts down_proj transposed={down_t}: numpy MoE check max|diff| {err:.3g} (max|y| {scale:.3g})")
        if err <= 1e-5 * max(1.0, scale):
            chosen = down_t
            break
    if chosen is None:
        raise ValueError("the MoE block disagrees with the numpy reference in both expert layouts")

    hidden = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        def hook(mod, inp, out, i=i):
            hidden[i] = (out[0] if isinstance(out, tuple) else out).detach()
        hooks.append(layer.register_forward_hook(hook))
    router = {}
    for i, layer in enumerate(model.model.layers):
        def rhook(mod, inp, out, i=i):
            router[i] = (out[0] if isinstance(out, tuple) else out).detach()
        hooks.append(layer.mlp.gate.register_forward_hook(rhook))

    ids = torch.tensor([INPUT_IDS], dtype=torch.long)
    for key in CALLS:
        CALLS[key] = 0
    def dump_source(why):
        import inspect
        lin = next(l for l in model.model.layers if hasattr(l, "linear_attn")).linear_attn
        log(f"  {why}; GatedDeltaNet.forward source follows")
        log(inspect.getsource(type(lin).forward))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
    except Exception:
        dump_source("forward failed")
        raise
    ran = {k: v for k, v in CALLS.items() if v}
    log(f"  kernel calls during the forward (torch implementations): {ran}")
    n_lin = sum(1 for l in model.model.layers if hasattr(l, "linear_attn"))
    conv = sum(v for k, v in ran.items() if "conv1d" in k)
    chunk = sum(v for k, v in ran.items() if "chunk_gated_delta" in k)
    if chunk != n_lin or conv not in (0, n_lin):
        dump_source(f"expected {n_lin} chunked gated-delta calls, saw {chunk} (conv {conv})")
        raise ValueError("the torch gated-delta path did not run as expected")
    for h in hooks:
        h.remove()
    logits = out.logits[0].double().numpy()
    T = len(INPUT_IDS)
    tensors = {"input_ids": np.array(INPUT_IDS, dtype=np.int64),
               "logits": logits.astype(np.float32),
               "greedy": logits.argmax(-1).astype(np.int64)}
    for i in range(len(model.model.layers)):
        h = hidden[i][0].double().numpy()
        assert h.shape == (T, conf.hidden_size)
        tensors[f"hidden.{i}"] = h.astype(np.float32)
    log(f"  logits: max|logit| {np.abs(logits).max():.4f}, std {logits.std():.4f}")
    log("  hidden std per layer: " + " ".join(f"{tensors[f'hidden.{i}'].std():.4f}" for i in range(len(hidden))))
    log("  hidden max|h| per layer: " + " ".join(f"{np.abs(tensors[f'hidden.{i}']).max():.3f}" for i in range(len(hidden))))
    # Routing margin: gap between the k-th and (k+1)-th router probability (small = fragile).
    k = conf.num_experts_per_tok
    margins = []
    for i, r in router.items():
        p = r.double()
        if p.min() < 0 or abs(float(p.sum(-1).mean()) - 1) > 1e-3:  # raw logits: softmax them
            p = torch.softmax(p, dim=-1)
        s = torch.sort(p, dim=-1, descending=True).values
        margins.append(float((s[:, k - 1] - s[:, k]).min()))
    log(f"  min router top-{k} margin (prob) per layer: " + " ".join(f"{m:.2e}" for m in margins))
    top2 = np.sort(logits, axis=-1)[:, -2:]
    log(f"  min greedy margin (logit1-logit2): {float((top2[:, 1] - top2[:, 0]).min()):.4f}")
    log(f"  greedy: {tensors['greedy'].tolist()}")
    if f32_logits is not None:
        log(f"  max|logits - f32 variant logits|: {np.abs(logits - f32_logits).max():.4f}")
    meta = {"variant": name, "transformers": transformers.__version__, "torch": torch.__version__,
            "dtype": "float64 model (transformers' float32 internals)", "experts_down_transposed": str(chosen)}
    save_file(tensors, os.path.join(out_dir, name + ".safetensors"), metadata=meta)
    return logits


def tokenizer_cases(tiny, out_dir):
    try:
        from tokenizers import Tokenizer
        import tokenizers
    except Exception as e:  # noqa: BLE001
        log(f"\ntokenizers not available: {e}")
        return
    tok = Tokenizer.from_file(os.path.join(tiny, "qwen3_next-f32", "tokenizer.json"))
    texts = [
        "Hello, world! How are you today?",
        "The quick brown fox jumps over the lazy dog.",
        "def add(a, b):\n    return a + b\n",
        "func main() {\n\tfmt.Println(add(1, 2))\n}",
        "Numbers: 2025 and 3.14, tokens... THE END",
        "  leading spaces, trailing spaces   ",
        "naïve café, Ünïcödé — and 中文 and emoji 🙂",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "I'm sure they'll say it's fine, you've seen it, we'd know.\r\n\r\nline",
        "",
    ]
    cases = []
    for t in texts:
        enc = tok.encode(t, add_special_tokens=False)
        cases.append({"text": t, "ids": enc.ids, "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
    chat = None
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(os.path.join(tiny, "qwen3_next-f32"))
        msgs = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]
        chat = {"messages": msgs,
                "prompt": at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                "prompt_no_think": at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)}
        chat["ids"] = at(chat["prompt"], add_special_tokens=False)["input_ids"]
    except Exception as e:  # noqa: BLE001
        log(f"\nchat template via AutoTokenizer failed: {type(e).__name__}: {e}")
    with open(os.path.join(out_dir, "tokenizer_cases.json"), "w") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "tokenizer": "testdata/tiny/*/tokenizer.json",
                   "cases": cases, "chat": chat}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"\ntokenizer cases: {len(cases)} strings encoded with tokenizers {tokenizers.__version__}"
        + (f"; chat prompt ids {chat['ids']}" if chat else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", default="testdata/tiny")
    ap.add_argument("--out", default="testdata/reference")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    log(f"make_reference.py: python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, numpy {np.__version__}, safetensors {safetensors.__version__}")
    log(f"device: cpu, model dtype float64; input_ids {INPUT_IDS}")
    for n in force_torch_paths():
        log("  " + n)
    try:
        import fla  # noqa: F401
        log("  flash-linear-attention is installed (its kernels were disabled above)")
    except Exception:  # noqa: BLE001
        log("  flash-linear-attention not installed: torch gated-delta path")
    failed = []
    f32 = {}
    for name in VARIANTS:
        if a.only and name not in a.only.split(","):
            continue
        try:
            arch = name.split("-")[0]
            lg = run_variant(a.tiny, name, a.out, f32.get(arch))
            if name.endswith("-f32"):
                f32[arch] = lg
        except Exception:  # noqa: BLE001
            log(traceback.format_exc())
            failed.append(name)
    try:
        tokenizer_cases(a.tiny, a.out)
    except Exception:  # noqa: BLE001
        log(traceback.format_exc())
    log(f"\nfailed: {failed}" if failed else "\nall variants done")
    with open(os.path.join(a.out, "make_reference.out"), "w") as f:
        f.write(LOG.getvalue())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
