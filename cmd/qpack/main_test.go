package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// runMain runs a command line as main does and returns stdout, stderr and
// the exit status.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"qpack"}, args...), &o, &e)
	return o.String(), e.String(), code
}

func TestNormalizeArgs(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want string }{
		{"qpack inspect X --json", "qpack inspect --json X"},
		{"qpack inspect --json X", "qpack inspect --json X"},
		{"qpack --verbose inspect X --json", "qpack --verbose inspect --json X"},
		{"qpack inspect X --verbose", "qpack --verbose inspect X"},
		{"qpack inspect --verbose X --json", "qpack --verbose inspect --json X"},
		{"qpack inspect X -- --json", "qpack inspect X -- --json"},
		{"qpack inspect X --nosuch", "qpack inspect --nosuch X"},
		{"qpack quickstart --workdir W --json", "qpack quickstart --workdir W --json"},
		{"qpack quickstart --json --workdir=W", "qpack quickstart --json --workdir=W"},
		{"qpack quickstart extra --workdir W", "qpack quickstart --workdir W extra"},
		{"qpack generate M --prompt -", "qpack generate --prompt - M"},
		{"qpack help generate", "qpack help generate"},
	} {
		got, err := normalizeArgs(app, strings.Fields(tc.in))
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, strings.Join(got, " "), err, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	cmds := []string{"chat", "download", "generate", "inspect", "logits", "quickstart", "repack", "verify-install"}
	for _, tc := range []struct{ in, want string }{
		{"gen", "generate"},
		{"downlod", "download"},
		{"rpeack", "repack"},
		{"verify", "verify-install"},
		{"zzz", ""},
		{"c", "chat"},
		{"x", ""},
	} {
		if got := suggest(tc.in, cmds); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := suggest("revison", []string{"revision", "include", "exclude"}); got != "revision" {
		t.Errorf("flag: got %q", got)
	}
}

// typo misspells a name by dropping its second letter.
func typo(name string) string { return name[:1] + name[2:] }

// TestUsageErrorsEveryCommand: a misspelled flag and a misspelled command,
// for every command, print one line on stderr with a suggestion, nothing on
// stdout, and exit 2.
func TestUsageErrorsEveryCommand(t *testing.T) {
	app := newApp()
	for _, c := range app.Commands {
		if c.Hidden {
			continue
		}
		// A flag of the command, misspelled, after and before an argument.
		var flagName string
		for _, f := range c.Flags {
			if n := f.Names()[0]; len(n) > 3 {
				flagName = n
				break
			}
		}
		if flagName == "" {
			t.Fatalf("%s: no flag to misspell", c.Name)
		}
		cases := [][]string{
			{typo(c.Name), "arg"},
			{c.Name, "arg", "--" + typo(flagName)},
			{c.Name, "--" + typo(flagName), "arg"},
			{c.Name, "arg", "--no-such-flag-at-all"},
		}
		for _, args := range cases {
			stdout, stderr, code := runMain(t, args...)
			what := fmt.Sprintf("qpack %s", strings.Join(args, " "))
			if code != 2 {
				t.Errorf("%s: exit %d, want 2 (stderr %q)", what, code, stderr)
			}
			if stdout != "" {
				t.Errorf("%s: stdout %q, want nothing", what, stdout)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("%s: stderr is not one line: %q", what, stderr)
			}
			if strings.Contains(args[len(args)-1], "no-such") {
				continue
			}
			want := "did you mean " + c.Name + "?"
			if args[0] == c.Name {
				want = "did you mean --" + flagName + "?"
			}
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr %q lacks %q", what, stderr, want)
			}
		}
	}
}

func TestGlobalFlagAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--verbose", "inspect", "--help"},
		{"inspect", "--verbose", "--help"},
		{"inspect", "--help", "--verbose"},
	} {
		stdout, stderr, code := runMain(t, args...)
		if code != 0 || !strings.Contains(stdout, "inspect") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
	if _, stderr, code := runMain(t, "help", "gen"); code != 2 || !strings.Contains(stderr, "did you mean generate?") {
		t.Errorf("help gen: exit %d, %q", code, stderr)
	}
}

// TestHelpDefaultsOnce: no line of any command's help names a default
// twice.
func TestHelpDefaultsOnce(t *testing.T) {
	app := newApp()
	for _, c := range app.Commands {
		stdout, stderr, code := runMain(t, c.Name, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d %s", c.Name, code, stderr)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s --help: %q", c.Name, line)
			}
			if strings.Contains(line, "(default: false)") {
				t.Errorf("%s --help: bool default shown: %q", c.Name, line)
			}
		}
	}
}

func TestDedupeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"config.json: config.json: bad":  "config.json: bad",
		"a: b: a: c":                     "a: b: a: c",
		"repack: x.safetensors: x: y":    "repack: x.safetensors: x: y",
		"ok":                             "ok",
		"f.json: f.json: f.json: broken": "f.json: broken",
	} {
		if got := dedupeMessage(in); got != want {
			t.Errorf("%q: got %q", in, got)
		}
	}
}

// TestMissingArgumentEveryCommand: a command run without its required
// argument prints one line on stderr, nothing on stdout, and exits 2.
func TestMissingArgumentEveryCommand(t *testing.T) {
	app := newApp()
	for _, c := range app.Commands {
		if c.Hidden || c.Name == "quickstart" { // quickstart needs no argument
			continue
		}
		stdout, stderr, code := runMain(t, c.Name)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("qpack %s: exit %d, stdout %q, stderr %q", c.Name, code, stdout, stderr)
		}
	}
}

// TestLateFlagTypo: a misspelled flag that only parseLateFlags sees (the
// command line did not go through normalizeArgs) is still one usage line
// with a suggestion.
func TestLateFlagTypo(t *testing.T) {
	_, err := runCLI(t, "download", "org/m", "--revison", "x")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "did you mean --revision?") {
		t.Errorf("got %v (exit %d)", err, exitCode(err))
	}
}
