package modelconfig

import (
	"fmt"
	"slices"
	"sync"
)

// Arch is one architecture's config parser, registered under the
// model_type spellings converters write for it.
type Arch struct {
	// Name is the architecture (Config.ModelType), also its first spelling.
	Name string
	// ModelTypes are the top-level model_type values that select it (a
	// wrapper type like "qwen3_5_moe" or a bare text type like
	// "qwen3_5_moe_text").
	ModelTypes []string
	// TextModelTypes are the text_config.model_type values it accepts
	// inside such a wrapper ("" is always accepted).
	TextModelTypes []string
	// Parse fills a Config from the document. It records problems on the
	// document's objects (Object.Fail) and may return a partial Config
	// when it did; the common checks then run on what it returned.
	Parse func(d *Document) *Config
}

// Document is a config.json being parsed: its top-level object and the
// object holding the text model's fields (text_config when there is one,
// else the top level).
type Document struct {
	File string
	Top  *Object
	Text *Object
	// Nested is true when Text is text_config.
	Nested bool
	// Declared and TextDeclared are the model_type values as written.
	Declared, TextDeclared string
}

// Registry maps model_type spellings to architectures. The package's
// functions use the default one, which every architecture's init fills.
type Registry struct {
	mu     sync.RWMutex
	byType map[string]*Arch
	arches []*Arch
}

var defaultRegistry = NewRegistry()

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byType: map[string]*Arch{}} }

// Default returns the registry Parse and Load use.
func Default() *Registry { return defaultRegistry }

// Clone returns a registry holding the same architectures, to add to
// without changing r.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := NewRegistry()
	for _, a := range r.arches {
		c.arches = append(c.arches, a)
		for _, t := range a.ModelTypes {
			c.byType[t] = a
		}
	}
	return c
}

// Register adds an architecture to the default registry.
func Register(a Arch) { defaultRegistry.Register(a) }

// Supported lists the architectures of the default registry, sorted.
func Supported() []string { return defaultRegistry.Supported() }

// Register adds an architecture. It panics when one of its model types is
// taken (a programming error, found at init).
func (r *Registry) Register(a Arch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Name == "" || a.Parse == nil {
		panic("modelconfig: Register needs a Name and a Parse func")
	}
	types := append([]string{a.Name}, a.ModelTypes...)
	for _, t := range types {
		if prev, dup := r.byType[t]; dup {
			panic(fmt.Sprintf("modelconfig: model_type %q registered by %s and %s", t, prev.Name, a.Name))
		}
	}
	arch := a
	arch.ModelTypes = types
	for _, t := range types {
		r.byType[t] = &arch
	}
	r.arches = append(r.arches, &arch)
}

// Supported lists the registered architectures, sorted.
func (r *Registry) Supported() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.arches))
	for _, a := range r.arches {
		out = append(out, a.Name)
	}
	slices.Sort(out)
	return out
}

// lookup finds the architecture of a top-level model_type.
func (r *Registry) lookup(modelType string) *Arch {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byType[modelType]
}
