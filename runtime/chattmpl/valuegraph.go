package chattmpl

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Bounds on a value stored into a namespace attribute. Python's recursion
// limit (1000 frames) stops Jinja printing much shallower values than
// maxValueDepth; maxValueNodes bounds the work of the check.
const (
	maxValueDepth = 500
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

// checkStored refuses v as a new attribute of ns when v's graph (through
// maps, slices, arrays, pointers, interfaces, structs and gonja Values)
// reaches ns, nests containers deeper than maxValueDepth, or has more than
// maxValueNodes nodes. It walks without recursion, and each container once:
// depth is the longest chain of containers, computed after a node's
// children (the graph is acyclic, since every set that could close a cycle
// is refused).
func checkStored(ns namespace, v any) error {
	target := reflect.ValueOf(ns).UnsafePointer()
	type frame struct {
		v         reflect.Value
		id        nodeID
		children  []reflect.Value
		next      int
		depth     int // deepest child so far
		container bool
	}
	depthOf := map[nodeID]int{} // finished containers
	onStack := map[nodeID]bool{}
	nodes := 0
	var stack []*frame
	// push visits v: it returns the depth of a finished or leaf node, or
	// pushes a frame and returns -1.
	push := func(v reflect.Value) (int, error) {
		nodes++
		if nodes > maxValueNodes {
			return 0, fmt.Errorf("the value has more than %d parts, too many to check", maxValueNodes)
		}
		v, id, children, container := expand(v)
		if container {
			if id.ptr == target && v.Kind() == reflect.Map {
				return 0, errCycle
			}
			if onStack[id] {
				return 0, errCycle // a cycle not through ns: refuse it too
			}
			if d, ok := depthOf[id]; ok {
				return d, nil
			}
		} else if len(children) == 0 {
			return 0, nil
		}
		f := &frame{v: v, id: id, children: children, container: container}
		if container {
			onStack[id] = true
		}
		stack = append(stack, f)
		return -1, nil
	}
	finish := func(f *frame) int {
		d := f.depth
		if f.container {
			if k := f.v.Kind(); k == reflect.Map || k == reflect.Slice || k == reflect.Array {
				d++
			}
			delete(onStack, f.id)
			depthOf[f.id] = d
		}
		return d
	}
	if _, err := push(reflect.ValueOf(v)); err != nil {
		return err
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next == len(f.children) {
			stack = stack[:len(stack)-1]
			d := finish(f)
			if d > maxValueDepth {
				return fmt.Errorf("the value nests more than %d deep", maxValueDepth)
			}
			if len(stack) > 0 {
				if p := stack[len(stack)-1]; d > p.depth {
					p.depth = d
				}
			}
			continue
		}
		c := f.children[f.next]
		f.next++
		d, err := push(c)
		if err != nil {
			return err
		}
		if d > f.depth {
			f.depth = d
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
