package chattmpl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// keyOrder remembers the key order of the JSON objects handed to a template
// (keyed by the map's identity), so that |tojson writes keys in the order
// they came in, as Python's json.dumps does for a dict. It is placed in the
// render context under keyOrderVar.
type keyOrder map[uintptr][]string

const keyOrderVar = "__qpack_json_key_order__"

const maxJSONDepth = 64

// decodeJSON decodes raw into template values: objects become
// map[string]any (their key order recorded in ko), arrays []any, integers
// int (or float64 when they do not fit), other numbers float64.
func decodeJSON(raw []byte, ko keyOrder) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, ko, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, ko keyOrder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				v, err := decodeValue(dec, ko, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := m[k]; !dup {
					keys = append(keys, k)
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			ko.record(m, keys)
			return m, nil
		case '[':
			l := pyList{}
			for dec.More() {
				v, err := decodeValue(dec, ko, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return int(i), nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	case nil:
		return jsonNull, nil
	default:
		return t, nil // string, bool
	}
}

func (ko keyOrder) record(m map[string]any, keys []string) {
	if ko != nil {
		ko[reflect.ValueOf(m).Pointer()] = keys
	}
}

// orderedKeys returns m's keys in recorded order, then any others sorted.
func (ko keyOrder) orderedKeys(m reflect.Value) []string {
	rec := ko[m.Pointer()]
	seen := make(map[string]bool, len(rec))
	out := make([]string, 0, m.Len())
	for _, k := range rec {
		if m.MapIndex(reflect.ValueOf(k)).IsValid() && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	var rest []string
	for _, k := range m.MapKeys() {
		if k.Kind() == reflect.String && !seen[k.String()] {
			rest = append(rest, k.String())
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// pyJSON writes values the way Python's json.dumps does (the tojson filter
// of transformers' chat templates calls json.dumps with ensure_ascii=False).
type pyJSON struct {
	ko          keyOrder
	ensureASCII bool
	indent      string // "" = no indent
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
	buf         strings.Builder
}

func (p *pyJSON) newline(depth int) {
	if p.hasIndent {
		p.buf.WriteByte('\n')
		for range depth {
			p.buf.WriteString(p.indent)
		}
	}
}

func (p *pyJSON) write(v any, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("tojson: value nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		p.buf.WriteString("null")
		return nil
	case *exec.Value:
		if x == nil || x.IsNil() {
			p.buf.WriteString("null")
			return nil
		}
		return p.write(x.Interface(), depth)
	case exec.Dict:
		return p.writeDict(x.Pairs, depth)
	case *exec.Dict:
		if x == nil {
			p.buf.WriteString("null")
			return nil
		}
		return p.writeDict(x.Pairs, depth)
	case string:
		p.writeString(x)
		return nil
	case bool:
		if x {
			p.buf.WriteString("true")
		} else {
			p.buf.WriteString("false")
		}
		return nil
	case json.Number:
		p.buf.WriteString(string(x))
		return nil
	case pyNone:
		p.buf.WriteString("null")
		return nil
	case error:
		return x
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			p.buf.WriteString("null")
			return nil
		}
		return p.write(rv.Elem().Interface(), depth)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.buf.WriteString(strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.buf.WriteString(strconv.FormatUint(rv.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		p.buf.WriteString(pyFloat(rv.Float()))
	case reflect.String:
		p.writeString(rv.String())
	case reflect.Bool:
		return p.write(rv.Bool(), depth)
	case reflect.Slice, reflect.Array:
		if rv.Len() == 0 {
			p.buf.WriteString("[]")
			return nil
		}
		p.buf.WriteByte('[')
		for i := 0; i < rv.Len(); i++ {
			if i > 0 {
				p.buf.WriteString(p.itemSep)
			}
			p.newline(depth + 1)
			if err := p.write(rv.Index(i).Interface(), depth+1); err != nil {
				return err
			}
		}
		p.newline(depth)
		p.buf.WriteByte(']')
	case reflect.Map:
		keys := p.ko.orderedKeys(rv)
		if p.sortKeys {
			sort.Strings(keys)
		}
		if len(keys) == 0 {
			p.buf.WriteString("{}")
			return nil
		}
		p.buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				p.buf.WriteString(p.itemSep)
			}
			p.newline(depth + 1)
			p.writeString(k)
			p.buf.WriteString(p.keySep)
			if err := p.write(rv.MapIndex(reflect.ValueOf(k)).Interface(), depth+1); err != nil {
				return err
			}
		}
		p.newline(depth)
		p.buf.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot serialise a %s", rv.Kind())
	}
	return nil
}

func (p *pyJSON) writeDict(pairs []*exec.Pair, depth int) error {
	if len(pairs) == 0 {
		p.buf.WriteString("{}")
		return nil
	}
	if p.sortKeys {
		pairs = append([]*exec.Pair(nil), pairs...)
		sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].Key.String() < pairs[j].Key.String() })
	}
	p.buf.WriteByte('{')
	for i, pr := range pairs {
		if i > 0 {
			p.buf.WriteString(p.itemSep)
		}
		p.newline(depth + 1)
		p.writeString(pr.Key.String())
		p.buf.WriteString(p.keySep)
		if err := p.write(pr.Value, depth+1); err != nil {
			return err
		}
	}
	p.newline(depth)
	p.buf.WriteByte('}')
	return nil
}

// writeString quotes s as json.dumps does: only '"', '\\' and control
// characters are escaped (plus non-ASCII when ensureASCII is set, as
// \uXXXX with surrogate pairs).
func (p *pyJSON) writeString(s string) {
	const hex = "0123456789abcdef"
	b := &p.buf
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (p.ensureASCII && r >= 0x7f):
				if r > 0xFFFF {
					r -= 0x10000
					for _, u := range []rune{0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF} {
						b.WriteString(`\u`)
						b.WriteByte(hex[u>>12&0xF])
						b.WriteByte(hex[u>>8&0xF])
						b.WriteByte(hex[u>>4&0xF])
						b.WriteByte(hex[u&0xF])
					}
					continue
				}
				b.WriteString(`\u`)
				b.WriteByte(hex[r>>12&0xF])
				b.WriteByte(hex[r>>8&0xF])
				b.WriteByte(hex[r>>4&0xF])
				b.WriteByte(hex[r&0xF])
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f like Python's repr(float): the shortest digits that
// round-trip, in positional notation when the decimal exponent is in
// [-4, 16), else as d.ddde+XX; integral values keep a ".0".
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es = "-"
			exp = -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	var out string
	switch {
	case exp < 0:
		out = "0." + strings.Repeat("0", -exp-1) + digits
	case exp+1 >= len(digits):
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	return sign + out
}

// tojsonFilter implements tojson(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) with json.dumps semantics.
func tojsonFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	p := &pyJSON{itemSep: ", ", keySep: ": "}
	if v, ok := e.Environment.Context.Get(keyOrderVar); ok {
		p.ko, _ = v.(keyOrder)
	}
	for k := range params.KwArgs {
		switch k {
		case "ensure_ascii", "sort_keys", "indent", "separators":
		default:
			return exec.AsValue(fmt.Errorf("tojson: unexpected argument %q", k))
		}
	}
	if v, ok := params.KwArgs["ensure_ascii"]; ok {
		p.ensureASCII = v.IsTrue()
	}
	if v, ok := params.KwArgs["sort_keys"]; ok {
		p.sortKeys = v.IsTrue()
	}
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		p.hasIndent = true
		p.itemSep = "," // json.dumps drops the space when indenting
		if v.IsInteger() {
			p.indent = strings.Repeat(" ", max(0, min(v.Integer(), 64)))
		} else {
			p.indent = v.String()
		}
	}
	if v, ok := params.KwArgs["separators"]; ok && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 {
			return exec.AsValue(errors.New("tojson: separators must be a pair of strings"))
		}
		p.itemSep, p.keySep = v.Index(0).String(), v.Index(1).String()
	}
	if len(params.Args) > 0 {
		return exec.AsValue(errors.New("tojson: takes keyword arguments only"))
	}
	if err := p.write(in, 0); err != nil {
		return exec.AsValue(err)
	}
	if !utf8.ValidString(p.buf.String()) {
		return exec.AsValue(errors.New("tojson: invalid UTF-8"))
	}
	return exec.AsSafeValue(p.buf.String())
}
