// Package tokenizer implements the BPE tokenizers that models ship as a
// Hugging Face tokenizer.json: the byte-level ones of Qwen2, Qwen2.5, Qwen3
// and Qwen3-Next, and the SentencePiece-style ones with the ▁ (U+2581)
// convention and byte fallback of Gemma 4 (and Llama-style files).
//
// Supported tokenizer.json features: model type BPE with a vocab and merges
// written either as "a b" strings or as ["a", "b"] pairs, with unk_token,
// fuse_unk, ignore_merges and byte_fallback (which needs all 256 <0xNN>
// tokens in the vocab); normalizer null, NFC, NFD, NFKC, NFKD, Replace (String
// pattern), Prepend or a Sequence of those; pre_tokenizer Split (Regex or
// String pattern, behaviours Isolated, Removed, MergedWithPrevious,
// MergedWithNext, not inverted), ByteLevel (add_prefix_space, use_regex with
// the GPT-2 pattern), Metaspace (replacement, prepend_scheme always, first or
// never, split) or a Sequence of those; added_tokens (special or not, with
// lstrip/rstrip), matched by exact string on the raw text before
// normalization, leftmost then longest first (so one marked normalized is
// refused under a Replace or Prepend normalizer); decoder ByteLevel, or
// Replace (String pattern), Metaspace, ByteFallback, Fuse and Strip in the
// orders real files use (per-token steps, then ByteFallback, then Fuse, then
// one Strip with stop 0). Anything else is refused with an error naming the
// file and the feature, so a model whose tokenizer we cannot reproduce is
// never run with a silently different one. The post_processor is ignored: no
// BOS/EOS is added.
//
// Encode replaces invalid UTF-8 in its input by U+FFFD before anything else.
// Decode follows the decoder: for ByteLevel, bytes that are not valid UTF-8
// become U+FFFD, one per maximal ill-formed subpart (the rule Rust's
// String::from_utf8_lossy follows); for ByteFallback, a run of byte tokens
// that is not valid UTF-8 as a whole becomes one U+FFFD per byte, as the
// tokenizers library does. Ids the tokenizer does not know contribute
// nothing. The StreamDecoder gives the same text piece by piece.
//
// The pre-tokenizer regexes need lookahead (`\s+(?!\S)`), which RE2 lacks, so
// they run on github.com/dlclark/regexp2, whose match positions are rune
// indices; they are converted to byte offsets here. model.vocab and
// model.merges are scanned directly (filejson.go): encoding/json took most of
// the load time of Gemma 4's 262,144 tokens and 514,906 merges.
package tokenizer
