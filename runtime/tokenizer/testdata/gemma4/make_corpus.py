#!/usr/bin/env python3
"""Writes corpus.jsonl for the Gemma 4 tokenizer check: one JSON object per
line, {"text": s} or {"hex": h} for raw bytes that are not valid UTF-8
(Encode replaces each maximal ill-formed subpart by U+FFFD first, as Python's
bytes.decode("utf-8", "replace") does, so make_expected.py encodes that text).
The Qwen check's strings (testdata/tokcheck/corpus.jsonl) come first, then
Gemma-specific cases. Run locally: python3 make_corpus.py > corpus.jsonl
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN = os.path.join(HERE, "..", "..", "..", "..", "testdata", "tokcheck", "corpus.jsonl")

C = [json.loads(l) for l in open(QWEN, encoding="utf-8") if l.strip()]

# Gemma 4 added tokens written in text, partial ones, and vocab-only tokens.
C += [
    "<bos><|turn>user\nHi there<turn|>\n<|turn>model\n",
    "<|turn>system\n<|think|>\nBe brief.<turn|>",
    "<pad><eos><bos><unk><mask>",
    "<|\"|>quoted<|\"|> and <|\"|><|\"|>",
    "<|tool>declaration:f{a:<|\"|>x<|\"|>}<tool|>",
    "<|tool_call>call:get{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>response:get{v:1}<tool_response|>",
    "<|channel>thought\nhmm<channel|>answer",
    "<|image><|image|><image|> <|audio><|audio|><audio|> <|video|>",
    "<|turn <turn| <|turn>> <<|turn> |turn> <turn|>>",
    "  <|turn>  spaced  <turn|>  ",
    "\n<eos>\n",
    "<start_of_image> <end_of_image> [multimodal] <unused0> <unused6226> <unused6227>",
    "<0x41> <0xE4><0xB8><0xAD> <0xZZ>",
    "<|turn>",
    "x<bos>y<eos>z",
]

# The ▁ convention: literal ▁ in input, spaces around it.
C += [
    "\u2581", "\u2581\u2581hello", "a\u2581b \u2581 c", " \u2581 ", "hello\u2581world hello world",
    " leading space", "  two leading", "trailing space ", "a  b   c    d",
]

# Characters that need byte fallback (likely not in the vocab) and controls.
C += [
    "\U0010FFFF", "\uFFFF\uFFFE", "\U000E0001\U000E0041", "\U00012000\U00012001\U00012002",
    "\U00010000\U00010001 Linear B", "\uE000\uF8FF private use", "\U000F0000\U00100000",
    "\x00\x01\x07\x1b[31mred\x1b[0m\x7f", "\u200b\u200c\u200d\ufeff zero widths",
    "a\u0301\u0302\u0303\u0304\u0305 stacked marks", "\ud7ff\ue000", "\u0378\u0379 unassigned",
    "\U0001FAE8\U0001FAE9 new emoji", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟘𝟙𝟚",
    "\ufb01 \u2460 \uff21\uff22 full width \u3000 ideographic space",
]

# Multilingual.
C += [
    "नमस्ते दुनिया, आप कैसे हैं?", "مرحبا بالعالم، كيف حالك؟", "שלום עולם", "สวัสดีชาวโลก",
    "안녕하세요 세계", "こんにちは世界、カタカナとひらがな", "Привет, мир! Как дела?", "Γειά σου Κόσμε",
    "ሰላም ልዑል", "გამარჯობა მსოფლიო", "வணக்கம் உலகம்", "Xin chào thế giới", "繁體中文與简体中文混合",
    "Ünïcödé façade naïve coöperate Øresund Łódź İstanbul ß ẞ",
]

# Emoji.
C += [
    "👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵🇺🇳 flags", "👍🏻👍🏼👍🏽👍🏾👍🏿", "1️⃣#️⃣*️⃣", "🏳️‍🌈 🏴‍☠️", "😀😃😄😁😆😅🤣😂🙂🙃",
]

# Code.
C += [
    "def f(x):\n    if x > 0:\n        return [i ** 2 for i in range(x)]\n    return None\n",
    "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {\n\t\tx[i] = i\n\t}\n}\n",
    '{"key": [1, 2.5, true, null], "nested": {"a": "b\\n"}}',
    "<html>\n  <body>\n    <div class=\"x\">&nbsp;&lt;tag&gt;</div>\n  </body>\n</html>",
    "SELECT a, b FROM t WHERE c = 'x' AND d >= 10 ORDER BY a DESC;",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "    four\n        eight\n            twelve\n\t\ttabs\n",
]

# Whitespace runs and long words.
for n in (1, 2, 3, 7, 16, 31, 32, 33, 64, 100):
    C.append(" " * n)
    C.append("\n" * n)
    C.append("x" + " " * n + "y")
for n in (5, 29, 30, 31, 50):
    C.append("\t" * n)
C += [" \n" * 40, "\r\n" * 20, " \t \n " * 10, "a\n\n\n\nb\n\n\n\n\n\n\nc"]
C += [
    "a" * 1000, "ab" * 500, "x y " * 300, "pneumonoultramicroscopicsilicovolcanoconiosis" * 20,
    "0123456789" * 50, "!?" * 200, "中" * 300, "😀" * 100,
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
     "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
     "aliquip ex ea commodo consequat. ") * 12,
]

out = [{"text": s} for s in C]
# Raw bytes that are not valid UTF-8.
for h in ["ff", "c3", "e4b8", "61ff62", "eda080", "f4908080", "c0af", "e4b8adffe4b8", "f09f98",
          "f09f9880f09f", "68656c6c6ff0", "80808080", "3c7c7475726e3eff3c7475726e7c3e", "e282ace282"]:
    out.append({"hex": h})
for o in out:
    print(json.dumps(o, ensure_ascii=False))
