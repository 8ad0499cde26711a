package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkStreamedText is what a streamed response costs the decode loop
// a piece of text: the runner's OnText writing the piece's SSE chunk to a
// client on 127.0.0.1 itself (JSON, a write with its deadline, a flush),
// as the server did before textQueue, against queueing it for the
// writer's goroutine (textQueue.push), timed in the same run over the same
// kind of connection, a reading client at the other end, one piece a
// decode step. The GPU idles for the loop's time between two steps.
//
//	go test ./server -run '^$' -bench StreamedText -benchtime 20000x
func BenchmarkStreamedText(b *testing.B) {
	const step = 50 * time.Microsecond // a fast decode step's host wait (a GPU's is ~600 µs)
	type piece struct {
		Object string `json:"object"`
		Text   string `json:"text"`
	}
	// each runs b.N pieces through a fresh streamed response, one a
	// decode step (the loop busy for step between two, as it is while it
	// waits for the device), and returns the loop's time in OnText.
	each := func(queued bool) time.Duration {
		loop := make(chan time.Duration, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sse := newSSE(w, time.Hour)
			defer sse.stop()
			sink := func(t string) error { return sse.send(piece{"text_completion", t}) }
			onText := sink
			var q *textQueue
			if queued {
				q = newTextQueue(sink, textQueueDepth)
				onText = q.push
			}
			var in time.Duration
			for range b.N {
				// The decode step: the loop waits for the device.
				for t0 := time.Now(); time.Since(t0) < step; {
				}
				t0 := time.Now()
				err := onText(" token")
				in += time.Since(t0)
				if err != nil {
					b.Error(err)
					break
				}
			}
			loop <- in
			if q != nil {
				if err := q.close(); err != nil {
					b.Error(err)
				}
			}
			sse.end()
		}))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		return <-loop
	}
	b.ResetTimer()
	direct := each(false)
	queued := each(true)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(us(direct), "direct-µs/piece")
	b.ReportMetric(us(queued), "queued-µs/piece")
	b.ReportMetric(float64(queued)/float64(max(direct, 1)), "queued/direct")
}
