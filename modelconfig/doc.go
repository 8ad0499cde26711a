// Package modelconfig reads a checkpoint's config.json once into a
// validated, typed description of its text model (Config), the one that
// the runner, the repacker and the verifier all use. It imports nothing of
// qpack's.
//
// It is tolerant where converters differ and strict where the forward pass
// depends on it. Every dimension the math needs must be present (or
// derivable the way transformers and mlx-lm derive it), positive, within a
// named bound (MaxDim, MaxLayers, ...) and consistent with the others;
// anything else is an *Error naming the file and the JSON field. A parse
// goes on after a problem and returns them all as an ErrorList.
//
// # Architectures
//
// A small registry keyed by model_type (Register) maps each spelling to
// the parser of one architecture; text_config.model_type must be one the
// architecture accepts. Unknown types are refused with ErrUnsupported and
// the list of supported ones. A new architecture (gemma4 / gemma4_text)
// registers itself from its own file without touching the others: its
// Parse reads its fields through Object (aliases, bounds and errors come
// with it), fills the common fields and keeps the rest in Config.Extra;
// the checks every architecture must pass (layer pattern length, top-k
// within the experts, heads dividing, ...) then run on the result, their
// errors naming the transformers field names. A Registry other than the
// default (Default().Clone()) serves tests and experiments.
//
//	architecture  top-level model_type                     text_config.model_type
//	qwen3_next    qwen3_next (flat)                        qwen3_next
//	qwen3_5_moe   qwen3_5_moe (nested or flat),            qwen3_5_moe_text (transformers),
//	              qwen3_5 with num_experts (mlx-lm),       qwen3_5 (mlx-lm), qwen3_5_text,
//	              qwen3_5_moe_text (a bare text model)     qwen3_5_moe
//	gemma4        gemma4 (nested), gemma4_text (bare)       gemma4_text
//
// gemma4 keeps its own fields (sliding window, full-layer head dim and KV
// heads, k_eq_v, proportional RoPE, logit softcap) in a *Gemma4 in
// Config.Extra; see gemma4.go.
//
// # Layout
//
// The text model's fields are read from text_config when there is one
// (transformers' and mlx-vlm's wrapped multimodal configs, mlx-lm's
// qwen3_5_moe) and from the top level otherwise (mlx-lm also reads a flat
// qwen3_5_moe). quantization and tie_word_embeddings may be at either level.
//
// # Key aliases and defaults
//
// Where transformers and mlx-lm read a config differently (their defaults,
// or which of two places wins) the config must make the answer the same
// for both, or it is refused. What transformers 5.17 does was checked on
// variants: testdata/transformers (README.md there).
//
//	field                  read from / as                                  when absent
//	num_experts            num_experts (transformers reads no alias here)  required
//	head_dim               head_dim                                        hidden_size / num_attention_heads when
//	                                                                       that is 256 (transformers' default);
//	                                                                       else refused (mlx-lm derives it)
//	rope_theta             qwen3_next: rope_theta, rope_scaling.rope_theta, required (defaults differ)
//	                       rope_parameters.rope_theta, all that are
//	                       present agreeing (mlx-lm reads the top level,
//	                       transformers v5 rope_parameters);
//	                       qwen3_5_moe: rope_parameters.rope_theta (both
//	                       read it first; mlx-lm nothing else)
//	partial_rotary_factor  as rope_theta; qwen3_5_moe: a top-level value   0.25
//	                       other than 0.25 not repeated in rope_parameters
//	                       is refused
//	rope_parameters        per layer type: its full_attention entry        -
//	rope type              rope_type or type: default, mrope (text: plain RoPE)
//	full-attention layers  layer_types (transformers); with an explicit    every full_attention_interval-th layer
//	                       full_attention_interval (mlx-lm) they agree     (4), as mlx-lm
//	tie_word_embeddings    text_config's or the top level's (agreeing)     false
//	quantization           quantization_config (the transformers name;     not quantized
//	                       mlx-lm writes both, identical, and reads
//	                       quantization first), at the top level or in
//	                       text_config
//	quantization[module]   keyed with or without "language_model.",        the global bits / group_size
//	                       "model." or "model.language_model."
//	norm_topk_prob         qwen3_5_moe must not say false                  true (transformers; mlx-lm's qwen3_next
//	                                                                       says false)
//	rms_norm_eps           -                                               1e-6
//	attn_output_gate       -                                               true
//	decoder_sparse_step    qwen3_next only; qwen3_5_moe must be 1          1
//	mlp_only_layers        qwen3_next only; qwen3_5_moe must be empty      none
//
// Two divergences are resolved as mlx-lm resolves them, since qpack runs
// MLX checkpoints and the tensor shapes then decide: a flat qwen3_5_moe
// config (transformers ignores flat fields there and takes its class
// defaults) and a top-level "qwen3_5" with num_experts (transformers builds
// the dense Qwen3.5).
//
// # Quantization
//
// MLX affine only: bits in 2, 3, 4, 5, 6, 8 and group_size in 32, 64, 128,
// both required globally. A per-module entry is an object (its own bits,
// group_size, mode), false (kept in float) or true (the global setting).
// An entry that leaves out bits or group_size takes MLX's default (4, 64)
// only when that equals the global value; otherwise it is ambiguous (mlx
// versions differ) and refused. quant_method (GPTQ, AWQ, FP8, ...) and
// modes other than affine are refused.
//
// # Tensors
//
// Config.CheckTensors checks the config against a checkpoint's tensor
// shapes where only the two together can tell: embedding and LM head rows
// against vocab_size, router rows against num_experts.
package modelconfig
