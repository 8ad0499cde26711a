package chattmpl

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func renderSrc(t *testing.T, src string) (string, error) {
	t.Helper()
	tpl, err := Parse("s.jinja", src)
	if err != nil {
		return "", err
	}
	return tpl.Render([]Message{{Role: "user", Content: "x"}}, Options{})
}

// TestSetForms: the forms Jinja's set takes, with what jinja2 3.1.6's
// ImmutableSandboxedEnvironment renders (trim_blocks, lstrip_blocks).
func TestSetForms(t *testing.T) {
	cases := map[string]string{
		`{% set x = 1 %}{{ x }}`:                                             "1",
		`{% set x = 1 if false else 2 %}{{ x }}`:                             "2",
		`{% set x = 1 if true else 2 %}{{ x }}`:                              "1",
		`{% set x = 1 if false %}[{{ x }}]`:                                  "[]",
		`{% set a, b = 1, 2 %}{{ a }}{{ b }}`:                                "12",
		`{% set (a, b) = [3, 4] %}{{ b }}{{ a }}`:                            "43",
		`{% set a, (b, c) = [1, "yz"] %}{{ a }}{{ c }}{{ b }}`:               "1zy",
		`{% set a, b = "xy" %}{{ b }}`:                                       "y",
		`{% set t = 1, 2 %}{{ t|length }}{{ t[1] }}`:                         "22",
		`{% set x %}a{{ 1 }}b{% endset %}{{ x }}`:                            "a1b",
		`{% set x -%} a {%- endset %}[{{ x }}]`:                              "[a]",
		`{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}`:   "2",
		`{% set ns = namespace(s=1) %}{% set ns.s %}b{% endset %}{{ ns.s }}`: "b",
		// Shared references are fine, only cycles are refused.
		`{% set ns = namespace(a=1) %}{% set o = namespace(b=ns) %}{% set ns.a = 5 %}{{ o.b.a }}`:                    "5",
		`{% set ns = namespace(x=[]) %}{% set d = [1] %}{% set ns.x = [d, d, {"k": d}] %}{{ ns.x|length }}`:          "3",
		`{% set a = namespace(x=1) %}{% set b = namespace(y=a) %}{% set b.y = a %}{% set b.z = [a, a] %}{{ b.y.x }}`: "1",
		`{% set ns = namespace(c=0) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}{% endfor %}{{ ns.c }}`:        "1",
		`{% for m in messages %}{% set r = m.role %}{% endfor %}[{{ r }}]`:                                           "[]",
		// A namespace reached through a list, a dict, another namespace
		// or unpacking is still one.
		`{% set ns = namespace(a=1) %}{% set l = [ns] %}{% for n in l %}{% set n.a = 2 %}{% endfor %}{{ ns.a }}`: "2",
		`{% set ns = namespace(a=1) %}{% set o = namespace(b=ns) %}{% set x = o.b %}{% set x.a = 3 %}{{ ns.a }}`: "3",
		`{% set ns = namespace(a=1) %}{% set d = {"k": ns} %}{% set x = d.k %}{% set x.a = 4 %}{{ ns.a }}`:       "4",
		`{% set ns = namespace(a=1) %}{% set p, q = ns, 1 %}{% set p.a = 5 %}{{ ns.a }}`:                         "5",
		`{% set a = [1] %}` + strings.Repeat(`{% set a = [a, a] %}`, 8) + `{{ a|tojson|length }}`:                "1788", // L(k) = 2 L(k-1) + 4, L(0) = 3
		`{% set ns = namespace(a=none) %}{% for i in range(100) %}{% set ns.a = [ns.a] %}{% endfor %}ok`:         "ok",
	}
	for src, want := range cases {
		got, err := renderSrc(t, src)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", src, got, err, want)
		}
	}
}

func TestSetRefused(t *testing.T) {
	parse := []string{
		`{% set true = 1 %}`,
		`{% set none = 1 %}`,
		`{% set ns.a.b = 1 %}`,
		`{% set x[0] = 1 %}`,
		`{% set f() = 1 %}`,
		`{% set = 1 %}`,
		`{% set x = %}`,
		`{% set x = 1 2 %}`,
		`{% set () = 1 %}`,
		`{% set a, = [7] %}`,
		`{% set (a b) = 1 %}`,
		`{% set x %}a{% endset y %}`,
		`{% set x y %}a{% endset %}`,
	}
	for _, src := range parse {
		if _, err := Parse("s.jinja", src); err == nil || !strings.Contains(err.Error(), "s.jinja") {
			t.Errorf("%s: parsed (err %v)", src, err)
		}
	}
	render := map[string]string{
		`{% set d = {"a": 1} %}{% set d.a = 2 %}`:         "non-namespace",
		`{% set m = messages[0] %}{% set m.role = "x" %}`: "non-namespace",
		`{% set x = 1 %}{% set x.a = 2 %}`:                "non-namespace",
		`{% set u.a = 2 %}`:                               "non-namespace",
		`{% set a, b = [1, 2, 3] %}`:                      "too many values",
		`{% set a, b = [1] %}`:                            "not enough values",
		`{% set a, b = 5 %}`:                              "non-iterable",
		`{% set ns = namespace(a=none) %}{% for i in range(600) %}{% set ns.a = [ns.a] %}{% endfor %}`: "nests more than",
	}
	render[`{% set ns = namespace(a=1) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a }}`] = "expands to more than"
	render[`{% set a = [1] %}`+strings.Repeat(`{% set a = [a, a] %}`, 40)+`{{ a }}`] = "expands to more than"
	for src, want := range render {
		out, err := renderSrc(t, src)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: %q, %v; want an error with %q", src, out, err, want)
		}
	}
}

// cycleTemplates would each make a value contain itself; printing or
// iterating it then recursed until the Go stack overflowed.
var cycleTemplates = map[string]string{
	"direct":         `{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}`,
	"iterated":       `{% set ns = namespace(a=1) %}{% set ns.a = ns %}{% for k in ns %}{{ k }}{% endfor %}{{ ns|tojson }}`,
	"via list":       `{% set ns = namespace(a=1) %}{% set ns.a = [1, [2, ns]] %}{{ ns }}`,
	"via dict":       `{% set ns = namespace(a=1) %}{% set ns.a = {"k": [ns]} %}{{ ns }}`,
	"via tuple":      `{% set ns = namespace(a=1) %}{% set ns.a = (1, ns) %}{{ ns }}`,
	"two namespaces": `{% set a = namespace(x=1) %}{% set b = namespace(y=a) %}{% set a.x = b %}{{ a }}`,
	"three hops":     `{% set a = namespace(x=1) %}{% set b = namespace(y=[a]) %}{% set c = namespace(z=b) %}{% set a.x = {"c": c} %}{{ a }}`,
	"unpacked":       `{% set ns = namespace(a=1) %}{% set p, q = [ns], 2 %}{% set ns.a = p %}{{ ns }}`,
	"in block set":   `{% set ns = namespace(a=1) %}{% set x %}{% set ns.a = ns %}{% endset %}{{ ns }}`,
	"in loop":        "{% set ns = namespace(a=1) %}\n{% for m in messages %}\n{% set ns.a = [m, ns] %}\n{% endfor %}{{ ns }}",
	"in macro":       `{% set ns = namespace(a=1) %}{% macro f(n) %}{% set n.a = n %}{% endmacro %}{{ f(ns) }}{{ ns }}`,
}

// TestSetCycles renders each cycle template in a child process, so that a
// regression fails the test instead of killing the test binary.
func TestSetCycles(t *testing.T) {
	for name := range cycleTemplates {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSetCycleChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CHATTMPL_CYCLE_CHILD="+name)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: child failed (%v): %.2000s", name, err, out)
			continue
		}
		if !strings.Contains(string(out), "REFUSED:") {
			t.Errorf("%s: not refused: %.2000s", name, out)
		}
	}
}

func TestSetCycleChild(t *testing.T) {
	name := os.Getenv("CHATTMPL_CYCLE_CHILD")
	if name == "" {
		t.Skip("run by TestSetCycles")
	}
	out, err := renderSrc(t, cycleTemplates[name])
	if err == nil {
		fmt.Printf("RENDERED: %q\n", out)
		return
	}
	if !strings.Contains(err.Error(), "cycle") || !strings.Contains(err.Error(), "line ") {
		fmt.Printf("OTHER ERROR: %v\n", err)
		return
	}
	fmt.Printf("REFUSED: %v\n", err)
}
