package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
	"github.com/qpack-go/qpack/server"
)

func init() {
	register(&cli.Command{
		Name:      "serve",
		Usage:     "serve the model over the OpenAI-compatible HTTP API (chat completions, completions, models)",
		ArgsUsage: "MODEL",
		Description: "MODEL is a .qpack container or an MLX checkpoint directory. The server listens on 127.0.0.1:8080\n" +
			"by default (GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /health, which answers\n" +
			"503 while the model loads). Requests run one at a time in arrival order; a full queue answers 429. A chat\n" +
			"client that resends its conversation resumes from a saved decode state (--prefix-cache bytes of them).\n" +
			"Another address than loopback needs --api-key (or QPACK_API_KEY) or --insecure-no-key.\n" +
			"SIGINT or SIGTERM stops the running generation (it answers what it has), answers waiting requests 503 and exits.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "address to listen on"},
			&cli.IntFlag{Name: "port", Value: 8080, Usage: "port to listen on (0: any free one, printed)"},
			&cli.StringFlag{Name: "api-key", EnvVars: []string{"QPACK_API_KEY"}, Usage: "require Authorization: Bearer KEY on /v1 requests"},
			&cli.BoolFlag{Name: "insecure-no-key", Usage: "allow a non-loopback --host without --api-key"},
			&cli.StringFlag{Name: "model-id", Usage: "the model id clients use (default: MODEL's base name)"},
			&cli.StringFlag{Name: "cors", Usage: "allow browsers on this origin (or *) to call the API"},
			&cli.IntFlag{Name: "ctx", Usage: "context limit in tokens, prompt plus completion (0: the model's max_position_embeddings)"},
			&cli.IntFlag{Name: "max-tokens", Value: server.DefaultMaxTokens, Usage: "completion limit of a chat request that sets none"},
			&cli.IntFlag{Name: "queue", Value: server.DefaultQueue, Usage: "requests that may wait behind the running one"},
			&cli.StringFlag{Name: "queue-wait", Value: server.DefaultQueueWait.String(), Usage: "longest wait in the queue (then 429)"},
			&cli.StringFlag{Name: "max-body", Value: "16MiB", Usage: "largest request body (413 beyond)"},
			&cli.StringFlag{Name: "prefix-cache", Value: "1GiB", Usage: "bytes of saved decode states for prefix reuse (0: off)"},
			&cli.BoolFlag{Name: "keep-think", Usage: "keep <think>…</think> inline in the content instead of reasoning_content"},
			&cli.StringFlag{Name: "expert-cache", Value: "auto", Usage: "expert cache budget, e.g. 2GiB; auto: half the memory left after the dense weights"},
			&cli.StringFlag{Name: "gpu-expert-cache", Value: "auto", Usage: "with --backend cuda: the GPU's own expert cache, e.g. 8GiB, beside --expert-cache; 0: none (every expert copied in each time); auto: $QPACK_CUDA_EXPERT_CACHE, else half the free device memory"},
			&cli.StringFlag{Name: "io", Value: "buffered", Usage: "expert reads: buffered or direct"},
			&cli.IntFlag{Name: "prefill-chunk", Value: runner.DefaultPrefillChunk, Usage: fmt.Sprintf("prompt tokens per forward pass; saved states fall on multiples of it (default %d on a GPU that runs whole layers)", gpuServePrefillChunk)},
			&cli.StringFlag{Name: "speculate-experts", Value: "auto", Usage: "experts per token guessed ahead during decode (auto, off or N)"},
			&cli.BoolFlag{Name: "verify-experts", Usage: "check each expert blob's BLAKE3 against the manifest when first read (.qpack only)"},
			backendFlag(),
		},
		Action: serveAction,
	})
}

// resolveServeModel turns MODEL into a model directory: a .qpack
// container, a checkpoint directory, or a Hub repo id whose snapshot (refs/main)
// the Hugging Face cache holds, exactly as generate resolves it.
var resolveServeModel = func(_ context.Context, arg string) (string, error) {
	ref, err := resolveModel(arg, "")
	if err != nil {
		return "", err
	}
	return ref.Path, runner.CheckModelPath(ref.Path)
}

// isLoopback reports whether host only listens on this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

type serveSettings struct {
	model  string
	addr   string
	cfg    server.Config
	run    runSettings
	remote bool
}

func parseServeSettings(c *cli.Context) (*serveSettings, error) {
	l, err := parseLateFlags(c)
	if err != nil {
		return nil, withCode(2, err)
	}
	if len(l.Args()) != 1 {
		return nil, withCode(2, fmt.Errorf("serve: want one MODEL argument, got %d", len(l.Args())))
	}
	model, err := resolveServeModel(c.Context, l.Args()[0])
	if err != nil {
		return nil, withCode(2, err)
	}
	s := &serveSettings{model: model}
	host, port := l.String("host"), l.Int("port")
	if port < 0 || port > 65535 {
		return nil, withCode(2, fmt.Errorf("--port %d: want 0 to 65535", port))
	}
	s.addr = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
	key := l.String("api-key")
	if !isLoopback(host) {
		if key == "" && !l.Bool("insecure-no-key") {
			return nil, withCode(2, fmt.Errorf("--host %s is reachable from other machines: set --api-key (or QPACK_API_KEY), or pass --insecure-no-key to serve without one", host))
		}
		s.remote = true
	}
	id := l.String("model-id")
	if id == "" {
		id = filepath.Base(filepath.Clean(model))
	}
	s.cfg = server.Config{ModelID: id, APIKey: key, CORSOrigin: l.String("cors"), Queue: l.Int("queue"),
		Context: l.Int("ctx"), MaxTokens: l.Int("max-tokens"), ThinkInline: l.Bool("keep-think")}
	for _, n := range []struct {
		flag string
		v    int
	}{{"ctx", l.Int("ctx")}, {"max-tokens", l.Int("max-tokens") - 1}, {"queue", l.Int("queue") - 1}} {
		if n.v < 0 {
			return nil, withCode(2, fmt.Errorf("--%s %d: out of range", n.flag, l.Int(n.flag)))
		}
	}
	if s.cfg.QueueWait, err = time.ParseDuration(l.String("queue-wait")); err != nil || s.cfg.QueueWait <= 0 {
		return nil, withCode(2, fmt.Errorf("--queue-wait %q: want a duration such as 10m", l.String("queue-wait")))
	}
	if s.cfg.MaxBody, err = expertcache.ParseSize(l.String("max-body")); err != nil || s.cfg.MaxBody < 1 {
		return nil, withCode(2, fmt.Errorf("--max-body %q: want a size such as 16MiB", l.String("max-body")))
	}
	pc := l.String("prefix-cache")
	if pc == "0" {
		s.cfg.PrefixCache = -1
	} else if s.cfg.PrefixCache, err = expertcache.ParseSize(pc); err != nil {
		return nil, withCode(2, fmt.Errorf("--prefix-cache: %w", err))
	}
	if p, err := defaultSampling(model); err != nil {
		return nil, withCode(2, err)
	} else {
		s.cfg.Defaults = p
	}
	if b := l.String("expert-cache"); b != "auto" {
		if s.run.opts.ExpertCache, err = expertcache.ParseSize(b); err != nil {
			return nil, withCode(2, fmt.Errorf("--expert-cache: %w", err))
		}
	}
	if s.run.opts.IO, err = expertcache.ParseIOMode(l.String("io")); err != nil {
		return nil, withCode(2, fmt.Errorf("--io: %w", err))
	}
	if n := l.Int("prefill-chunk"); n < 1 || n > 4096 {
		return nil, withCode(2, fmt.Errorf("--prefill-chunk %d: want 1 to 4096", n))
	} else {
		s.run.opts.PrefillChunk = n
	}
	if s.run.opts.Speculate, err = parseSpeculate(l.String("speculate-experts")); err != nil {
		return nil, withCode(2, fmt.Errorf("--speculate-experts: %w", err))
	}
	s.run.model = model
	if s.run.backend, err = selectBackend(l.String("backend")); err != nil {
		return nil, err // its exit code: 2 for no device, 1 for a failure
	}
	s.run.opts.Backend = s.run.backend
	s.run.opts.PrefillChunk = prefillChunk(l, s.run.backend, gpuServePrefillChunk)
	if err := applyGPUExpertCache(l.String("gpu-expert-cache"), s.run.backend); err != nil {
		closeBackend(s.run.backend)
		return nil, err
	}
	if l.Bool("verify-experts") {
		check, closeFn, err := expertVerifier(model)
		if err != nil {
			closeBackend(s.run.backend)
			return nil, withCode(2, err)
		}
		s.run.opts.VerifyExpert, s.run.closeChk = check, closeFn
	}
	return s, nil
}

// defaultSampling reads the model's generation_config.json sampling
// defaults (greedy when it has none). Only a regular file of at most 1 MiB
// is read.
func defaultSampling(model string) (sample.Params, error) {
	p := filepath.Join(model, "generation_config.json")
	st, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return sample.Params{}, nil
	}
	if err != nil {
		return sample.Params{}, err
	}
	if !st.Mode().IsRegular() || st.Size() > 1<<20 {
		return sample.Params{}, fmt.Errorf("%s: not a regular file of at most 1 MiB", p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return sample.Params{}, err
	}
	return sample.ParamsFromGenerationConfig(p, data, sample.Params{})
}

func serveAction(c *cli.Context) error {
	s, err := parseServeSettings(c)
	if err != nil {
		return err
	}
	defer s.run.close()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return withCode(2, fmt.Errorf("serve: %w", err))
	}
	log := slog.Default()
	if s.remote {
		log.Warn("listening on an address other machines can reach", "addr", ln.Addr().String(), "api_key", s.cfg.APIKey != "")
	}
	srv := server.New(s.cfg)
	// No ReadTimeout: it would cancel a long generation's context (the
	// server bounds each body's read itself).
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(c.App.ErrWriter, "qpack serve: http://%s/v1 (model id %q), loading %s, backend %s\n", ln.Addr(), s.cfg.ModelID, s.model, describeBackend(s.run.backend))

	type load struct {
		r   *runner.Runner
		err error
	}
	loaded := make(chan load, 1)
	go func() {
		r, err := openRunner(&s.run)
		loaded <- load{r, err}
	}()
	var r *runner.Runner
	var loadErr error
	waiting := true
	select {
	case l := <-loaded:
		r, loadErr, waiting = l.r, l.err, false
	case <-c.Context.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	if loadErr != nil {
		srv.SetLoadError(loadErr)
		hs.Close()
		return loadErr
	}
	if c.Context.Err() == nil {
		defer r.Close()
		srv.SetRunner(r)
		log.Info("model loaded: serving", "model", s.model, "id", s.cfg.ModelID, "addr", ln.Addr().String())
		select {
		case <-c.Context.Done():
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
	}
	// A signal: stop generating, answer, exit.
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	if waiting { // stopped while loading: close the model if it comes
		go func() {
			if l := <-loaded; l.err == nil {
				l.r.Close()
			}
		}()
	}
	return withCode(130, errors.New("serve: stopped by a signal"))
}
