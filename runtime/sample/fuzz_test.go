package sample

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// FuzzEOSFromJSON: arbitrary config bytes give ids in range or an error
// naming the file, never a panic.
func FuzzEOSFromJSON(f *testing.F) {
	f.Add([]byte(`{"eos_token_id": [151645, 151643]}`))
	f.Add([]byte(`{"eos_token_id": 2, "do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95}`))
	f.Add([]byte(`{"eos_token_id": null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ids, err := EOSFromJSON("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error without the file name: %v", err)
			}
		}
		for _, id := range ids {
			if id < 0 || id >= maxTokenID {
				t.Fatalf("id %d out of range", id)
			}
		}
		if p, err := ParamsFromGenerationConfig("fuzz.json", data, Params{}); err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("returned invalid params %+v: %v", p, err)
			}
		}
	})
}

// FuzzStopper: however the text is cut into pieces, what the stopper
// releases is the text up to the earliest stop string (or all of it).
func FuzzStopper(f *testing.F) {
	f.Add("Hello </s> world", "</s>", "STOP", uint64(0x0123456789))
	f.Add("aaabcabc", "abc", "bca", uint64(7))
	f.Add("好终止了", "终止", "", uint64(1<<40-1))
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, cuts uint64) {
		var stops []string
		for _, s := range []string{stop1, stop2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		// Reference: grow the text one byte at a time; the first time it
		// ends with a stop string, the answer is the text before it (the
		// longest such stop string when several end there).
		want := text
	grow:
		for n := 1; n <= len(text); n++ {
			best := -1
			for _, s := range stops {
				if strings.HasSuffix(text[:n], s) && (best < 0 || n-len(s) < best) {
					best = n - len(s)
				}
			}
			if best >= 0 {
				want = text[:best]
				break grow
			}
		}
		st := NewStopper(nil, stops)
		var got strings.Builder
		stopped := false
		rest := text
		for rest != "" && !stopped {
			n := int(cuts%7) + 1
			cuts /= 7
			if cuts == 0 {
				n = len(rest)
			}
			n = min(n, len(rest))
			var e string
			e, stopped = st.Push(rest[:n])
			got.WriteString(e)
			rest = rest[n:]
		}
		if !stopped {
			got.WriteString(st.Flush())
		}
		if got.String() != want {
			t.Fatalf("text %q stops %q: released %q, want %q", text, stops, got.String(), want)
		}
		if stopped != ((len(stops) > 0 && strings.Contains(text, stops[0])) || (len(stops) > 1 && strings.Contains(text, stops[1]))) {
			t.Fatalf("stopped = %v", stopped)
		}
	})
}

// FuzzGenerationConfig: arbitrary bytes give a config whose parameters
// are valid and follow do_sample, or an error naming the file; never a
// panic.
func FuzzGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0}`))
	f.Add([]byte(`{"do_sample": false, "temperature": 0.7, "repetition_penalty": 1.05}`))
	f.Add([]byte(`{"do_sample": true, "temperature": null, "top_k": 20.0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		p := g.Params(Params{Seed: 1})
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: invalid params %+v: %v", data, p, err)
		}
		if !g.Sampling() && (p.Temperature != 0 || p.TopK != 0 || p.TopP != 0 || p.MinP != 0) {
			t.Fatalf("%s: greedy config gave sampling params %+v", data, p)
		}
		if p.Seed != 1 {
			t.Fatalf("seed lost: %+v", p)
		}
	})
}

// FuzzScanTopK: the one-pass top-k (scanTopK) keeps exactly the candidates
// of the general path (topKCands) whenever it answers, over scores with
// ties, -Inf, NaN and +Inf, any k and temperature; and both leave the same
// divided scores.
func FuzzScanTopK(f *testing.F) {
	f.Add([]byte{1, 2, 3, 3, 3, 200, 0, 9}, uint8(3), uint8(10))
	f.Add([]byte{255, 254, 0, 0, 0, 0}, uint8(2), uint8(1))
	f.Add([]byte{7, 7, 7, 7}, uint8(1), uint8(200))
	f.Fuzz(func(t *testing.T, raw []byte, k, temp uint8) {
		if len(raw) == 0 || len(raw) > 4096 {
			return
		}
		// Each byte a score: a few specials, the rest small integers
		// (many ties).
		sc := make([]float64, len(raw))
		for i, b := range raw {
			switch b {
			case 255:
				sc[i] = math.Inf(-1)
			case 254:
				sc[i] = math.NaN()
			case 253:
				sc[i] = math.Inf(1)
			case 252:
				sc[i] = math.MaxFloat64
			default:
				sc[i] = float64(int(b%32) - 16)
			}
		}
		T := float64(temp)/16 + 1e-300 // tiny T overflows v/T to +Inf
		s, err := New(Params{Temperature: T, TopK: int(k)})
		if err != nil {
			return
		}
		a := slices.Clone(sc)
		got, ok := s.scanTopK(a)
		b := slices.Clone(sc)
		for i := range b {
			b[i] /= T
		}
		for i := range a {
			if math.Float64bits(a[i]) != math.Float64bits(b[i]) && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
				t.Fatalf("score %d divided to %v, want %v", i, a[i], b[i])
			}
		}
		if !ok {
			return
		}
		got = slices.Clone(got)
		want, err := s.topKCands(b)
		if err != nil {
			t.Fatalf("scanTopK answered %v where the general path fails: %v", got, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("k %d T %g: scanTopK kept %v, the general path %v", k, T, got, want)
		}
	})
}

// FuzzScanTopK32: the top-k straight over float32 logits (no penalties)
// keeps exactly the general path's candidates (penalised, divided, then
// topKCands) with the same scores, whenever it answers.
func FuzzScanTopK32(f *testing.F) {
	f.Add([]byte{1, 2, 3, 3, 3, 200, 0, 9}, uint8(3), uint8(10))
	f.Add([]byte{255, 254, 0, 0, 0, 0}, uint8(2), uint8(1))
	f.Add([]byte{7, 7, 7, 7, 252, 1}, uint8(1), uint8(200))
	// Several blocks of 8 and a tail, the largest values late in a block.
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 30, 0, 0, 0, 0, 0, 0, 0, 31, 254, 9, 9, 9, 9, 9, 9, 29, 255, 3, 3, 3, 3, 3, 3, 31, 2, 30, 28}, uint8(4), uint8(120))
	f.Fuzz(func(t *testing.T, raw []byte, k, temp uint8) {
		if len(raw) == 0 || len(raw) > 4096 {
			return
		}
		logits := fuzzLogits(raw)
		T := fuzzTemperature(temp)
		s, err := New(Params{Temperature: T, TopK: int(k)})
		if err != nil {
			return
		}
		sc := make([]float64, len(logits))
		got, ok := s.scanTopK32(logits, sc)
		if !ok {
			return
		}
		got = slices.Clone(got)
		ref := s.penalised(logits)
		for i := range ref {
			ref[i] /= T
		}
		want, err := s.topKCands(ref)
		if err != nil {
			t.Fatalf("scanTopK32 answered %v where the general path fails: %v", got, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("k %d T %g: scanTopK32 kept %v, the general path %v", k, T, got, want)
		}
		for _, i := range got {
			if math.Float64bits(sc[i]) != math.Float64bits(ref[i]) {
				t.Fatalf("score %d: %v, the general path %v", i, sc[i], ref[i])
			}
		}
	})
}

// FuzzSampleTop: drawing from the top of the logits (nn.SelectTopRef, as a
// device selects it) with SampleTop gives Sample's tokens on the whole
// vector, bit for bit, over three steps, for any logits (ties, NaN, ±Inf,
// ±0, the largest and smallest magnitudes), top-k, temperature (greedy
// included), top-p, min-p, seed and surplus of candidates (a device may
// bring back more than asked for).
func FuzzSampleTop(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte, k, temp, filters uint8, seed uint64) {
		if len(raw) == 0 || len(raw) > 4096 {
			return
		}
		logits := fuzzLogits(raw)
		T := 0.0 // temp 0 is greedy
		if temp != 0 {
			T = fuzzTemperature(temp)
		}
		p := Params{
			Temperature: T,
			TopK:        int(k),
			TopP:        [4]float64{0, 0.5, 0.95, 0.2}[filters&3],
			MinP:        [4]float64{0, 0.05, 0.3, 1}[filters>>2&3],
			Seed:        seed,
		}
		// Three steps: the logits, rotated, reversed.
		n := len(logits)
		rot := append(slices.Clone(logits[int(seed%uint64(n)):]), logits[:int(seed%uint64(n))]...)
		rev := slices.Clone(logits)
		slices.Reverse(rev)
		topDraws(t, p, [][]float32{logits, rot, rev}, int(filters>>4))
	})
}

// fuzzLogits decodes fuzz bytes as logits: small multiples of 1/4 with
// many ties, and special values (255 -Inf, 254 NaN, 253 +Inf, 252 the
// largest float, 251 -0, 250 the smallest subnormal).
func fuzzLogits(raw []byte) []float32 {
	logits := make([]float32, len(raw))
	for i, b := range raw {
		switch b {
		case 255:
			logits[i] = float32(math.Inf(-1))
		case 254:
			logits[i] = float32(math.NaN())
		case 253:
			logits[i] = float32(math.Inf(1))
		case 252:
			logits[i] = math.MaxFloat32
		case 251:
			logits[i] = float32(math.Copysign(0, -1))
		case 250:
			logits[i] = math.SmallestNonzeroFloat32
		default:
			logits[i] = float32(int(b%32)-16) / 4
		}
	}
	return logits
}

// fuzzTemperature decodes a fuzz byte as a temperature from 2^-880 (every
// quotient overflows) to 2^770.
func fuzzTemperature(temp uint8) float64 {
	return math.Ldexp(float64(temp&15+1)/8, (int(temp>>4)-8)*110)
}
