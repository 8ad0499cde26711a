package chattmpl

import (
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyNone is a JSON null handed to a template (tools, tool-call arguments).
// Jinja prints None as "None" (Gemma 4 and Qwen3.5 write a null argument that
// way) where gonja prints a nil as "". As a nil channel it is false in an if
// and has length 0; its String gives "None"; `is none` holds for it and
// tojson writes null.
type pyNone chan struct{}

func (pyNone) String() string { return "None" }

// jsonNull is what decodeJSON gives for null.
var jsonNull any = pyNone(nil)

func isNone(v *exec.Value) bool {
	if v.IsNil() {
		return true
	}
	_, ok := v.Interface().(pyNone)
	return ok
}

// templateTests are gonja's tests with none also holding for pyNone.
var templateTests = func() *exec.TestSet {
	t := exec.NewTestSet(map[string]exec.TestFunction{})
	t.Update(builtins.Tests)
	if err := t.Replace("none", func(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
		return isNone(in), nil
	}); err != nil {
		panic(err)
	}
	return t
}()
