package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// usageError is a mistake on the command line. Its message is one line,
// with a suggestion when one is close; it exits 2 and prints nothing on
// stdout.
type usageError struct {
	cmd string // "" for the top level
	msg string
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return e.msg + " (see qpack --help)"
	}
	return fmt.Sprintf("%s: %s (see qpack %s --help)", e.cmd, e.msg, e.cmd)
}

func usageErr(cmd, format string, a ...any) error {
	return withCode(exitUsage, &usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)})
}

// flagUsageError turns an error of package flag (as urfave/cli and
// parseLateFlags report it) into a usageError for command cmd, whose flags
// are flags, with a suggestion for a misspelled flag name.
func flagUsageError(cmd string, flags []cli.Flag, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		m := fmt.Sprintf("unknown flag %s", dashed(name))
		if s := suggest(name, flagNames(flags)); s != "" {
			m += fmt.Sprintf("; did you mean %s?", dashed(s))
		}
		return usageErr(cmd, "%s", m)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return usageErr(cmd, "flag %s needs a value", dashed(strings.TrimLeft(name, "-")))
	}
	// "invalid value "x" for flag -n: parse error" and the like.
	msg = strings.ReplaceAll(msg, "\n", " ")
	// A boolean's is "invalid boolean value "x" for -name: parse error".
	for _, pre := range []string{" for flag -", " for -"} {
		if i := strings.Index(msg, pre); i >= 0 {
			rest := msg[i+len(pre):]
			name, tail, _ := strings.Cut(rest, ":")
			msg = msg[:i] + " for " + dashed(strings.TrimLeft(name, "-")) + ":" + tail
			break
		}
	}
	return usageErr(cmd, "%s", msg)
}

// dashed writes a flag name as it is typed: -x or --name.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func flagNames(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		out = append(out, f.Names()...)
	}
	return append(out, "help")
}

// commandNames lists the names and aliases of the visible commands.
func commandNames(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c.Names()...)
		}
	}
	return out
}

// suggest returns the candidate the user most likely meant by s: the only
// one s is a prefix of, else the closest by edit distance when it is close
// enough (at most a third of the longer name, and at least 1), else "".
func suggest(s string, candidates []string) string {
	s = strings.ToLower(s)
	if s == "" {
		return ""
	}
	var prefixed []string
	for _, c := range candidates {
		if strings.HasPrefix(c, s) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	best, bestD := "", -1
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		d := editDistance(s, c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(1, max(len(s), len(best))/3) {
		return ""
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment: adjacent transpositions count as one edit) of a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// normalizeArgs rewrites a command line so urfave/cli parses it the way
// users type it, and reports an unknown command:
//   - global flags (--verbose) may appear anywhere: they are moved in front
//     of the command;
//   - a command's flags may follow its positional arguments (`qpack inspect
//     X.qpack --json`; urfave/cli v2 stops at the first positional
//     argument): they are moved in front of them, a value flag with its
//     value unless written --name=value. A flag the command does not define
//     is moved too, so that it is reported as a usage error rather than
//     taken for an argument;
//   - "--" ends flag parsing as usual; "-" is an argument.
func normalizeArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	globalValue := flagKinds(app.Flags)
	// Global flags come before the command name.
	i := 1
	for i < len(args) && isFlagArg(args[i]) {
		name, hasValue := flagName(args[i])
		if tv := globalValue[name]; tv && !hasValue {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args, nil
	}
	name := args[i]
	if name == "--" {
		return args, nil
	}
	if name == "help" || name == "h" {
		// `qpack help gen`: the topic must be a command too.
		if i+1 < len(args) && !isFlagArg(args[i+1]) && app.Command(args[i+1]) == nil {
			return nil, unknownCommand(app, args[i+1])
		}
		return args, nil
	}
	cmd := app.Command(name)
	if cmd == nil {
		return nil, unknownCommand(app, name)
	}
	takesValue := flagKinds(cmd.Flags)
	takesValue["help"], takesValue["h"] = false, false
	globals := append([]string{}, args[1:i]...)
	var flags, pos []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			pos = append(pos, rest[j:]...)
			break
		}
		if !isFlagArg(a) {
			pos = append(pos, a)
			continue
		}
		fname, hasValue := flagName(a)
		tv, known := takesValue[fname]
		dst := &flags
		if !known {
			if gtv, isGlobal := globalValue[fname]; isGlobal {
				tv, known, dst = gtv, true, &globals
			}
		}
		*dst = append(*dst, a)
		if known && tv && !hasValue && j+1 < len(rest) {
			*dst = append(*dst, rest[j+1])
			j++
		}
	}
	out := append([]string{args[0]}, globals...)
	out = append(out, name)
	out = append(out, flags...)
	return append(out, pos...), nil
}

func unknownCommand(app *cli.App, name string) error {
	m := fmt.Sprintf("unknown command %q", name)
	if s := suggest(name, commandNames(app.Commands)); s != "" {
		m += fmt.Sprintf("; did you mean %s?", s)
	}
	return usageErr("", "%s", m)
}

// isFlagArg reports whether a looks like a flag (not "-" and not a
// negative number, which commands take as values).
func isFlagArg(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	if c := a[1]; c >= '0' && c <= '9' || c == '.' {
		return false
	}
	return true
}

// flagName returns the name of flag argument a and whether it carries its
// value (--name=value).
func flagName(a string) (string, bool) {
	name := strings.TrimLeft(a, "-")
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

// flagKinds maps every name of flags to whether the flag takes a value.
func flagKinds(flags []cli.Flag) map[string]bool {
	out := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			out[n] = !isBool
		}
	}
	return out
}

// onUsageError is every command's OnUsageError: one line, exit 2, no help.
func onUsageError(c *cli.Context, err error, _ bool) error {
	name, flags := "", c.App.Flags
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		name, flags = c.Command.Name, c.Command.Flags
	}
	return flagUsageError(name, flags, err)
}
