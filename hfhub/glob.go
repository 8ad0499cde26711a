package hfhub

import (
	"strings"
	"unicode/utf8"
)

// MatchGlob reports whether name matches pattern with the semantics of
// Python's fnmatch.fnmatchcase, which the official client uses for
// --include/--exclude: '*' matches any run of characters including '/',
// '?' any one character, "[seq]" / "[!seq]" a set with ranges; an unclosed
// '[' is literal; matching is case-sensitive and covers the whole name.
func MatchGlob(pattern, name string) bool {
	return matchTokens(compileGlob(pattern), toRunes(name))
}

// toRunes decodes UTF-8; invalid bytes become U+DC80..U+DCFF, as Python's
// surrogateescape does, so they only match themselves.
func toRunes(s string) []rune {
	if utf8.ValidString(s) {
		return []rune(s)
	}
	out := make([]rune, 0, len(s))
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			r = 0xDC00 + rune(s[0])
		}
		out = append(out, r)
		s = s[n:]
	}
	return out
}

// FilterPaths keeps the paths matched by at least one include pattern (all
// of them when include is empty) and by no exclude pattern. A pattern ending
// in '/' matches everything under that directory, as in the official client.
func FilterPaths(paths, include, exclude []string) []string {
	inc := compileAll(include)
	exc := compileAll(exclude)
	var out []string
	for _, p := range paths {
		if matchesAny(inc, p, true) && !matchesAny(exc, p, false) {
			out = append(out, p)
		}
	}
	return out
}

func compileAll(patterns []string) [][]globToken {
	var out [][]globToken
	for _, p := range patterns {
		if strings.HasSuffix(p, "/") {
			p += "*"
		}
		out = append(out, compileGlob(p))
	}
	return out
}

func matchesAny(pats [][]globToken, name string, emptyMeans bool) bool {
	if len(pats) == 0 {
		return emptyMeans
	}
	r := toRunes(name)
	for _, p := range pats {
		if matchTokens(p, r) {
			return true
		}
	}
	return false
}

type globKind uint8

const (
	globLit globKind = iota
	globAny
	globStar
	globSet
)

type globToken struct {
	kind   globKind
	lit    rune
	negate bool
	ranges [][2]rune
}

func compileGlob(pattern string) []globToken {
	p := toRunes(pattern)
	var out []globToken
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if len(out) == 0 || out[len(out)-1].kind != globStar {
				out = append(out, globToken{kind: globStar})
			}
		case '?':
			out = append(out, globToken{kind: globAny})
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) {
				out = append(out, globToken{kind: globLit, lit: '['})
				continue
			}
			body := p[i+1 : j]
			t := globToken{kind: globSet}
			if len(body) > 0 && body[0] == '!' {
				t.negate = true
				body = body[1:]
			}
			for k := 0; k < len(body); k++ {
				if k+2 < len(body) && body[k+1] == '-' {
					if body[k] <= body[k+2] {
						t.ranges = append(t.ranges, [2]rune{body[k], body[k+2]})
					}
					k += 2
					continue
				}
				t.ranges = append(t.ranges, [2]rune{body[k], body[k]})
			}
			out = append(out, t)
			i = j
		default:
			out = append(out, globToken{kind: globLit, lit: c})
		}
	}
	return out
}

func (t *globToken) matchOne(r rune) bool {
	switch t.kind {
	case globLit:
		return r == t.lit
	case globAny:
		return true
	case globSet:
		in := false
		for _, rg := range t.ranges {
			if r >= rg[0] && r <= rg[1] {
				in = true
				break
			}
		}
		return in != t.negate
	}
	return false
}

// matchTokens is the classic linear wildcard match with backtracking to the
// last star (stars are collapsed at compile time).
func matchTokens(toks []globToken, s []rune) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for si < len(s) {
		if ti < len(toks) && toks[ti].kind == globStar {
			starT, starS = ti, si
			ti++
			continue
		}
		if ti < len(toks) && toks[ti].matchOne(s[si]) {
			ti++
			si++
			continue
		}
		if starT >= 0 {
			ti = starT + 1
			starS++
			si = starS
			continue
		}
		return false
	}
	for ti < len(toks) && toks[ti].kind == globStar {
		ti++
	}
	return ti == len(toks)
}
