package chattmpl

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The "set" statement, in place of gonja's, so that a template cannot make
// a value contain itself (printing or iterating it would then recurse until
// the Go stack overflows, which kills the process). It takes the forms
// Jinja's parser takes:
//
//	{% set x = expr %}            {% set x = a if cond else b %}
//	{% set a, b = expr, expr %}   {% set (a, b) = pair %}
//	{% set ns.attr = expr %}      {% set x %}...{% endset %}
//
// An attribute may be set only on a namespace (Jinja: "cannot assign
// attribute on non-namespace object"), and a value whose graph reaches the
// namespace it is stored in is refused; so is, for any target, one nested
// deeper than maxValueDepth or too large (valuegraph.go).

// namespace is what the template function namespace(...) makes: a map, as
// gonja's own, of a type of its own so that set can tell it from a dict.
// It must have no methods: gonja would take them for attributes.
type namespace map[string]any

func namespaceFunction(_ *exec.Evaluator, params *exec.VarArgs) namespace {
	ns := namespace{}
	for key, value := range params.KwArgs {
		ns[key] = value
	}
	return ns
}

func init() {
	// environment (chattmpl.go) offers gonja's globals; namespace is ours.
	environment.Context.Set("namespace", namespaceFunction)
}

// setTarget is where a set stores: a name, a namespace attribute, or a
// tuple of targets to unpack into.
type setTarget struct {
	name  *tokens.Token // the name, or the namespace's name when attr != ""
	attr  string
	tuple []*setTarget // non-nil for a tuple target
}

// setItem is one expression of the right-hand side, with Jinja's optional
// "if cond [else alt]".
type setItem struct {
	expr, cond, alt nodes.Expression
}

type setStatement struct {
	location *tokens.Token
	target   *setTarget
	items    []setItem // expression form; several (or a trailing comma) make a tuple
	tuple    bool
	body     *nodes.Wrapper // block form
}

func (s *setStatement) Position() *tokens.Token { return s.location }
func (s *setStatement) String() string {
	return fmt.Sprintf("SetControlStructure(Line=%d Col=%d)", s.location.Line, s.location.Col)
}

var reservedNames = map[string]bool{
	"true": true, "false": true, "none": true, "True": true, "False": true, "None": true,
}

func setParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	s := &setStatement{location: p.Current()}
	target, err := parseSetTarget(args)
	if err != nil {
		return nil, err
	}
	s.target = target
	if args.Match(tokens.Assign) == nil {
		if !args.End() {
			return nil, args.Error("set: expected '=' or the end of the tag (block set)", args.Current())
		}
		wrapper, endargs, err := p.WrapUntil("endset")
		if err != nil {
			return nil, err
		}
		if !endargs.End() {
			return nil, endargs.Error("endset takes no arguments", nil)
		}
		s.body = wrapper
		return s, nil
	}
	for {
		expr, err := args.ParseExpression()
		if err != nil {
			return nil, err
		}
		if expr == nil {
			return nil, args.Error("set: expected an expression", args.Current())
		}
		cond, alt, err := args.ParseCondition()
		if err != nil {
			return nil, err
		}
		s.items = append(s.items, setItem{expr: expr, cond: cond, alt: alt})
		if args.Match(tokens.Comma) == nil {
			break
		}
		s.tuple = true
		if args.End() {
			break
		}
	}
	if !args.End() {
		return nil, args.Error("set: malformed tag", args.Current())
	}
	return s, nil
}

// parseSetTarget parses Jinja's assignment targets: name, name.attr, or
// names (and parenthesised tuples of names) separated by commas.
func parseSetTarget(args *parser.Parser) (*setTarget, error) {
	first, err := parseSetName(args)
	if err != nil {
		return nil, err
	}
	if first.tuple == nil && args.Match(tokens.Dot) != nil {
		attr := args.Match(tokens.Name)
		if attr == nil {
			return nil, args.Error("set: expected an attribute name after '.'", args.Current())
		}
		return &setTarget{name: first.name, attr: attr.Val}, nil
	}
	if args.Current(tokens.Comma) == nil {
		return first, nil
	}
	t := &setTarget{tuple: []*setTarget{first}}
	for args.Match(tokens.Comma) != nil {
		next, err := parseSetName(args)
		if err != nil {
			return nil, err
		}
		t.tuple = append(t.tuple, next)
	}
	return t, nil
}

// parseSetName parses a name or a parenthesised tuple of targets.
func parseSetName(args *parser.Parser) (*setTarget, error) {
	if open := args.Match(tokens.LeftParenthesis); open != nil {
		t := &setTarget{tuple: []*setTarget{}}
		for args.Match(tokens.RightParenthesis) == nil {
			if len(t.tuple) > 0 && args.Match(tokens.Comma) == nil {
				return nil, args.Error("set: expected ',' or ')' in the target", args.Current())
			}
			if args.Match(tokens.RightParenthesis) != nil {
				break
			}
			inner, err := parseSetName(args)
			if err != nil {
				return nil, err
			}
			t.tuple = append(t.tuple, inner)
		}
		if len(t.tuple) == 0 {
			return nil, args.Error("set: empty target", open)
		}
		return t, nil
	}
	name := args.Match(tokens.Name)
	if name == nil {
		return nil, args.Error("set: expected a name to assign to", args.Current())
	}
	if reservedNames[name.Val] {
		return nil, args.Error(fmt.Sprintf("set: cannot assign to %q", name.Val), name)
	}
	return &setTarget{name: name}, nil
}

func (s *setStatement) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	value, err := s.value(r)
	if err != nil {
		return err
	}
	return s.assign(r, s.target, value)
}

func (s *setStatement) value(r *exec.Renderer) (*exec.Value, error) {
	if s.body != nil {
		buf := new(bytes.Buffer)
		sub := r.Inherit()
		sub.Output = buf
		if err := sub.ExecuteWrapper(s.body); err != nil {
			return nil, err
		}
		// Jinja's block set makes Markup (a safe string).
		return exec.AsSafeValue(buf.String()), nil
	}
	values := make(exec.ValuesList, 0, len(s.items))
	for _, it := range s.items {
		v, err := it.eval(r)
		if err != nil {
			return nil, err
		}
		values = append(values, v)
	}
	if !s.tuple {
		return values[0], nil
	}
	return exec.AsValue(values), nil
}

func (it setItem) eval(r *exec.Renderer) (*exec.Value, error) {
	expr := it.expr
	if it.cond != nil {
		c := r.Eval(it.cond)
		if c.IsError() {
			return nil, c
		}
		if c.IsNil() || !c.IsTrue() {
			if it.alt == nil {
				return exec.AsValue(nil), nil // Jinja: undefined
			}
			expr = it.alt
		}
	}
	v := r.Eval(expr)
	if v == nil {
		return nil, fmt.Errorf("set: invalid value %s", expr)
	}
	if v.IsError() {
		return nil, v
	}
	return v, nil
}

func (s *setStatement) assign(r *exec.Renderer, t *setTarget, value *exec.Value) error {
	switch {
	case t.tuple != nil:
		items, err := unpack(value, len(t.tuple))
		if err != nil {
			return fmt.Errorf("set at line %d: %w", s.location.Line, err)
		}
		for i, sub := range t.tuple {
			if err := s.assign(r, sub, items[i]); err != nil {
				return err
			}
		}
		return nil
	case t.attr != "":
		obj := r.Eval(&nodes.Name{Name: t.name})
		if obj.IsError() {
			return obj
		}
		ns, ok := obj.Interface().(namespace)
		if !ok {
			return fmt.Errorf("set %s.%s at line %d: cannot assign an attribute on a non-namespace object", t.name.Val, t.attr, s.location.Line)
		}
		v := value.Interface()
		if err := checkValue(ns, v); err != nil {
			return fmt.Errorf("set %s.%s at line %d: %w", t.name.Val, t.attr, s.location.Line, err)
		}
		ns[t.attr] = v
		return nil
	default:
		v := value.Interface()
		if err := checkValue(nil, v); err != nil {
			return fmt.Errorf("set %s at line %d: %w", t.name.Val, s.location.Line, err)
		}
		r.Environment.Context.Set(t.name.Val, v)
		return nil
	}
}

// unpack splits value into exactly n items, as Python's tuple assignment.
func unpack(value *exec.Value, n int) ([]*exec.Value, error) {
	var items []*exec.Value
	switch {
	case value.IsString():
		for _, c := range value.String() {
			items = append(items, exec.AsValue(string(c)))
			if len(items) > n {
				break
			}
		}
	case value.IsList():
		for i := 0; i < value.Len() && i <= n; i++ {
			items = append(items, value.Index(i))
		}
	case value.IsDict():
		for _, k := range value.Keys() {
			items = append(items, k)
			if len(items) > n {
				break
			}
		}
	default:
		return nil, errors.New("cannot unpack a non-iterable value")
	}
	switch {
	case len(items) > n:
		return nil, fmt.Errorf("too many values to unpack (expected %d)", n)
	case len(items) < n:
		return nil, fmt.Errorf("not enough values to unpack (expected %d, got %d)", n, len(items))
	}
	return items, nil
}
