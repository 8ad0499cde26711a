// Command serve measures qpack serve (package server) on a synthetic .qpack
// container at the real per-layer dimensions of Qwen3.5/3.6-35B-A3B
// (hidden 2048, 256 experts top-8, 4-bit group 64) with few layers and the
// tiny models' tokenizer, written to a temporary directory and deleted at
// the end. Everything runs in one process, in the same run:
//
// Overhead: decode tok/s and time to first token of a streaming
// /v1/completions request through the server on 127.0.0.1, against
// runner.Session.Generate (what qpack generate runs) on the same prompt
// and model, greedy, alternating, -rounds rounds (goal: decode >= 0.95x);
// also the ratio of the CPU time per decoded token, which the load of other
// processes on the machine hardly moves.
//
// Prefix reuse: time to first token of a chat's fifth turn (the client
// resends the conversation) on a server that saved decode states during
// the first four turns, against a server with prefix reuse off (a cold
// prefill of the whole conversation).
//
// Load: -clients concurrent streaming clients against a queue of -queue:
// every request is answered (200) or refused (429) within a bound, none
// hangs; the RSS after each of -load-rounds rounds.
//
//	go run ./bench/serve [-backend cpu|cuda] [-layers 2] [-tokens 128] [-prompt 16] [-rounds 7] [-reuse-rounds 2] [-clients 20] [-queue 8] [-dir /tmp] [-json]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/synthetic"
	"github.com/qpack-go/qpack/server"
)

func main() {
	layers := flag.Int("layers", 2, "decoder layers of the synthetic model")
	tokens := flag.Int("tokens", 128, "tokens to generate per overhead run")
	promptLen := flag.Int("prompt", 16, "prompt tokens of the overhead runs")
	rounds := flag.Int("rounds", 7, "rounds of each measurement (best and median reported)")
	reuseRounds := flag.Int("reuse-rounds", 2, "rounds of the prefix reuse measurement")
	clients := flag.Int("clients", 20, "concurrent streaming clients in the load test")
	queue := flag.Int("queue", 8, "server queue in the load test")
	loadRounds := flag.Int("load-rounds", 3, "rounds of the load test")
	dir := flag.String("dir", "", "directory for the model (default: the system temp dir)")
	asJSON := flag.Bool("json", false, "print the figures as JSON")
	flag.StringVar(&backendName, "backend", "cpu", "the runner's backend: cpu or cuda")
	flag.Parse()
	if err := run(*layers, *tokens, *promptLen, *rounds, *reuseRounds, *clients, *queue, *loadRounds, *dir, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "bench/serve:", err)
		os.Exit(1)
	}
}

const vocab = 384 // the tiny tokenizer's

// backendName is -backend (openBackend).
var backendName string

// Words of the chat's messages (about 5 tokens each with the tiny
// tokenizer): the fifth turn's prompt is about 800 tokens.
const sysWords, userWords, replyWords = 15, 20, 10

type figures struct {
	Layers            int         `json:"layers"`
	GenerateTokPerSec []float64   `json:"generate_decode_tok_per_sec"`
	ServerTokPerSec   []float64   `json:"server_decode_tok_per_sec"`
	DecodeRatios      []float64   `json:"decode_ratios"`
	CPURatios         []float64   `json:"decode_cpu_ratios"`
	GenerateTTFT      []float64   `json:"generate_ttft_seconds"`
	ServerTTFT        []float64   `json:"server_ttft_seconds"`
	ReuseTTFT         []float64   `json:"turn5_ttft_reuse_seconds"`
	ColdTTFT          []float64   `json:"turn5_ttft_cold_seconds"`
	Turn5Prompt       int         `json:"turn5_prompt_tokens"`
	Turn5Cached       int         `json:"turn5_cached_tokens"`
	Load              []loadRound `json:"load"`
}

type loadRound struct {
	OK, Refused, Other, Hung int
	RSS                      int64
	Seconds                  float64
}

func run(layers, tokens, promptLen, rounds, reuseRounds, clients, queue, loadRounds int, dir string, asJSON bool) error {
	root, err := os.MkdirTemp(dir, "qpack-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	pack := filepath.Join(root, "model.qpack")
	if err := writeModel(pack, layers); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	be, closeBackend, err := openBackend(backendName)
	if err != nil {
		return err
	}
	defer closeBackend()
	r, err := runner.Open(pack, runner.Options{ExpertCache: 2 << 30, Logger: log, Backend: be})
	if err != nil {
		return err
	}
	defer r.Close()
	fig := &figures{Layers: layers}
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := make([]int, promptLen)
	for i := range prompt {
		prompt[i] = 1 + rng.IntN(250)
	}

	// Overhead: the same runner, alternately direct and through the server.
	srv := server.New(server.Config{ModelID: "m", Logger: log, PrefixCache: -1, MaxTokens: tokens})
	srv.SetRunner(r)
	base, stop := listen(srv)
	defer stop()
	// Each side runs the prompt with 1 and with n new tokens; the decode
	// rate is (n-1) / (T(n) - T(1)), the time to first token T(1): the same
	// arithmetic both ways, whatever the text's UTF-8 boundaries do to the
	// timing of the chunks.
	direct := func(n int) (time.Duration, error) {
		s := r.NewSession()
		t0 := time.Now()
		cpuStart()
		res, err := s.Generate(context.Background(), prompt, runner.GenOptions{MaxNew: n})
		if err != nil {
			return 0, err
		}
		if len(res.Tokens) < n {
			return 0, fmt.Errorf("generate stopped after %d tokens (%s)", len(res.Tokens), res.StopReason)
		}
		cpuStop()
		return time.Since(t0), nil
	}
	viaServer := func(n int) (time.Duration, error) {
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
		t0 := time.Now()
		cpuStart()
		st, err := stream(base+"/v1/completions", body)
		if err != nil {
			return 0, err
		}
		if st.completion < n {
			return 0, fmt.Errorf("the server generated %d tokens", st.completion)
		}
		cpuStop()
		return time.Since(t0), nil
	}
	if _, err := direct(2); err != nil { // warm the expert cache
		return err
	}
	for range rounds {
		var t, c [4]time.Duration
		for i, f := range []func() (time.Duration, error){
			func() (time.Duration, error) { return direct(1) }, func() (time.Duration, error) { return direct(tokens) },
			func() (time.Duration, error) { return viaServer(1) }, func() (time.Duration, error) { return viaServer(tokens) },
		} {
			if t[i], err = f(); err != nil {
				return err
			}
			c[i] = cpuLast
		}
		fig.CPURatios = append(fig.CPURatios, (c[1]-c[0]).Seconds()/(c[3]-c[2]).Seconds())
		g := float64(tokens-1) / (t[1] - t[0]).Seconds()
		sv := float64(tokens-1) / (t[3] - t[2]).Seconds()
		fig.GenerateTokPerSec = append(fig.GenerateTokPerSec, g)
		fig.ServerTokPerSec = append(fig.ServerTokPerSec, sv)
		fig.DecodeRatios = append(fig.DecodeRatios, sv/g)
		fig.GenerateTTFT = append(fig.GenerateTTFT, t[0].Seconds())
		fig.ServerTTFT = append(fig.ServerTTFT, t[2].Seconds())
	}
	stop()

	// Prefix reuse: a five-turn chat, resent whole each turn.
	warm := server.New(server.Config{ModelID: "m", Logger: log})
	warm.SetRunner(r)
	wbase, wstop := listen(warm)
	defer wstop()
	cold := server.New(server.Config{ModelID: "m", Logger: log, PrefixCache: -1})
	cold.SetRunner(r)
	cbase, cstop := listen(cold)
	defer cstop()
	for round := range reuseRounds {
		msgs := []map[string]string{{"role": "system", "content": words(rng, sysWords)}}
		var last streamed
		for turn := range 5 {
			msgs = append(msgs, map[string]string{"role": "user", "content": words(rng, userWords)})
			b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 2, "stream": true,
				"stream_options": map[string]any{"include_usage": true}})
			st, err := stream(wbase+"/v1/chat/completions", b)
			if err != nil {
				return err
			}
			if turn == 4 {
				last = st
				cst, err := stream(cbase+"/v1/chat/completions", b)
				if err != nil {
					return err
				}
				fig.ReuseTTFT = append(fig.ReuseTTFT, st.first.Seconds())
				fig.ColdTTFT = append(fig.ColdTTFT, cst.first.Seconds())
			}
			msgs = append(msgs, map[string]string{"role": "assistant", "content": words(rng, replyWords)})
		}
		if round == 0 {
			fig.Turn5Prompt, fig.Turn5Cached = last.prompt, last.cached
		}
	}

	// Load: clients at once against a bounded queue.
	load := server.New(server.Config{ModelID: "m", Logger: log, Queue: queue, MaxTokens: 8})
	load.SetRunner(r)
	lbase, lstop := listen(load)
	defer lstop()
	short := make([]int, 32)
	for i := range short {
		short[i] = 1 + rng.IntN(250)
	}
	lb, _ := json.Marshal(map[string]any{"model": "m", "prompt": short, "max_tokens": 8, "stream": true})
	for range loadRounds {
		var lr loadRound
		var mu sync.Mutex
		var wg sync.WaitGroup
		t0 := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, err := statusOf(lbase+"/v1/completions", lb, 5*time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && strings.Contains(err.Error(), "deadline"):
					lr.Hung++
				case code == 200 && err == nil:
					lr.OK++
				case code == 429:
					lr.Refused++
				default:
					lr.Other++
				}
			}()
		}
		wg.Wait()
		lr.Seconds = time.Since(t0).Seconds()
		lr.RSS = rss()
		fig.Load = append(fig.Load, lr)
	}

	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(fig)
	}
	report(fig, tokens, promptLen, clients, queue)
	return nil
}

func report(f *figures, tokens, promptLen, clients, queue int) {
	fmt.Printf("synthetic .qpack, Qwen3.6-35B per-layer dims, %d layers, vocab %d, experts cached\n", f.Layers, vocab)
	fmt.Printf("overhead (%d-token prompt, %d tokens, greedy; decode = (n-1) / (T(n) - T(1)), TTFT = T(1)), per round:\n", promptLen, tokens)
	for i := range f.DecodeRatios {
		fmt.Printf("  generate %.2f tok/s, TTFT %.3fs | server %.2f tok/s, TTFT %.3fs | decode ratio %.3fx\n",
			f.GenerateTokPerSec[i], f.GenerateTTFT[i], f.ServerTokPerSec[i], f.ServerTTFT[i], f.DecodeRatios[i])
	}
	fmt.Printf("  CPU time per decoded token, generate / server, per round: %s (median %.3fx)\n", fmtRatios(f.CPURatios), median(f.CPURatios))
	fmt.Printf("  best: generate %.2f tok/s, server %.2f tok/s: %.3fx (median of rounds %.3fx; goal >= 0.95x); TTFT best %.3fs vs %.3fs\n",
		best(f.GenerateTokPerSec), best(f.ServerTokPerSec), best(f.ServerTokPerSec)/best(f.GenerateTokPerSec), median(f.DecodeRatios),
		least(f.GenerateTTFT), least(f.ServerTTFT))
	fmt.Printf("prefix reuse: fifth turn, %d prompt tokens, %d reused\n", f.Turn5Prompt, f.Turn5Cached)
	for i := range f.ReuseTTFT {
		fmt.Printf("  TTFT with reuse %.3fs, cold %.3fs: %.1fx faster\n", f.ReuseTTFT[i], f.ColdTTFT[i], f.ColdTTFT[i]/f.ReuseTTFT[i])
	}
	fmt.Printf("load: %d concurrent streaming clients, queue %d:\n", clients, queue)
	for i, l := range f.Load {
		fmt.Printf("  round %d: %d answered, %d refused (429), %d other, %d hung, %.2fs, RSS %d MiB\n", i+1, l.OK, l.Refused, l.Other, l.Hung, l.Seconds, l.RSS>>20)
	}
}

// listen serves s on a free loopback port.
func listen(s *server.Server) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	var once sync.Once
	return "http://" + ln.Addr().String(), func() { once.Do(func() { hs.Close() }) }
}

type streamed struct {
	first, end                 time.Duration // first text, finish chunk
	completion, prompt, cached int
}

// stream posts a streaming request and times its chunks.
func stream(url string, body []byte) (streamed, error) {
	var st streamed
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	t0 := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		return st, fmt.Errorf("%s: %d %s", url, res.StatusCode, b)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			break
		}
		var ch struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content *string `json:"content"`
					Role    string  `json:"role"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Details    struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return st, err
		}
		if ch.Usage != nil {
			st.completion, st.prompt, st.cached = ch.Usage.Completion, ch.Usage.Prompt, ch.Usage.Details.Cached
		}
		for _, c := range ch.Choices {
			if st.first == 0 && c.Delta.Role == "" && c.FinishReason == nil {
				st.first = time.Since(t0)
			}
			if c.FinishReason != nil && st.first == 0 {
				st.first = time.Since(t0)
			}
		}
	}
	return st, sc.Err()
}

// statusOf posts a streaming request and reads it to the end.
func statusOf(url string, body []byte, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode == 200 && !bytes.Contains(data, []byte("data: [DONE]")) {
		err = fmt.Errorf("stream without [DONE]")
	}
	return res.StatusCode, err
}

func words(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		for range 2 + rng.IntN(5) {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
	}
	return b.String()
}

func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// The process's CPU time (every thread, user and system) over one run: the
// server's side includes the benchmark's own HTTP client, so its ratio is
// a bound on the overhead, and other processes' load hardly moves it.
var cpuAt, cpuLast time.Duration

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cpuStart() { cpuAt = cpuNow() }
func cpuStop()  { cpuLast = cpuNow() - cpuAt }

func fmtRatios(x []float64) string {
	parts := make([]string, len(x))
	for i, v := range x {
		parts[i] = fmt.Sprintf("%.3fx", v)
	}
	return strings.Join(parts, " ")
}

func best(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

func least(x []float64) float64 {
	m := x[0]
	for _, v := range x {
		m = min(m, v)
	}
	return m
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// writeModel writes the synthetic container with the tiny models'
// tokenizer (found from the working directory upwards).
func writeModel(pack string, layers int) error {
	d := synthetic.Real(layers, vocab)
	d.Unique = 32
	g, err := synthetic.Generate(d, 1)
	if err != nil {
		return err
	}
	if err := g.WriteContainer(pack); err != nil {
		return err
	}
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	for {
		tok := filepath.Join(dir, "testdata", "tiny", "qwen3_5_moe-q4g32", "tokenizer.json")
		if data, err := os.ReadFile(tok); err == nil {
			return os.WriteFile(filepath.Join(pack, "tokenizer.json"), data, 0o644)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return fmt.Errorf("testdata/tiny/qwen3_5_moe-q4g32/tokenizer.json not found above the working directory: run from the repository")
		}
		dir = parent
	}
}
