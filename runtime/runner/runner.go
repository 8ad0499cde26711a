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
	goruntime "runtime"
	"runtime/debug"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/sample"
	"github.com/qpack-go/qpack/runtime/tokenizer"
)

// DefaultPrefillChunk is the default number of prompt tokens per forward
// pass during prefill.
const DefaultPrefillChunk = 128

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
	// VerifyExpert, if set, checks each expert blob after it is read (the
	// command wires verify.ExpertChecker here).
	VerifyExpert func(layer, expert int, blob []byte) error
	Backend      runtime.Backend // nil: CPU
	Logger       *slog.Logger    // nil: slog.Default()
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
	denseBytes int64
	log        *slog.Logger
}

// Open loads the model in dir (a .qpack container or an MLX checkpoint
// directory) with its tokenizer.json, chat template and EOS ids, and puts
// an expert cache in front of its experts.
func Open(dir string, opt Options) (r *Runner, err error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
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
	// The loader's own cache keeps nothing: the expert cache replaces it.
	m, err := runtime.Load(dir, &runtime.LoadOptions{ExpertCacheBytes: -1, Backend: opt.Backend})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	var after goruntime.MemStats
	debug.FreeOSMemory()
	goruntime.ReadMemStats(&after)
	dense := int64(after.HeapAlloc) - int64(before.HeapAlloc)

	simple, ok := m.Experts.(*runtime.ExpertCache)
	if !ok {
		return nil, fmt.Errorf("%s: the loader gave an expert source of type %T, not a file-backed one", dir, m.Experts)
	}
	blobs, ok := simple.Blobs()
	if !ok {
		return nil, fmt.Errorf("%s: experts are not backed by files", dir)
	}
	var all int64
	for l := range blobs.Layers() {
		all += blobs.BufSize(l) * int64(blobs.Experts())
	}
	budget := opt.ExpertCache
	if budget <= 0 {
		budget = expertcache.DefaultBudget(dense, all)
	}
	cache, err := expertcache.New(blobs, expertcache.Options{Budget: budget, IO: opt.IO, Readers: opt.Readers, Verify: opt.VerifyExpert})
	if err != nil {
		return nil, err
	}
	m.Experts = cache
	chunk := opt.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	log.Debug("model loaded", "model", dir, "type", m.Config.ModelType, "layers", m.Config.Layers,
		"dense_bytes", dense, "expert_cache", cache.Budget(), "io", opt.IO, "template", tmpl != nil)
	return &Runner{Model: m, Tokenizer: tok, Template: tmpl, EOS: eos, Cache: cache, Dir: dir,
		chunk: chunk, denseBytes: max(dense, 0), log: log}, nil
}

// DenseBytes is the heap the dense weights took when loaded.
func (r *Runner) DenseBytes() int64 { return r.denseBytes }

// PrefillChunk is the number of prompt tokens per forward pass.
func (r *Runner) PrefillChunk() int { return r.chunk }

// LimitHeap sets the Go runtime's soft memory limit to the dense weights
// plus overhead, so that garbage never grows the heap far past the live
// weights (the expert cache's slots are outside the Go heap). It changes a
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
	err := r.Cache.Close()
	if e := r.Model.Close(); err == nil {
		err = e
	}
	return err
}
