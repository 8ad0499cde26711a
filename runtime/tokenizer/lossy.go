package tokenizer

import "unicode/utf8"

// seqInfo returns, for a UTF-8 lead byte, the length of the sequence it
// starts and the allowed range of the second byte; n == 0 for a byte that
// cannot start a sequence.
func seqInfo(c byte) (n int, lo, hi byte) {
	switch {
	case c < 0x80:
		return 1, 0, 0
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// appendLossy appends b to dst as valid UTF-8. Each maximal ill-formed
// subpart (a lead byte followed by as many bytes as could still continue it,
// or a lone byte that cannot start a sequence) becomes one U+FFFD. When final
// is false an incomplete sequence that reaches the end of b is left
// unconsumed, since more bytes may complete it. It returns the extended dst
// and how many bytes of b were consumed.
func appendLossy(dst, b []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(b) {
		c := b[i]
		if c < 0x80 {
			dst = append(dst, c)
			i++
			continue
		}
		n, lo, hi := seqInfo(c)
		if n == 0 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
			i++
			continue
		}
		k := 1
		for k < n && i+k < len(b) {
			x := b[i+k]
			if k == 1 {
				if x < lo || x > hi {
					break
				}
			} else if x < 0x80 || x > 0xBF {
				break
			}
			k++
		}
		switch {
		case k == n:
			dst = append(dst, b[i:i+n]...)
		case i+k == len(b) && !final:
			return dst, i
		default:
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i += k
	}
	return dst, i
}

// toValidUTF8 returns s unchanged when it is valid UTF-8, else with its
// ill-formed subparts replaced as appendLossy does.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out, _ := appendLossy(make([]byte, 0, len(s)+8), []byte(s), true)
	return string(out)
}
