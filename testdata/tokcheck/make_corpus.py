#!/usr/bin/env python3
"""Writes corpus.jsonl: the strings the Go tokenizer is checked on against
tiktoken (one JSON string per line). Hand-written cases plus a few
systematic families (whitespace runs, digit runs, NFD text). Run locally:
    python3 make_corpus.py > corpus.jsonl
"""
import json
import unicodedata

C = []

# Plain English, punctuation, contractions (all cases and the curly apostrophe).
C += [
    "Hello, world!",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they're right, and we've said it's done; he'd agree.",
    "I'M SURE YOU'LL SEE THEY'RE RIGHT, AND WE'VE SAID IT'S DONE; HE'D AGREE.",
    "Don't, can't, won't, shouldn't've, y'all, o'clock, rock'n'roll",
    "It\u2019s a curly apostrophe: don\u2019t",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'mL 'lL 'D",
    "it'sx 'sss '''s ''",
    "He said \"yes\" -- and then 'no'.",
    "a", " ", "  ", "\n", "\t", "x ", " x", "\u00a0", "'", "''",
    "Mr. Smith's dog's bone",
    "e.g. i.e. etc... ?!?! ... ,,, ;;",
    "(parenthesised) [bracketed] {braced} <angled>",
    "email: someone@example.com, url: https://example.org/a/b?c=d&e=f#g",
    "#hashtag @mention $dollar %percent ^caret &amp *star",
    "Title Case Words Everywhere In This Sentence",
    "ALLCAPSWORD lowercaseword MiXeDcAsE",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "A sentence with    multiple     spaces.",
    "Tab\tseparated\tvalues\there",
    "Line one\nLine two\nLine three",
    "Windows\r\nline\r\nendings\r\n",
    "Old Mac\rline\rendings",
    "Trailing spaces   ",
    "Trailing newline\n",
    "Trailing newlines\n\n\n",
    "   Leading spaces",
    "\n\nLeading newlines",
    " \n \n mixed \t\n\t whitespace \n",
    "word\n\n\nword",
    "end.  \n  start",
    "space before newline \nnext",
    "  \n",
    "\t\t\tdeep indent",
    "-- --- ---- ===== ***** _____",
    "!!!???...,,,",
    "a-b_c.d/e\\f|g~h`i",
    "The year 2024 had 366 days; pi ~ 3.14159265358979.",
]

# Numbers.
C += [
    "0", "7", "42", "123", "1234", "12345", "1234567890",
    "3.14", "-273.15", "+1", "1e10", "6.02e23", "0x1F", "0b1010", "1_000_000",
    "1,234,567.89", "$19.99", "100%", "12:30:45", "2024-01-15T08:30:00Z",
    "v1.2.3-rc.4+build.5", "192.168.0.1", "IPv6 ::1 and fe80::1%eth0",
    "\u0661\u0662\u0663 (Arabic-Indic digits)", "\u0967\u0968\u0969 (Devanagari digits)",
    "\uff11\uff12\uff13 fullwidth digits", "\u00bd \u00bc \u2153 vulgar fractions", "\u2460\u2461\u2462 circled", "\u00b2\u00b3 superscripts",
    "Phone: +1 (555) 123-4567",
    "abc123def456", "x1y22z333",
]

# Code.
C += [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n\tprint(i)\n",
    "if (x > 0 && y < 10) { return x * y; }",
    "func main() {\n\tfmt.Println(\"hello\")\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "const f = (x) => x ** 2; // square",
    "<div class=\"container\"><p>Text &amp; more</p></div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    indented = 4\n        indented = 8\n",
    "x=1;y=2;z=x+y",
    "a==b!=c<=d>=e->f=>g::h",
    "/* block comment */ // line comment # hash comment",
    "import numpy as np\nnp.array([[1.0, 2.0], [3.0, 4.0]])",
    "$ ls -la | grep foo > out.txt 2>&1",
    "```python\nprint('hi')\n```",
    "git commit -m \"Fix: handle edge-case (#123)\"",
    "regex: ^[a-zA-Z0-9_]+@\\w+\\.(com|org)$",
    "snake_case_name camelCaseName PascalCaseName SCREAMING_SNAKE kebab-case-name",
    "   \n\n    def f():\n        pass\n\n\n",
    "matrix[i][j] += alpha * (A[i][k] * B[k][j]);",
    "<|fake_token|> <|im_start <im_end|> |im_end|",
]

# CJK and other scripts.
C += [
    "你好，世界！",
    "我爱自然语言处理。",
    "今天天气很好，我们去公园散步吧。",
    "こんにちは、世界。",
    "カタカナとひらがなと漢字",
    "안녕하세요 세계",
    "한국어 문장입니다.",
    "Привет, мир! Как дела?",
    "Ελληνικά: Καλημέρα κόσμε",
    "שלום עולם",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Xin chào thế giới",
    "Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ",
    "ქართული ენა",
    "Հայերեն լեզու",
    "ᚠᚢᚦᚨᚱᚲ runes",
    "𝐇𝐞𝐥𝐥𝐨 𝕨𝕠𝕣𝕝𝕕 (math alphanumerics)",
    "Mixed 中文 and English 混合 text.",
    "日本語とEnglishと한국어",
    "Ünïcödé àçcéñtś: café naïve résumé façade",
    "Straße, Größe, Maß",
    "ǅ ǈ ǋ titlecase digraphs",
    "İstanbul ıi İI",
    "中文标点：「引号」『书名』（括号）【方括号】",
    "全角ＡＢＣ　全角スペース",
    "繁體中文與简体中文",
    "\u4e00\u4e01\u4e02\u4e03\u4e04\u4e05",
    "𠀀𠀁𠀂 CJK extension B",
]

# Emoji and symbols.
C += [
    "😀", "😀😀😀", "Hello 👋 world 🌍!",
    "👨‍👩‍👧‍👦 family ZWJ sequence",
    "🏳️‍🌈 flag with variation selector",
    "👍🏽 skin tone",
    "🇺🇸🇯🇵 regional indicators",
    "♥ ♦ ♣ ♠ ★ ☆ ✓ ✗",
    "→ ← ↑ ↓ ⇒ ⇔ ∀ ∃ ∈ ∉ ∑ ∏ √ ∞ ≈ ≠ ≤ ≥",
    "© ® ™ § ¶ † ‡ • … ‰ ′ ″",
    "€ £ ¥ ₹ ₽ ₿ ¢",
    "Emoji in text😀without spaces😀here",
    "🤖🧠💡 AI",
    "keycap 1️⃣ 2️⃣ #️⃣",
    "\u200b zero\u200bwidth \u200c\u200d joiners \ufeff BOM",
    "control \x01\x02\x7f chars",
    "\u2028line separator\u2029paragraph separator",
    "\u3000ideographic space\u3000",
    "soft\u00adhyphen",
]

# Accented text in NFD form (the tokenizer applies NFC first).
nfd = [
    "café", "naïve résumé", "Ångström", "São Paulo", "Zoë Brontë",
    "Crème brûlée à la mode", "Việt Nam", "ñandú", "Łódź", "Dvořák",
    "한글", "가나다라마바사", "ｶﾞ", "ガギグゲゴ",
]
for s in nfd:
    d = unicodedata.normalize("NFD", s)
    C.append(d)
    C.append("NFD: " + d + " end")
C += [
    "e\u0301", "a\u0308o\u0308u\u0308", "\u0301 lone combining acute", "x\u0301\u0302\u0303",
    "\u212b Angstrom sign", "\u2126 Ohm sign", "\ufb01 ligature", "\u1e9b\u0323",
    "n\u0303 vs \u00f1",
]

# Special tokens in context.
C += [
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<tool_response>\nok\n</tool_response>",
    "<|fim_prefix|>def f(<|fim_suffix|>):\n<|fim_middle|>",
    "<|repo_name|>qpack<|file_sep|>main.go",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>",
    "<|quad_start|><|quad_end|><|video_pad|><|vision_pad|><|fim_pad|>",
    "text<|im_end|>text",
    " <|im_end|> ",
    "<|im_end|><|im_end|>",
    "<<|im_end|>>",
    "<|im_start|",
    "< |im_end| >",
    "<thinking>not a token</thinking>",
    "<think></think>",
    "\n\n<|endoftext|>\n\n",
    "a<|endoftext|>b<|im_start|>c",
    "<tool_call><tool_response></tool_response></tool_call>",
]

# Systematic families: whitespace runs, digits, repeated letters.
for n in (1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 33):
    C.append("x" + " " * n + "y")
    C.append(" " * n)
for n in (1, 2, 3, 5, 10):
    C.append("a" + "\n" * n + "b")
    C.append("a" + " \n" * n + "b")
C += [
    " " * 40 + "after forty spaces",
    "before forty spaces" + " " * 40,
    "\t \t \t",
    "\n \n\t\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ababababababababababababababab",
    "=" * 50,
    "-" * 33 + ">",
    "9" * 40,
    "0123456789" * 5,
    "hahahahahaha lololol hmmmmmm",
    "zzzzzzzzzzzzzzzzzzzz",
]

# Longer mixed paragraphs.
C += [
    "In 2023, the model scored 87.5% on MMLU (5-shot), up from 81.2%.\n\nSee Table 3 for details.",
    "User: What's 2+2?\nAssistant: It's 4.\nUser: And 3*3?\nAssistant: 9!",
    "Le café coûte 3,50 € — c'est cher ! N'est-ce pas ?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Äpfel, Öl, Übung.",
    "El niño comió piñata en la mañana; ¿por qué? ¡Porque sí!",
    "Português: ação, coração, informação, não.",
    "Polski: zażółć gęślą jaźń",
    "Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Türkçe: Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Markdown **bold** _italic_ `code` [link](http://x.y) > quote\n- item\n1. item",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "LaTeX: $\\frac{a}{b} + \\sqrt{x^2 + y^2} = \\int_0^\\infty e^{-x}\\,dx$",
    "Chemical: H₂O, CO₂, C₆H₁₂O₆; Physics: E=mc², F=ma",
    "A\u00a0B\u2009C\u202fD\u2007E (various spaces)",
    "quote«guillemets»„German“ ‚single‘ 「corner」",
    "中文，English, 日本語。한국어! Русский? العربية؛",
    "The temperature is -5°C (23°F) in Москва today 😀.",
    "path/to/file_name-v2.final.tar.gz",
    "C:\\Users\\Name\\Documents\\file.txt",
    "key1=value1&key2=value%202&key3=%E4%BD%A0",
    "base64: SGVsbG8gV29ybGQhCg== sha: 6cf5f2a2560a7d58",
    "UUID 123e4567-e89b-12d3-a456-426614174000",
    "It'ſ a long s (U+017F) after an apostrophe",
    "'ſ 'K 'ǅ",
    "don'T CAN'T WE'RE",
    "'re're're",
    "'\n's",
    "x'\n",
    "?!\n\n",
    "...\r\n",
    "   ...   \n   ",
    "abc\u0085def NEL",
    "\u000b vertical tab \u000c form feed",
]

C = [c for c in C if c]
seen = set()
out = []
for c in C:
    if c not in seen:
        seen.add(c)
        out.append(c)
assert len(out) >= 200, len(out)
for c in out:
    print(json.dumps(c, ensure_ascii=False))
