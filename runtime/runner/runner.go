// Package runner generates text with a qwen3_next / qwen3_5_moe model whose
// dense weights sit in RAM and whose routed experts stream from disk through
// a bounded expert cache (package expertcache): it loads a .qpack container
// or an MLX checkpoint directory with its tokenizer, chat template and EOS
// ids, prefills prompts in chunks that read each needed expert once per
// chunk, samples, stops at EOS ids and stop strings, and keeps a
// conversation's decode state between turns.
package runner

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	goruntime "runtime"
	"runtime/debug"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/expertcache"
	_ "github.com/qpack-go/qpack/runtime/models/all" // the architectures it loads
	"github.com/qpack-go/qpack/runtime/sample"
	"github.com/qpack-go/qpack/runtime/tokenizer"
)

// DefaultPrefillChunk is the default number of prompt tokens per forward
// pass during prefill.
const DefaultPrefillChunk = 128

// DefaultSpeculate, as Options.Speculate, guesses as many experts per token
// as the model routes to (its top-k).
const DefaultSpeculate = 0

// Options tunes Open.
type Options struct {
	// ExpertCache is the expert cache's byte budget; 0 derives one from the
	// memory available (expertcache.DefaultBudget).
	ExpertCache int64
	IO          expertcache.IOMode
	Readers     int // reads in flight (0: expertcache.DefaultReaders)
	// PrefillChunk is the number of prompt tokens per forward pass
	// (0: DefaultPrefillChunk; 1: token by token).
	PrefillChunk int
	// Speculate is the experts per token guessed for each sparse layer
	// before its attention or DeltaNet mixer during decode, whose reads
	// then overlap the mixer (runtime.ForwardOptions.Speculate): 0 is
	// DefaultSpeculate, < 0 turns it off. Results do not depend on it.
	Speculate int
	// SpecReads bounds the speculative reads in flight
	// (expertcache.Options.SpecReads; 0: its default).
	SpecReads int
	// NoScan keeps the expert cache's scan policy off during prefill
	// (see Session.Feed); it is for measuring the policy.
	NoScan bool
	// VerifyExpert, if set, checks each expert blob after it is read (the
	// command wires verify.ExpertChecker here).
	VerifyExpert func(layer, expert int, blob []byte) error
	// Backend runs the products (nil: CPU). If it implements
	// runtime.Allocator, the dense weights and the expert cache's slots
	// live in memory from it (experts are read straight into it).
	Backend runtime.Backend
	Logger  *slog.Logger // nil: slog.Default()
}

// Runner is a loaded model ready to generate. A Runner runs one forward
// pass at a time: sessions of one Runner must not generate concurrently.
type Runner struct {
	Model     *runtime.Model
	Tokenizer *tokenizer.Tokenizer
	Template  *chattmpl.Template // nil: the model has none (ChatML is used)
	EOS       []int
	Cache     *expertcache.Cache
	Dir       string

	chunk      int
	spec       int   // experts guessed per token in decode (0: none)
	noScan     bool  // Options.NoScan
	denseBytes int64 // Go heap
	arenaBytes int64 // from the backend's Allocator
	logits     *logitsPool
	log        *slog.Logger
}

// Open loads the model in dir (a .qpack container or an MLX checkpoint
// directory) with its tokenizer.json, chat template and EOS ids, and puts
// an expert cache in front of its experts. A dir that holds no model gives
// CheckModelPath's error (ErrNoModel).
func Open(dir string, opt Options) (r *Runner, err error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := CheckModelPath(dir); err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	tmpl, err := chattmpl.LoadDir(dir)
	if err != nil {
		if !errors.Is(err, chattmpl.ErrNoTemplate) {
			return nil, err
		}
		tmpl = nil
	}
	eos, err := sample.LoadEOS(dir)
	if err != nil {
		return nil, err
	}
	if len(eos) == 0 {
		log.Warn("no eos_token_id in generation_config.json or config.json: generation stops only at stop strings or the token limit", "model", dir)
	}

	var before goruntime.MemStats
	debug.FreeOSMemory()
	goruntime.ReadMemStats(&before)
	// The loader hands the experts' files to the expert cache, made once
	// the dense weights are in memory (their size sets its default budget).
	// A backend that is an Allocator gets the dense weights (Load uses it).
	var (
		cache *expertcache.Cache
		dense int64
	)
	makeCache := func(blobs *runtime.ExpertBlobs, m *runtime.Model) (runtime.ExpertSource, error) {
		var after goruntime.MemStats
		debug.FreeOSMemory()
		goruntime.ReadMemStats(&after)
		dense = max(int64(after.HeapAlloc)-int64(before.HeapAlloc), 0)
		if blobs == nil {
			return nil, fmt.Errorf("experts are not backed by files")
		}
		if opt.IO == expertcache.Direct {
			if why := directFallback(blobs); why != "" {
				log.Warn("direct I/O requested, but expert reads will go through the page cache (buffered)", "model", dir, "why", why)
			}
		}
		var all int64
		for l := range blobs.Layers() {
			all += blobs.BufSize(l) * int64(blobs.Experts())
		}
		budget := opt.ExpertCache
		if budget <= 0 {
			budget = expertcache.DefaultBudget(dense+m.ArenaBytes(), all)
		}
		copt := expertcache.Options{Budget: budget, IO: opt.IO, Readers: opt.Readers, SpecReads: opt.SpecReads, Verify: opt.VerifyExpert}
		if al, ok := opt.Backend.(runtime.Allocator); ok {
			copt.Alloc = func(n int64) ([]byte, error) {
				if n > math.MaxInt {
					return nil, fmt.Errorf("%d bytes do not fit this platform's address space", n)
				}
				return al.Alloc(int(n))
			}
			copt.Free = func(b []byte) {
				if err := al.Free(b); err != nil {
					log.Error("freeing an expert cache slot", "err", err)
				}
			}
		}
		var err error
		cache, err = expertcache.New(blobs, copt)
		if err != nil {
			return nil, err
		}
		return cache, nil
	}
	m, err := runtime.Load(dir, &runtime.LoadOptions{Backend: opt.Backend, Experts: makeCache})
	if err != nil {
		return nil, WrapLoadError(dir, err)
	}
	al, _ := opt.Backend.(runtime.Allocator)
	chunk := opt.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	spec := opt.Speculate
	switch {
	case spec == DefaultSpeculate:
		spec = m.Config.TopK
	case spec < 0:
		spec = 0
	}
	log.Debug("model loaded", "model", dir, "type", m.Config.ModelType, "layers", m.Config.Layers,
		"dense_bytes", dense, "dense_arena", m.ArenaBytes(), "expert_cache", cache.Budget(), "io", opt.IO, "template", tmpl != nil, "speculate", spec)
	return &Runner{Model: m, Tokenizer: tok, Template: tmpl, EOS: eos, Cache: cache, Dir: dir,
		chunk: chunk, spec: spec, noScan: opt.NoScan, denseBytes: max(dense, 0), arenaBytes: m.ArenaBytes(),
		logits: newLogitsPool(al, m.Config.Vocab), log: log}, nil
}

// directFallback says why the expert cache's direct reads would fall back
// to buffered ones for these experts ("" if they will not): direct reads
// need file offsets and buffer positions that are multiples of
// expertcache.Align, and a file system that allows them. It looks at the
// first two experts of the first sparse layer.
func directFallback(blobs *runtime.ExpertBlobs) string {
	var ext []runtime.ExpertExtent
	for l := range blobs.Layers() {
		if blobs.BufSize(l) == 0 {
			continue
		}
		for e := range min(2, blobs.Experts()) {
			var err error
			if ext, err = blobs.Extents(l, e, ext); err != nil {
				return err.Error()
			}
		}
		break
	}
	if len(ext) == 0 {
		return ""
	}
	unaligned := 0
	for _, x := range ext {
		if x.Offset%expertcache.Align != 0 || x.BufOffset%expertcache.Align != 0 {
			unaligned++
		}
	}
	if unaligned > 0 {
		if blobs.Container() == nil {
			return fmt.Sprintf("an MLX checkpoint's expert tensors lie in its safetensors shards at offsets that are not multiples of %d bytes (%d of %d pieces of the first experts), which direct reads need; repack it into a .qpack container for direct reads",
				expertcache.Align, unaligned, len(ext))
		}
		return fmt.Sprintf("%d of %d expert blobs checked start at offsets that are not multiples of %d bytes", unaligned, len(ext), expertcache.Align)
	}
	if !expertcache.DirectAvailable(ext[0].Path) {
		return fmt.Sprintf("the file system of %s does not allow direct reads", ext[0].Path)
	}
	return ""
}

// DenseBytes is the memory the dense weights took when loaded: the Go heap
// they grew, plus the arena from the backend's Allocator if it has one.
func (r *Runner) DenseBytes() int64 { return r.denseBytes + r.arenaBytes }

// Speculate is the experts per token guessed ahead for each sparse layer
// during decode (0: none).
func (r *Runner) Speculate() int { return r.spec }

// PrefillChunk is the number of prompt tokens per forward pass.
func (r *Runner) PrefillChunk() int { return r.chunk }

// LimitHeap sets the Go runtime's soft memory limit to the dense weights in
// the Go heap plus overhead, so that garbage never grows the heap far past
// the live weights (the expert cache's slots, and the dense weights' arena
// from a backend's Allocator, are outside the Go heap). It changes a
// process-wide setting: commands call it, libraries should not. A GOMEMLIMIT
// set in the environment wins.
func (r *Runner) LimitHeap(overhead int64) {
	if lookupEnv("GOMEMLIMIT") {
		return
	}
	debug.SetMemoryLimit(r.denseBytes + overhead)
}

// Close releases the cache and the model's files.
func (r *Runner) Close() error {
	err := r.logits.close()
	if e := r.Cache.Close(); err == nil {
		err = e
	}
	if e := r.Model.Close(); err == nil {
		err = e
	}
	return err
}
