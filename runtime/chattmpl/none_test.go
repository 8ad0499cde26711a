package chattmpl

import "testing"

// JSON null and the items filter behave as in Jinja (expected strings are
// what jinja2 3.1 renders for the same template and data).
func TestNoneAndItems(t *testing.T) {
	src := `{% if tools[0].z %}T{% else %}F{% endif %}|{{ tools[0].z is none }}|{{ tools[0].z }}|` +
		`{{ tools[0].z | string }}|{{ tools[0].z is defined }}|{{ tools[0].z | default("d") }}|` +
		`{% for k, v in tools[0] | items %}{{ k }}={{ v }},{% endfor %}|{{ tools[0] | tojson }}`
	got := render(t, src, `{"z": null, "b": 1, "a": [null]}`)
	want := `F|True|None|None|True|None|z=None,b=1,a=[None],|{"z": null, "b": 1, "a": [null]}`
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
