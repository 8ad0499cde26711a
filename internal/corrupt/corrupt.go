package corrupt

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
)

// Kind is a way to damage a body.
type Kind int

const (
	FlipBit     Kind = iota // one bit of one byte inverted
	SwapStrings             // two different equal-length JSON strings (or byte runs) exchanged
	Truncate                // the body cut at a random point (the declared length kept)
	NumKinds
)

func (k Kind) String() string {
	return [...]string{"flip-bit", "swap-strings", "truncate"}[k]
}

// Transport passes requests to Base (http.DefaultTransport when nil) and
// damages the first successful response whose key is Target.
type Transport struct {
	Base   http.RoundTripper
	Target string // "" records keys and damages nothing
	Kind   Kind
	Seed   uint64
	// MinLen, for SwapStrings, swaps only strings of at least this many
	// bytes (tensor names rather than dtypes).
	MinLen int

	mu      sync.Mutex
	keys    map[string]bool
	applied string
}

// Key names a request as the Transport does.
func Key(req *http.Request) string {
	return req.Method + " " + req.URL.Path + " " + req.Header.Get("Range")
}

// Keys returns the keys of the responses with a body seen so far, sorted.
func (t *Transport) Keys() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.keys))
	for k := range t.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Applied describes the damage done, or "" if none was.
func (t *Transport) Applied() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode/100 != 2 {
		return resp, err
	}
	key := Key(req)
	t.mu.Lock()
	if t.keys == nil {
		t.keys = map[string]bool{}
	}
	t.keys[key] = true
	hit := t.Target != "" && key == t.Target && t.applied == ""
	if hit {
		t.applied = "pending"
	}
	t.mu.Unlock()
	if !hit {
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	rng := rand.New(rand.NewPCG(t.Seed, uint64(len(body))))
	damaged, what := damage(body, t.Kind, rng, t.MinLen)
	t.mu.Lock()
	t.applied = fmt.Sprintf("%s of %s: %s", t.Kind, key, what)
	t.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(damaged))
	return resp, nil
}

// Damage returns a damaged copy of b and what was done.
func Damage(b []byte, k Kind, rng *rand.Rand) ([]byte, string) { return damage(b, k, rng, 1) }

func damage(b []byte, k Kind, rng *rand.Rand, minLen int) ([]byte, string) {
	out := append([]byte(nil), b...)
	if len(out) == 0 {
		return out, "empty body left alone"
	}
	switch k {
	case FlipBit:
		i, bit := rng.IntN(len(out)), rng.IntN(8)
		out[i] ^= 1 << bit
		return out, fmt.Sprintf("bit %d of byte %d", bit, i)
	case SwapStrings:
		if a, c, n, ok := stringPair(out, rng, minLen); ok {
			swap(out, a, c, n)
			return out, fmt.Sprintf("strings %q and %q swapped", b[a:a+n], b[c:c+n])
		}
		if n := min(8, len(out)/2); n > 0 {
			for try := 0; try < 32; try++ {
				a, c := rng.IntN(len(out)/2-n+1), len(out)/2+rng.IntN(len(out)-len(out)/2-n+1)
				if !bytes.Equal(out[a:a+n], out[c:c+n]) {
					swap(out, a, c, n)
					return out, fmt.Sprintf("%d-byte runs at %d and %d swapped", n, a, c)
				}
			}
		}
		out[0] ^= 0x80
		return out, "no two differing runs; high bit of byte 0 flipped"
	case Truncate:
		n := rng.IntN(len(out))
		return out[:n], fmt.Sprintf("cut to %d of %d bytes", n, len(out))
	}
	return out, "nothing"
}

func swap(b []byte, a, c, n int) {
	tmp := append([]byte(nil), b[a:a+n]...)
	copy(b[a:a+n], b[c:c+n])
	copy(b[c:c+n], tmp)
}

// stringPair finds two different, non-overlapping JSON string contents of
// the same length (escape-free), chosen at random among those pairs.
func stringPair(b []byte, rng *rand.Rand, minLen int) (a, c, n int, ok bool) {
	byLen := map[int][]int{}
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			i = j
			continue
		}
		if l := j - i - 1; l > 0 && l >= minLen {
			byLen[l] = append(byLen[l], i+1)
		}
		i = j
	}
	lens := make([]int, 0, len(byLen))
	for l, starts := range byLen {
		if len(starts) > 1 {
			lens = append(lens, l)
		}
	}
	sort.Ints(lens)
	rng.Shuffle(len(lens), func(i, j int) { lens[i], lens[j] = lens[j], lens[i] })
	for _, l := range lens {
		s := byLen[l]
		for try := 0; try < 16; try++ {
			x, y := s[rng.IntN(len(s))], s[rng.IntN(len(s))]
			if x != y && !bytes.Equal(b[x:x+l], b[y:y+l]) {
				return min(x, y), max(x, y), l, true
			}
		}
	}
	return 0, 0, 0, false
}

// Random returns a Transport that damages the response with one of keys,
// in one of the ways, both chosen by seed.
func Random(keys []string, seed uint64) *Transport {
	rng := rand.New(rand.NewPCG(seed, 7))
	return &Transport{Target: keys[rng.IntN(len(keys))], Kind: Kind(rng.IntN(int(NumKinds))), Seed: seed}
}

// Seeds is how many seeds a property test tries: QPACK_PROPERTY_SEEDS
// when set (bench/soak runs thousands), else def, a quarter of it with
// -short.
func Seeds(tb testing.TB, def int) int {
	if v := os.Getenv("QPACK_PROPERTY_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			tb.Fatalf("QPACK_PROPERTY_SEEDS=%q", v)
		}
		return n
	}
	if testing.Short() {
		return max(1, def/4)
	}
	return def
}
