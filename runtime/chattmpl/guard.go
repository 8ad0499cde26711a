package chattmpl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// A chat template comes with the model files, so it is treated as
// untrusted. gonja evaluates by recursion on the Go stack, and a Go stack
// overflow cannot be recovered, so whatever lets a template recurse without
// bound is refused or limited here:
//   - include, import, from, extends and block are refused (chat templates
//     have no other files; transformers offers none either);
//   - `for ... recursive` is refused;
//   - macro calls nest at most maxMacroDepth deep;
//   - the "do" statement and the list/dict methods that mutate are not
//     offered (transformers renders in Jinja's immutable sandbox, without the
//     do extension), so data cannot be made to contain itself through them;
//   - brackets and block tags nest at most maxNesting deep in the source;
//   - set is ours (set.go): it refuses a namespace attribute whose value
//     would contain the namespace, and any value that nests or expands
//     past the bounds in valuegraph.go.

const (
	maxMacroDepth = 64
	maxNesting    = 100
)

var refusedTags = []string{"include", "import", "from", "extends", "block", "do"}

func controlStructureSet() *exec.ControlStructureSet {
	cs := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{})
	cs.Update(builtins.ControlStructures)
	must(cs.Replace("set", setParser))
	for _, name := range refusedTags {
		name := name
		refuse := func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			return nil, args.Error(fmt.Sprintf("the %q statement is not supported in chat templates", name), nil)
		}
		if cs.Exists(name) {
			must(cs.Replace(name, refuse))
		} else {
			must(cs.Register(name, refuse))
		}
	}
	forParser, _ := cs.Get("for")
	must(cs.Replace("for", func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		n, err := forParser(p, args)
		if err != nil {
			return nil, err
		}
		if f, ok := n.(*controlStructures.ForControlStructure); ok && f.Recursive {
			return nil, errors.New("recursive for loops are not supported in chat templates")
		}
		return n, nil
	}))
	macroParser, _ := cs.Get("macro")
	must(cs.Replace("macro", func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		n, err := macroParser(p, args)
		if err != nil {
			return nil, err
		}
		m, ok := n.(*controlStructures.MacroControlStructure)
		if !ok {
			return nil, fmt.Errorf("unexpected macro node %T", n)
		}
		return &guardedMacro{m.Macro}, nil
	}))
	must(cs.Register("generation", generationParser))
	return cs
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// guardedMacro defines a macro whose calls may nest only maxMacroDepth deep.
type guardedMacro struct {
	*nodes.Macro
}

func (g *guardedMacro) String() string { return "GuardedMacro(" + g.Name + ")" }

func (g *guardedMacro) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	fn, err := exec.MacroNodeToFunc(g.Macro, r)
	if err != nil {
		return fmt.Errorf("macro %q: %w", g.Name, err)
	}
	depth := 0
	name := g.Name
	r.Environment.Context.Set(name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		if depth >= maxMacroDepth {
			return exec.AsValue(fmt.Errorf("macro %q nested more than %d deep", name, maxMacroDepth))
		}
		depth++
		defer func() { depth-- }()
		return fn(params)
	}))
	return nil
}

// generation is transformers' {% generation %} ... {% endgeneration %}
// tag, which marks assistant text for training masks; here it just renders
// its body.
type generationTag struct {
	wrapper *nodes.Wrapper
}

func (g *generationTag) Position() *tokens.Token { return g.wrapper.Position() }
func (g *generationTag) String() string          { return "Generation" }
func (g *generationTag) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.wrapper)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	w, _, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !args.Stream().End() {
		return nil, args.Error("generation takes no arguments", nil)
	}
	return &generationTag{wrapper: w}, nil
}

// immutableMethods drops the list and dict methods that mutate, as Jinja's
// immutable sandbox does.
func immutableMethods() exec.Methods {
	m := builtins.Methods
	keep := func(names ...string) map[string]exec.Method[[]any] {
		out := map[string]exec.Method[[]any]{}
		for _, n := range names {
			if f, ok := m.List.Get(n); ok {
				out[n] = f
			}
		}
		return out
	}
	keepDict := func(names ...string) map[string]exec.Method[map[string]any] {
		out := map[string]exec.Method[map[string]any]{}
		for _, n := range names {
			if f, ok := m.Dict.Get(n); ok {
				out[n] = f
			}
		}
		return out
	}
	m.Str = strMethods()
	m.List = exec.NewMethodSet(keep("copy"))
	m.Dict = exec.NewMethodSet(keepDict("keys", "values", "items", "get", "copy"))
	return m
}

// checkNesting refuses sources whose brackets or block tags nest deeper
// than maxNesting, before the recursive parser sees them.
func checkNesting(src string) error {
	depth := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '(', '[', '{':
			depth++
			if depth > maxNesting {
				return fmt.Errorf("brackets nested more than %d deep", maxNesting)
			}
		case ')', ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	blocks := 0
	for rest := src; ; {
		i := strings.Index(rest, "{%")
		if i < 0 {
			break
		}
		rest = rest[i+2:]
		word := strings.TrimLeft(rest, "-+ \t\r\n")
		end := strings.IndexFunc(word, func(r rune) bool { return !(r >= 'a' && r <= 'z') })
		if end < 0 {
			end = len(word)
		}
		switch kw := word[:end]; {
		case kw == "if" || kw == "for" || kw == "macro" || kw == "call" || kw == "filter" ||
			kw == "with" || kw == "generation" || kw == "autoescape" || kw == "trans" || kw == "raw":
			blocks++
			if blocks > maxNesting {
				return fmt.Errorf("blocks nested more than %d deep", maxNesting)
			}
		case strings.HasPrefix(kw, "end"):
			if blocks > 0 {
				blocks--
			}
		}
	}
	return nil
}

// pyList is the list type handed to templates. gonja's own item lookup gets
// x[-n] wrong when n equals the length (x[-1] of a one-item list is
// undefined); pyList answers item lookups itself, with Python's rules.
// Lists that gonja builds internally (literals, filter results) keep its
// behaviour.
type pyList []any

// GetItem implements gonja's exec.ItemGetter.
func (l pyList) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(l[i]), true
}
