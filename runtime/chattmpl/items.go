package chattmpl

import (
	"reflect"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// builtinItems is gonja's items filter, used for mappings whose key order
// was not recorded (dict literals of the template itself).
var builtinItems = func() exec.FilterFunction {
	f, ok := builtins.Filters.Get("items")
	if !ok {
		panic("gonja has no items filter")
	}
	return f
}()

// itemsFilter is Jinja's items filter: (key, value) pairs of a mapping in
// its insertion order, which for JSON handed in (tool-call arguments, tools)
// is the order of the JSON text, as Python's dict keeps it. Qwen3.5's
// template writes the tool-call parameters in this order.
func itemsFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() || in.IsNil() || !in.IsDict() {
		return builtinItems(e, in, params)
	}
	ko, _ := contextKeyOrder(e)
	m := reflect.ValueOf(in.Interface())
	if ko == nil || m.Kind() != reflect.Map || m.Type().Key().Kind() != reflect.String {
		return builtinItems(e, in, params)
	}
	if _, recorded := ko[m.Pointer()]; !recorded {
		return builtinItems(e, in, params)
	}
	if err := params.Take(); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	keys := ko.orderedKeys(m)
	out := make(pyList, len(keys))
	for i, k := range keys {
		out[i] = pyList{k, m.MapIndex(reflect.ValueOf(k)).Interface()}
	}
	return exec.AsValue(out)
}

// contextKeyOrder returns the key order of the JSON handed to Render.
func contextKeyOrder(e *exec.Evaluator) (keyOrder, bool) {
	v, ok := e.Environment.Context.Get(keyOrderVar)
	if !ok {
		return nil, false
	}
	ko, ok := v.(keyOrder)
	return ko, ok
}
