package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
)

// Defaults of Config.
const (
	DefaultMaxBody     = 16 << 20
	DefaultQueue       = 16
	DefaultPrefixCache = 1 << 30 // an 11k-token prompt of Qwen3-Next at 4-bit: ~600 MB of state
	DefaultKeepAlive   = 10 * time.Second
	DefaultQueueWait   = 10 * time.Minute
	DefaultMaxTokens   = 4096

	bodyTimeout = time.Minute // to read a request body
)

// Config configures a Server.
type Config struct {
	ModelID string // the id clients name the model by (required)
	// APIKey, if set, must come as "Authorization: Bearer KEY" on every
	// /v1 request; it is compared in constant time and never logged.
	APIKey string
	// CORSOrigin, if set, is the origin browsers may call from ("*": any).
	CORSOrigin string
	MaxBody    int64 // bytes of a request body (0: DefaultMaxBody)
	Queue      int   // requests waiting behind the running one (0: DefaultQueue)
	// QueueWait bounds a request's wait in the queue (0: DefaultQueueWait);
	// one that waits longer is answered 429.
	QueueWait time.Duration
	// PrefixCache bounds the saved decode states in bytes (0:
	// DefaultPrefixCache, < 0: no prefix reuse).
	PrefixCache int64
	// KeepAlive is the quiet time after which a stream gets a comment
	// line (0: DefaultKeepAlive).
	KeepAlive time.Duration
	// Context bounds prompt + completion tokens (0: the model's
	// max_position_embeddings).
	Context int
	// MaxTokens is the completion limit of a chat request that gives none
	// (0: DefaultMaxTokens), capped by what the context leaves.
	MaxTokens int
	// Defaults are the sampling parameters of fields a request leaves out
	// (the model's generation_config).
	Defaults sample.Params
	// ThinkInline keeps <think>…</think> in the content instead of
	// returning it as reasoning_content.
	ThinkInline bool
	Logger      *slog.Logger
}

// Server answers the OpenAI-compatible API for one model.
type Server struct {
	cfg         Config
	log         *slog.Logger
	queue       *fifo
	prefix      *runner.PrefixCache
	fingerprint string
	created     int64

	mu      sync.Mutex
	r       *runner.Runner
	sess    *runner.Session
	loadErr error
	ready   atomic.Bool

	stopCtx  context.Context
	stopNow  context.CancelFunc
	stopping atomic.Bool
	// cancelRun cancels the running generation (nil: none), so that Stop
	// has stopped it by the time it returns (context.AfterFunc on stopCtx
	// alone cancels later, from its own goroutine).
	runMu     sync.Mutex
	cancelRun context.CancelFunc

	// gen runs one generation (replaced in tests by one that scripts the
	// model's output text).
	gen func(ctx context.Context, j *job) (*outcome, error)
}

// New returns a server that answers 503 until SetRunner gives it a model.
func New(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = DefaultQueueWait
	}
	if cfg.PrefixCache == 0 {
		cfg.PrefixCache = DefaultPrefixCache
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, queue: newFIFO(cfg.Queue), created: time.Now().Unix()}
	if cfg.PrefixCache > 0 {
		s.prefix = runner.NewPrefixCache(cfg.PrefixCache)
	}
	s.stopCtx, s.stopNow = context.WithCancel(context.Background())
	s.gen = s.generate
	return s
}

// SetRunner gives the server its loaded model; from then on it answers.
func (s *Server) SetRunner(r *runner.Runner) {
	s.mu.Lock()
	s.r, s.sess = r, r.NewSession()
	sum := sha256.Sum256([]byte(r.Dir + "\x00" + s.cfg.ModelID))
	s.fingerprint = "fp_qpack_" + hex.EncodeToString(sum[:6])
	s.mu.Unlock()
	s.ready.Store(true)
}

// SetLoadError records why the model could not be loaded (/health and
// every request then answer 503 with it).
func (s *Server) SetLoadError(err error) {
	s.mu.Lock()
	s.loadErr = err
	s.mu.Unlock()
}

// Stop begins a graceful shutdown: running generations stop at the next
// token and answer what they have (finish_reason "length"), waiting and new
// requests are answered 503. Stop the http.Server after it.
func (s *Server) Stop() {
	s.stopping.Store(true)
	s.stopNow()
	s.runMu.Lock()
	if s.cancelRun != nil {
		s.cancelRun()
	}
	s.runMu.Unlock()
}

// PrefixStats describes the saved decode states (zero without reuse).
func (s *Server) PrefixStats() runner.PrefixStats {
	if s.prefix == nil {
		return runner.PrefixStats{}
	}
	return s.prefix.Stats()
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/v1/models", s.auth(s.models))
	mux.HandleFunc("/v1/models/{id...}", s.auth(s.model))
	mux.HandleFunc("/v1/chat/completions", s.auth(s.post(s.chat)))
	mux.HandleFunc("/v1/completions", s.auth(s.post(s.completions)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeError(w, notFound(r.URL.Path)) })
	return s.cors(s.logged(mux))
}

// statusWriter records the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "seconds", time.Since(t0).Seconds())
	})
}

func (s *Server) cors(h http.Handler) http.Handler {
	origin := s.cfg.CORSOrigin
	if origin == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && (origin == "*" || o == origin) {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
				w.Header().Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// auth checks the API key (when one is set) in constant time: both sides
// are hashed first, so neither the key's bytes nor its length leak through
// timing.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.cfg.APIKey))
	return func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearerToken(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok {
			writeError(w, unauthorized())
			return
		}
		h(w, r)
	}
}

// bearerToken is the token of an Authorization header of the Bearer scheme,
// whose name is case-insensitive (RFC 9110 section 11.1: "bearer KEY" is
// the same as "Bearer KEY").
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// post reads a POST body bounded by MaxBody (413 beyond it).
func (s *Server) post(h func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeError(w, methodNotAllowed(r.Method, r.URL.Path))
			return
		}
		if r.ContentLength > s.cfg.MaxBody {
			writeError(w, tooLarge(s.cfg.MaxBody))
			return
		}
		// The body's read is bounded here, not by the http.Server's
		// ReadTimeout: once it passes, net/http cancels the request's
		// context, which would stop a long generation.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
		rc.SetReadDeadline(time.Time{})
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				writeError(w, tooLarge(s.cfg.MaxBody))
				return
			}
			writeError(w, badRequest("", "reading the request body: %v", err))
			return
		}
		body, aerr := decodeContent(r, body, s.cfg.MaxBody)
		if aerr != nil {
			if aerr.Status == http.StatusUnsupportedMediaType {
				w.Header().Set("Accept-Encoding", "gzip, identity")
			}
			writeError(w, aerr)
			return
		}
		h(w, r, body)
	}
}

// available reports a server that cannot take work (503), else nil.
func (s *Server) available() *APIError {
	if s.stopping.Load() {
		return unavailable("shutting_down", "the server is shutting down")
	}
	if !s.ready.Load() {
		s.mu.Lock()
		err := s.loadErr
		s.mu.Unlock()
		if err != nil {
			return unavailable("model_load_failed", fmt.Sprintf("the model could not be loaded: %v", err))
		}
		return unavailable("model_loading", "the model is loading")
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	if e := s.available(); e != nil {
		writeError(w, e)
		return
	}
	running, waiting := s.queue.depth()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "model": s.cfg.ModelID, "running": running, "waiting": waiting})
}

func (s *Server) modelObject() map[string]any {
	return map[string]any{"id": s.cfg.ModelID, "object": "model", "created": s.created, "owned_by": "qpack"}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{s.modelObject()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	if id := r.PathValue("id"); id != s.cfg.ModelID {
		writeError(w, modelNotFound(id, s.cfg.ModelID))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

// checkModel answers 404 for a request naming another model.
func (s *Server) checkModel(m *string) *APIError {
	if m != nil && *m != s.cfg.ModelID {
		return modelNotFound(*m, s.cfg.ModelID)
	}
	return nil
}

func randomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v & (1<<53 - 1)
}

func randomID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
