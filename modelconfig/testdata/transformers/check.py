# Loads each cfgs/*/config.json with transformers' AutoConfig and prints
# what it resolves for the text model (or the error).
import json, os, sys
import transformers
from transformers import AutoConfig
print("transformers", transformers.__version__)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cfgs")
for name in sorted(os.listdir(root)):
    try:
        c = AutoConfig.from_pretrained(os.path.join(root, name))
        t = c.get_text_config() if hasattr(c, "get_text_config") else c
        out = {k: getattr(t, k, None) for k in ["model_type", "hidden_size", "num_hidden_layers", "num_experts", "num_experts_per_tok", "head_dim", "layer_types", "rope_parameters", "tie_word_embeddings"]}
        out["layer_types"] = "".join("F" if x == "full_attention" else "l" for x in (out["layer_types"] or []))
        out["top"] = type(c).__name__
        print(name, json.dumps(out, default=str))
    except Exception as e:
        print(name, "ERROR", type(e).__name__, str(e)[:300])
