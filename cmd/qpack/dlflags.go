package main

import (
	"flag"
	"io"

	"github.com/urfave/cli/v2"
)

// lateFlags lets a command take its flags after its positional arguments
// (`qpack download REPO --revision v2`): urfave/cli v2 stops parsing at the
// first positional argument, so the rest is parsed here with the command's
// own flag definitions. A flag given after the arguments wins over one
// given before; repeated slice flags accumulate.
type lateFlags struct {
	c    *cli.Context
	set  *flag.FlagSet
	seen map[string]bool
	pos  []string
}

func parseLateFlags(c *cli.Context) (*lateFlags, error) {
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(set); err != nil {
			return nil, err
		}
	}
	lf := &lateFlags{c: c, set: set, seen: map[string]bool{}}
	rest := c.Args().Slice()
	for len(rest) > 0 {
		if err := set.Parse(rest); err != nil {
			return nil, flagUsageError(c.Command.Name, c.Command.Flags, err)
		}
		rest = set.Args()
		if len(rest) > 0 {
			lf.pos = append(lf.pos, rest[0])
			rest = rest[1:]
		}
	}
	set.Visit(func(f *flag.Flag) { lf.seen[f.Name] = true })
	return lf, nil
}

func (l *lateFlags) Args() []string { return l.pos }

// IsSet reports whether the flag was given, before or after the
// positional arguments.
func (l *lateFlags) IsSet(name string) bool { return l.seen[name] || l.c.IsSet(name) }

func (l *lateFlags) late(name string) (flag.Getter, bool) {
	if !l.seen[name] {
		return nil, false
	}
	g, ok := l.set.Lookup(name).Value.(flag.Getter)
	return g, ok
}

func (l *lateFlags) String(name string) string {
	if g, ok := l.late(name); ok {
		if s, ok := g.Get().(string); ok {
			return s
		}
	}
	return l.c.String(name)
}

func (l *lateFlags) Bool(name string) bool {
	if g, ok := l.late(name); ok {
		if b, ok := g.Get().(bool); ok {
			return b
		}
	}
	return l.c.Bool(name)
}

func (l *lateFlags) Int(name string) int {
	if g, ok := l.late(name); ok {
		if n, ok := g.Get().(int); ok {
			return n
		}
	}
	return l.c.Int(name)
}

func (l *lateFlags) Int64(name string) int64 {
	if g, ok := l.late(name); ok {
		if n, ok := g.Get().(int64); ok {
			return n
		}
	}
	return l.c.Int64(name)
}

func (l *lateFlags) StringSlice(name string) []string {
	out := append([]string(nil), l.c.StringSlice(name)...)
	if l.seen[name] {
		if v, ok := l.set.Lookup(name).Value.(interface{ Value() []string }); ok {
			out = append(out, v.Value()...)
		}
	}
	return out
}
