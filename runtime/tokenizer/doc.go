// Package tokenizer implements the byte-level BPE tokenizers that Qwen2,
// Qwen2.5, Qwen3 and Qwen3-Next ship as a Hugging Face tokenizer.json.
//
// Supported tokenizer.json features: model type BPE with a vocab (token string
// in the GPT-2 byte-to-unicode form -> id) and merges written either as
// "a b" strings or as ["a", "b"] pairs; normalizer null, NFC, NFD, NFKC, NFKD
// or a Sequence of those; pre_tokenizer Split (Regex or String pattern,
// behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext, not
// inverted), ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern) or a
// Sequence of those; added_tokens (special or not, with lstrip/rstrip), matched
// by exact string on the raw text before normalization, leftmost then longest
// first; decoder ByteLevel. Anything else is refused with an error naming the
// file, so a model whose tokenizer we cannot reproduce is never run with a
// silently different one. The post_processor is ignored: no BOS/EOS is added.
//
// Encode replaces invalid UTF-8 in its input by U+FFFD before anything else.
// Decode and the StreamDecoder turn byte sequences that are not valid UTF-8
// into U+FFFD, one per maximal ill-formed subpart (the rule Rust's
// String::from_utf8_lossy follows), and ids the tokenizer does not know
// contribute nothing.
//
// The pre-tokenizer regexes need lookahead (`\s+(?!\S)`), which RE2 lacks, so
// they run on github.com/dlclark/regexp2, whose match positions are rune
// indices; they are converted to byte offsets here.
package tokenizer
