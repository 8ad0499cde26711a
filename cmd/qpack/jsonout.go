package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// jsonSchemaVersion is the "schema_version" of every --json document
// (docs/JSON.md). It changes when a key is renamed or removed or its
// meaning changes; new keys do not change it.
const jsonSchemaVersion = 1

// writeJSON prints v, a struct or map, as the --json document of a
// command: an indented object whose first key is "schema_version" and
// whose keys are all snake_case. Struct field names (and json tags written
// in camelCase by packages whose files use that style) are converted;
// the keys of maps are data (file names, dtypes) and are kept as they are.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	if err := encodeSnake(&b, reflect.ValueOf(v)); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	body := bytes.TrimSpace(b.Bytes())
	if len(body) < 2 || body[0] != '{' {
		return fmt.Errorf("--json: internal error: %T is not an object", v)
	}
	doc := []byte(`{"schema_version":` + strconv.Itoa(jsonSchemaVersion))
	if rest := body[1:]; rest[0] != '}' {
		doc = append(doc, ',')
		doc = append(doc, rest...)
	} else {
		doc = append(doc, '}')
	}
	var out bytes.Buffer
	if err := json.Indent(&out, doc, "", "  "); err != nil {
		return fmt.Errorf("--json: internal error: %w", err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// snakeCase converts a Go or camelCase name to snake_case: bytesPerSecond
// → bytes_per_second, SHA256 → sha256, HTTPStatus → http_status.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) && !unicode.IsUpper(prevLetter(r, i)) ||
				unicode.IsUpper(r[i-1]) && i+1 < len(r) && unicode.IsLower(r[i+1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// prevLetter is the last letter before r[i] (0 if none).
func prevLetter(r []rune, i int) rune {
	for k := i - 1; k >= 0; k-- {
		if unicode.IsLetter(r[k]) {
			return r[k]
		}
	}
	return 0
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// encodeSnake writes v as compact JSON as encoding/json would, except that
// struct keys are snake_case.
func encodeSnake(b *bytes.Buffer, v reflect.Value) error {
	if !v.IsValid() {
		b.WriteString("null")
		return nil
	}
	t := v.Type()
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		v.CanAddr() && (reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return marshalPlain(b, v.Interface())
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encodeSnake(b, v.Elem())
	case reflect.Struct:
		return encodeStruct(b, v)
	case reflect.Map:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encodeMap(b, v)
	case reflect.Slice:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return marshalPlain(b, v.Interface()) // []byte is base64
		}
		fallthrough
	case reflect.Array:
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeSnake(b, v.Index(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	default:
		return marshalPlain(b, v.Interface())
	}
}

func marshalPlain(b *bytes.Buffer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(data)
	return nil
}

func encodeMap(b *bytes.Buffer, v reflect.Value) error {
	type kv struct {
		k string
		v reflect.Value
	}
	var kvs []kv
	iter := v.MapRange()
	for iter.Next() {
		k := iter.Key()
		var ks string
		switch {
		case k.Kind() == reflect.String:
			ks = k.String()
		case k.Type().Implements(textMarshaler):
			t, err := k.Interface().(encoding.TextMarshaler).MarshalText()
			if err != nil {
				return err
			}
			ks = string(t)
		default:
			ks = fmt.Sprint(k.Interface())
		}
		kvs = append(kvs, kv{ks, iter.Value()})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
	b.WriteByte('{')
	for i, e := range kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := marshalPlain(b, e.k); err != nil {
			return err
		}
		b.WriteByte(':')
		if err := encodeSnake(b, e.v); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// jsonField is one encoded field of a struct.
type jsonField struct {
	name      string
	index     []int
	depth     int
	omitEmpty bool
	omitZero  bool
	tagged    bool
	asString  bool
}

// structFields lists t's encoded fields as encoding/json does: embedded
// structs without a tag are flattened; of fields with one name the
// shallowest wins (a tagged one among equals), and ambiguous ones are
// dropped.
func structFields(t reflect.Type) []jsonField {
	var all []jsonField
	var walk func(t reflect.Type, index []int, depth int)
	walk = func(t reflect.Type, index []int, depth int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(append([]int(nil), index...), i)
			ft := f.Type
			if f.Anonymous && name == "" {
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft, idx, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			jf := jsonField{index: idx, depth: depth, tagged: name != ""}
			if name == "" {
				name = f.Name
			}
			jf.name = snakeCase(name)
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "omitempty":
					jf.omitEmpty = true
				case "omitzero":
					jf.omitZero = true
				case "string":
					jf.asString = true
				}
			}
			all = append(all, jf)
		}
	}
	walk(t, nil, 0)
	byName := map[string][]int{}
	for i, f := range all {
		byName[f.name] = append(byName[f.name], i)
	}
	var out []jsonField
	for i, f := range all {
		idx := byName[f.name]
		best := -1
		ambiguous := false
		for _, k := range idx {
			g := all[k]
			switch {
			case best < 0:
				best = k
			case g.depth < all[best].depth || g.depth == all[best].depth && g.tagged && !all[best].tagged:
				best, ambiguous = k, false
			case g.depth == all[best].depth && g.tagged == all[best].tagged:
				ambiguous = true
			}
		}
		if best == i && !ambiguous {
			out = append(out, f)
		}
	}
	return out
}

func encodeStruct(b *bytes.Buffer, v reflect.Value) error {
	b.WriteByte('{')
	first := true
	for _, f := range structFields(v.Type()) {
		fv, ok := fieldByIndex(v, f.index)
		if !ok {
			continue // inside a nil embedded pointer
		}
		if f.omitEmpty && isEmptyValue(fv) || f.omitZero && fv.IsZero() {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := marshalPlain(b, f.name); err != nil {
			return err
		}
		b.WriteByte(':')
		if f.asString && isScalar(fv) {
			var s bytes.Buffer
			if err := marshalPlain(&s, fv.Interface()); err != nil {
				return err
			}
			if err := marshalPlain(b, s.String()); err != nil {
				return err
			}
			continue
		}
		if err := encodeSnake(b, fv); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

func isScalar(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
