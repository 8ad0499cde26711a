package chattmpl

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonja's string methods return its own string type, on which further
// method calls can fail (an empty piece of a split is "not callable"), and
// its strip family has a broken default. The methods chat templates lean on
// are reimplemented here with Python's semantics, returning plain strings.

var gonjaStrMethods = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs",
	"find", "format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
	"islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust",
	"lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rjust",
	"rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
	"title", "upper", "zfill",
}

func strMethods() *exec.MethodSet[string] {
	m := map[string]exec.Method[string]{}
	for _, name := range gonjaStrMethods {
		if f, ok := builtins.Methods.Str.Get(name); ok {
			m[name] = plainResult(f)
		}
	}
	m["strip"] = stripMethod(true, true)
	m["lstrip"] = stripMethod(true, false)
	m["rstrip"] = stripMethod(false, true)
	m["split"] = splitMethod(false)
	m["rsplit"] = splitMethod(true)
	m["replace"] = replaceMethod
	m["startswith"] = affixMethod(strings.HasPrefix)
	m["endswith"] = affixMethod(strings.HasSuffix)
	return exec.NewMethodSet(m)
}

// plainResult converts gonja's string type results to plain strings.
func plainResult(f exec.Method[string]) exec.Method[string] {
	return func(self string, v *exec.Value, args *exec.VarArgs) (any, error) {
		r, err := f(self, v, args)
		if err != nil {
			return r, err
		}
		return plain(r), nil
	}
}

func plain(r any) any {
	switch x := r.(type) {
	case string, nil, bool, int, float64:
		return x
	}
	v := reflect.ValueOf(r)
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Slice, reflect.Array:
		out := make(pyList, v.Len())
		for i := range out {
			out[i] = plain(v.Index(i).Interface())
		}
		return out
	}
	return r
}

// optString reads an optional positional-or-keyword string argument that
// may also be None; ok is false when it is absent or None.
func optString(args *exec.VarArgs, pos int, name string) (s string, ok bool, err error) {
	var v *exec.Value
	if pos < len(args.Args) {
		v = args.Args[pos]
	} else if kv, found := args.KwArgs[name]; found {
		v = kv
	}
	if v == nil || v.IsNil() {
		return "", false, nil
	}
	if !v.IsString() {
		return "", false, fmt.Errorf("%s must be a string or None", name)
	}
	return v.String(), true, nil
}

func optInt(args *exec.VarArgs, pos int, name string, def int) (int, error) {
	var v *exec.Value
	if pos < len(args.Args) {
		v = args.Args[pos]
	} else if kv, found := args.KwArgs[name]; found {
		v = kv
	}
	if v == nil || v.IsNil() {
		return def, nil
	}
	if !v.IsInteger() {
		return 0, fmt.Errorf("%s must be an integer", name)
	}
	return v.Integer(), nil
}

// stripMethod: str.strip/lstrip/rstrip([chars]): without chars (or None)
// whitespace is removed, else any of the given characters.
func stripMethod(left, right bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) > 1 {
			return nil, errors.New("strip takes at most one argument")
		}
		chars, ok, err := optString(args, 0, "chars")
		if err != nil {
			return nil, err
		}
		cut := unicode.IsSpace
		if ok {
			cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
		}
		if left {
			self = strings.TrimLeftFunc(self, cut)
		}
		if right {
			self = strings.TrimRightFunc(self, cut)
		}
		return self, nil
	}
}

// splitMethod: str.split / str.rsplit(sep=None, maxsplit=-1).
func splitMethod(fromRight bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		sep, hasSep, err := optString(args, 0, "sep")
		if err != nil {
			return nil, err
		}
		maxsplit, err := optInt(args, 1, "maxsplit", -1)
		if err != nil {
			return nil, err
		}
		var parts []string
		switch {
		case hasSep && sep == "":
			return nil, errors.New("empty separator")
		case hasSep && maxsplit < 0:
			parts = strings.Split(self, sep)
		case hasSep && !fromRight:
			parts = strings.SplitN(self, sep, maxsplit+1)
		case hasSep:
			parts = rsplitN(self, sep, maxsplit)
		default:
			parts = splitWhitespace(self, maxsplit, fromRight)
		}
		out := make(pyList, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	}
}

func rsplitN(s, sep string, maxsplit int) []string {
	var rev []string
	for range maxsplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitWhitespace is Python's split() without a separator: runs of
// whitespace separate, leading/trailing whitespace yields no empty strings,
// and after maxsplit splits the rest is kept whole (stripped on its outer side).
func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.Fields(s)
	}
	var out []string
	if !fromRight {
		rest := strings.TrimLeftFunc(s, unicode.IsSpace)
		for len(out) < maxsplit && rest != "" {
			i := strings.IndexFunc(rest, unicode.IsSpace)
			if i < 0 {
				break
			}
			out = append(out, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], unicode.IsSpace)
		}
		if rest != "" {
			out = append(out, rest)
		}
		return out
	}
	rest := strings.TrimRightFunc(s, unicode.IsSpace)
	var rev []string
	for len(rev) < maxsplit && rest != "" {
		i := strings.LastIndexFunc(rest, unicode.IsSpace)
		if i < 0 {
			break
		}
		_, size := utf8.DecodeRuneInString(rest[i:])
		rev = append(rev, rest[i+size:])
		rest = strings.TrimRightFunc(rest[:i], unicode.IsSpace)
	}
	if rest != "" {
		out = append(out, rest)
	}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// affixMethod: str.startswith / str.endswith(prefix or list of prefixes[, start[, end]]),
// with start/end in characters as in Python.
func affixMethod(test func(s, affix string) bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) < 1 || len(args.Args) > 3 {
			return nil, errors.New("expected (prefix[, start[, end]])")
		}
		var affixes []string
		a := args.Args[0]
		switch {
		case a.IsString():
			affixes = []string{a.String()}
		case a.IsList():
			for i := 0; i < a.Len(); i++ {
				if !a.Index(i).IsString() {
					return nil, errors.New("affix list must hold strings")
				}
				affixes = append(affixes, a.Index(i).String())
			}
		default:
			return nil, errors.New("affix must be a string or a list of strings")
		}
		runes := []rune(self)
		start, err := optInt(args, 1, "start", 0)
		if err != nil {
			return nil, err
		}
		end, err := optInt(args, 2, "end", len(runes))
		if err != nil {
			return nil, err
		}
		start, end = pyIndex(start, len(runes)), pyIndex(end, len(runes))
		if start > end {
			return false, nil
		}
		sub := string(runes[start:end])
		for _, x := range affixes {
			if test(sub, x) {
				return true, nil
			}
		}
		return false, nil
	}
}

// pyIndex clamps a Python slice index to [0, n].
func pyIndex(i, n int) int {
	if i < 0 {
		i += n
	}
	return max(0, min(i, n))
}

// replaceMethod: str.replace(old, new[, count]).
func replaceMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) < 2 || len(args.Args) > 3 || !args.Args[0].IsString() || !args.Args[1].IsString() {
		return nil, errors.New("expected replace(old, new[, count])")
	}
	count, err := optInt(args, 2, "count", -1)
	if err != nil {
		return nil, err
	}
	return strings.Replace(self, args.Args[0].String(), args.Args[1].String(), count), nil
}
