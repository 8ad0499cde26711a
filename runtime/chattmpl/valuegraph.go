package chattmpl

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Bounds on a value a set stores. Python's recursion limit (1000 frames)
// stops Jinja printing much shallower values than maxValueDepth;
// maxValueSize bounds what printing or iterating the value may visit (a
// value sharing its parts can be far larger than its memory: each of
// "{% set a = [a, a] %}" doubles it), and maxValueNodes the work of the
// check.
const (
	maxValueDepth = 500
	maxValueSize  = 1 << 22
	maxValueNodes = 1 << 20
)

// errCycle reports a value that would contain the namespace it is stored in.
var errCycle = errors.New("the value contains the namespace itself (a cycle, which would recurse without bound)")

// nodeID names a container by identity: a map, a slice's elements, or a
// pointer, with the type so that a struct and its first field differ.
type nodeID struct {
	ptr unsafe.Pointer
	n   int
	typ reflect.Type
}

var valueType = reflect.TypeOf(exec.Value{})

// measure is what checkValue knows of a finished node.
type measure struct {
	depth int   // longest chain of maps, slices and arrays, this one included
	size  int64 // nodes visited when the value is walked as a tree
}

// checkValue refuses v as a value to store when its graph (through maps,
// slices, arrays, pointers, interfaces, structs and gonja Values) reaches
// ns (when ns is not nil: v is to become one of its attributes), nests
// containers deeper than maxValueDepth, expands (as a tree) to more than
// maxValueSize nodes, or has more than maxValueNodes distinct ones. It
// walks without recursion and visits each container once, remembering its
// measure; the graph is acyclic, since every set that could close a cycle
// is refused.
func checkValue(ns namespace, v any) error {
	var target unsafe.Pointer
	if ns != nil {
		target = reflect.ValueOf(ns).UnsafePointer()
	}
	type frame struct {
		v         reflect.Value
		id        nodeID
		children  []reflect.Value
		next      int
		acc       measure // over the children so far
		container bool
	}
	done := map[nodeID]measure{}
	onStack := map[nodeID]bool{}
	nodes := 0
	var stack []*frame
	tooDeep := fmt.Errorf("the value nests more than %d deep", maxValueDepth)
	// push visits v: it returns the measure of a finished or leaf node
	// (true), or pushes a frame (false).
	push := func(v reflect.Value) (measure, bool, error) {
		nodes++
		if nodes > maxValueNodes {
			return measure{}, false, fmt.Errorf("the value has more than %d parts, too many to check", maxValueNodes)
		}
		v, id, children, container := expand(v)
		if container {
			if target != nil && id.ptr == target && v.Kind() == reflect.Map {
				return measure{}, false, errCycle
			}
			if onStack[id] {
				return measure{}, false, errCycle // a cycle not through ns: refuse it too
			}
			if m, ok := done[id]; ok {
				return m, true, nil
			}
		} else if len(children) == 0 {
			return measure{size: 1}, true, nil
		}
		if len(stack) >= 8*maxValueDepth {
			return measure{}, false, tooDeep
		}
		if container {
			onStack[id] = true
		}
		stack = append(stack, &frame{v: v, id: id, children: children, container: container})
		return measure{}, false, nil
	}
	add := func(acc *measure, m measure) {
		acc.depth = max(acc.depth, m.depth)
		acc.size = min(acc.size+m.size, maxValueSize+1)
	}
	if _, _, err := push(reflect.ValueOf(v)); err != nil {
		return err
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next < len(f.children) {
			c := f.children[f.next]
			f.next++
			m, finished, err := push(c)
			if err != nil {
				return err
			}
			if finished {
				add(&f.acc, m)
			}
			continue
		}
		stack = stack[:len(stack)-1]
		m := measure{depth: f.acc.depth, size: f.acc.size + 1}
		if f.container {
			if k := f.v.Kind(); k == reflect.Map || k == reflect.Slice || k == reflect.Array {
				m.depth++
			}
			delete(onStack, f.id)
			done[f.id] = m
		}
		switch {
		case m.depth > maxValueDepth:
			return tooDeep
		case m.size > maxValueSize:
			return fmt.Errorf("the value expands to more than %d parts (it repeats parts of itself)", maxValueSize)
		}
		if len(stack) > 0 {
			add(&stack[len(stack)-1].acc, m)
		}
	}
	return nil
}

// expand resolves v and lists what it holds. container reports a node with
// an identity (id); other nodes with children are interfaces, gonja Values
// and structs, walked through but not remembered.
func expand(v reflect.Value) (_ reflect.Value, id nodeID, children []reflect.Value, container bool) {
	if !v.IsValid() {
		return v, id, nil, false
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return v, id, nil, false
		}
		return v, id, []reflect.Value{v.Elem()}, false
	case reflect.Pointer:
		if v.IsNil() {
			return v, id, nil, false
		}
		return v, nodeID{ptr: v.UnsafePointer(), typ: v.Type()}, []reflect.Value{v.Elem()}, true
	case reflect.Map:
		if v.IsNil() {
			return v, id, nil, false
		}
		it := v.MapRange()
		for it.Next() {
			children = append(children, it.Key(), it.Value())
		}
		return v, nodeID{ptr: v.UnsafePointer(), typ: v.Type()}, children, true
	case reflect.Slice:
		if v.Len() == 0 || isScalar(v.Type().Elem()) {
			return v, id, nil, false
		}
		for i := 0; i < v.Len(); i++ {
			children = append(children, v.Index(i))
		}
		return v, nodeID{ptr: v.UnsafePointer(), n: v.Len(), typ: v.Type()}, children, true
	case reflect.Array:
		if isScalar(v.Type().Elem()) {
			return v, id, nil, false
		}
		for i := 0; i < v.Len(); i++ {
			children = append(children, v.Index(i))
		}
		return v, id, children, false
	case reflect.Struct:
		if v.Type() == valueType {
			if v.CanInterface() {
				inner := v.Interface().(exec.Value)
				return v, id, []reflect.Value{inner.Val}, false
			}
			return v, id, nil, false
		}
		for i := 0; i < v.NumField(); i++ {
			children = append(children, v.Field(i))
		}
		return v, id, children, false
	}
	return v, id, nil, false
}

// isScalar reports a type that holds no references.
func isScalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		return false
	}
	return true
}
