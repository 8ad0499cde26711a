// Package gemma4 is the runner's Gemma 4 text MoE architecture (model_type
// gemma4 with text_config gemma4_text, or a bare gemma4_text; 26B-A4B):
// sliding-window and full attention layers with their own head dims and KV
// heads (attention_k_eq_v on the full ones), q/k/v norms, default RoPE on
// the sliding layers and proportional partial RoPE on the full ones; in
// every layer a dense GeGLU MLP in parallel with routed GeGLU experts
// (router: weightless RMSNorm × scale × hidden^-0.5, softmax, top-k,
// renormalised, × per_expert_scale), a per-layer scalar on the residual
// stream, a scaled embedding, tied head and final logit softcap. The
// semantics are transformers 5.17's (models/gemma4), facts in
// ../shared/reference/gemma4.md.
package gemma4
