package modelconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Object is one JSON object of a config (the top level, text_config,
// rope_parameters) with the path that names its fields in errors. Its
// getters record a problem and return the default when a field has the
// wrong type or is out of range, so that a parse reports every problem.
// Architectures registered with this package read their fields through it.
type Object struct {
	path string // "" at the top level, "text_config." inside it
	m    map[string]json.RawMessage
	p    *problems
}

func newObject(path string, m map[string]json.RawMessage, p *problems) *Object {
	return &Object{path: path, m: m, p: p}
}

// Field is the path of key in error messages ("text_config.hidden_size").
func (o *Object) Field(key string) string {
	if key == "" {
		return strings.TrimSuffix(o.path, ".")
	}
	return o.path + key
}

// Fail records a problem at key.
func (o *Object) Fail(key, format string, args ...any) {
	o.p.add(o.Field(key), format, args...)
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// lookup returns the first of names present with a non-null value. When
// aliases give two different values for one field, that is a problem: two
// converters would read two different models.
func (o *Object) lookup(names ...string) (string, json.RawMessage, bool) {
	var key string
	var val json.RawMessage
	for _, n := range names {
		raw, ok := o.m[n]
		if !ok || isNull(raw) {
			continue
		}
		if key == "" {
			key, val = n, raw
			continue
		}
		if !sameJSON(val, raw) {
			o.Fail(n, "%s, but its alias %s says %s", clip(raw), o.Field(key), clip(val))
		}
	}
	return key, val, key != ""
}

// Has reports whether one of names is present and not null.
func (o *Object) Has(names ...string) bool {
	for _, n := range names {
		if raw, ok := o.m[n]; ok && !isNull(raw) {
			return true
		}
	}
	return false
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func clip(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// Bound is a named limit for an integer field.
type Bound struct {
	Min, Max int
	Name     string // the constant that sets Max, shown when it is exceeded
}

// integer decodes raw as an integer (a JSON number with no fraction).
func integer(raw json.RawMessage) (int64, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s is not a number", clip(raw))
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("%s is not an integer", clip(raw))
	}
	return int64(f), nil
}

func (o *Object) checkInt(key string, v int64, b Bound) (int, bool) {
	if v < int64(b.Min) {
		o.Fail(key, "%d is below the minimum %d", v, b.Min)
		return 0, false
	}
	if v > int64(b.Max) {
		o.Fail(key, "%d is above the limit %d (%s)", v, b.Max, b.Name)
		return 0, false
	}
	return int(v), true
}

// Int reads a required integer field (the first of names present). ok is
// false when it is missing or unusable; the problem is recorded.
func (o *Object) Int(b Bound, names ...string) (int, bool) {
	key, raw, ok := o.lookup(names...)
	if !ok {
		o.Fail(names[0], "missing")
		return 0, false
	}
	v, err := integer(raw)
	if err != nil {
		o.Fail(key, "%v", err)
		return 0, false
	}
	return o.checkInt(key, v, b)
}

// OptInt reads an optional integer field: def when absent or null.
func (o *Object) OptInt(def int, b Bound, names ...string) (int, bool) {
	if !o.Has(names...) {
		return def, true
	}
	return o.Int(b, names...)
}

// OptFloat reads an optional number: def when absent or null. present says
// whether the config gave it.
func (o *Object) OptFloat(def float64, names ...string) (v float64, present bool) {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return def, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		o.Fail(key, "%s is not a number", clip(raw))
		return def, false
	}
	return v, true
}

// OptBool reads an optional boolean: def when absent or null.
func (o *Object) OptBool(def bool, names ...string) (v bool, present bool) {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return def, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		o.Fail(key, "%s is not true or false", clip(raw))
		return def, false
	}
	return v, true
}

// OptString reads an optional string: "" when absent or null.
func (o *Object) OptString(names ...string) string {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		o.Fail(key, "%s is not a string", clip(raw))
		return ""
	}
	return s
}

// OptInts reads an optional list of integers, each within b.
func (o *Object) OptInts(b Bound, names ...string) []int {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		o.Fail(key, "%s is not a list", clip(raw))
		return nil
	}
	out := make([]int, 0, len(list))
	for i, r := range list {
		item := key + "[" + strconv.Itoa(i) + "]"
		v, err := integer(r)
		if err != nil {
			o.Fail(item, "%v", err)
			continue
		}
		if n, ok := o.checkInt(item, v, b); ok {
			out = append(out, n)
		}
	}
	return out
}

// OptStrings reads an optional list of strings; present says whether the
// config gave one.
func (o *Object) OptStrings(names ...string) (out []string, present bool) {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return nil, false
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		o.Fail(key, "%s is not a list of strings", clip(raw))
		return nil, false
	}
	return out, true
}

// OptObject reads an optional nested object (nil when absent or null).
func (o *Object) OptObject(names ...string) *Object {
	key, raw, ok := o.lookup(names...)
	if !ok {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		o.Fail(key, "%s is not an object", clip(raw))
		return nil
	}
	return newObject(o.path+key+".", m, o.p)
}

// Raw returns a field's JSON as written (nil when absent or null).
func (o *Object) Raw(names ...string) (key string, raw json.RawMessage) {
	key, raw, _ = o.lookup(names...)
	return key, raw
}
