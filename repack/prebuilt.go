package repack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
)

// runPrebuilt downloads a Hub repo that already holds a built container:
// the files its manifest lists plus the manifest, into "<output>.partial"
// (resumable: the Hub client keeps partial files and their resume records
// there), each checked against the Hub's sha256 / git blob id; then the
// container is opened and validated, and renamed into place.
func runPrebuilt(ctx context.Context, o Options, c *hfhub.Client, hs *Source, start time.Time) (*Result, error) {
	mdata, err := hs.ReadFile(ctx, qpack.ManifestName, qpack.MaxManifestSize)
	if err != nil {
		return nil, err
	}
	man, err := qpack.ParseManifest(mdata)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", hs.Repo(), short(hs.Commit()), err)
	}
	res := &Result{Output: o.Output, Mode: "prebuilt", Repo: hs.Repo(), Revision: hs.Revision(), Commit: hs.Commit(),
		Shards: []ShardResult{}, Skipped: []SkippedTensor{}}
	if man.Ext != nil {
		res.Source = man.Ext.Source
		for _, s := range man.Ext.Source.Shards {
			res.Shards = append(res.Shards, ShardResult{Name: s.Name, Size: s.Size, SHA256: s.SHA256})
		}
	}
	var total int64
	var include []string
	for _, p := range man.SortedFiles() {
		size := hs.Size(p)
		if !hs.Has(p) {
			return nil, fmt.Errorf("%s@%s: manifest.json lists %s, which the repository does not have", hs.Repo(), short(hs.Commit()), p)
		}
		if size != man.Files[p] {
			return nil, fmt.Errorf("%s@%s: manifest.json says %s has %d bytes, the Hub lists %d", hs.Repo(), short(hs.Commit()), p, man.Files[p], size)
		}
		total += size
		include = append(include, globEscape(p))
	}
	include = append(include, globEscape(qpack.ManifestName))
	res.SourceBytes = total + int64(len(mdata))

	unlock, err := lockOutput(o.Output)
	if err != nil {
		return nil, err
	}
	defer unlock()
	partial := o.Output + ".partial"
	if _, err := os.Lstat(o.Output); err == nil {
		if !o.Overwrite {
			if cur, err := os.ReadFile(filepath.Join(o.Output, qpack.ManifestName)); err == nil && bytes.Equal(cur, mdata) {
				if c, err := qpack.Open(o.Output); err == nil {
					c.Close()
					res.AlreadyComplete = true
					res.Manifest = man
					res.OutputBytes = res.SourceBytes
					res.Seconds = time.Since(start).Seconds()
					return res, nil
				}
			}
			return nil, fmt.Errorf("%s: %w (use --overwrite to replace it)", o.Output, ErrExists)
		}
	}
	if o.DiscardPartial {
		if err := os.RemoveAll(partial); err != nil {
			return nil, err
		}
	} else if _, err := os.Lstat(partial); err == nil {
		res.Resumed = true
	}
	if err := checkFreeSpace(filepath.Dir(o.Output), total, o.Reserve); err != nil {
		return nil, err
	}
	if err := qpack.MarkPartial(partial); err != nil { // so a later run knows it as qpack's
		return nil, err
	}
	var mu sync.Mutex
	var done int64
	dl, err := c.Download(ctx, hfhub.DownloadRequest{
		Repo: hs.Repo(), Revision: hs.Commit(), Include: include, LocalDir: partial,
		Connections: o.Connections, Progress: &dlProgress{total: res.SourceBytes, mu: &mu, done: &done, fn: o.OnProgress},
	})
	if dl != nil {
		res.FetchedBytes = dl.DownloadedBytes
	}
	if err != nil {
		return nil, err
	}
	got, err := os.ReadFile(filepath.Join(partial, qpack.ManifestName))
	if err != nil || !bytes.Equal(got, mdata) {
		return nil, fmt.Errorf("%s: the downloaded manifest.json differs from the one read before (the repository changed?)", partial)
	}
	// The client's resume metadata lives under .cache/; it and the partial
	// marker are no part of a container.
	for _, working := range []string{".cache", qpack.PartialMarker} {
		if err := os.RemoveAll(filepath.Join(partial, working)); err != nil {
			return nil, err
		}
	}
	ct, err := qpack.Open(partial)
	if err != nil {
		return nil, fmt.Errorf("the downloaded container is not valid: %w", err)
	}
	extra, _ := ct.ExtraFiles()
	ct.Close()
	if len(extra) > 0 {
		return nil, fmt.Errorf("%s: unexpected files %s", partial, strings.Join(extra, ", "))
	}
	if err := placeDir(partial, o.Output, o.Overwrite); err != nil {
		return nil, err
	}
	res.Manifest = man
	res.OutputBytes = res.SourceBytes
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.Throughput = float64(res.FetchedBytes) / res.Seconds
	}
	return res, nil
}

// globEscape makes p match itself only under fnmatch rules.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[':
			b.WriteByte('[')
			b.WriteRune(r)
			b.WriteByte(']')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

type dlProgress struct {
	total int64
	mu    *sync.Mutex
	done  *int64
	fn    func(Progress)
}

func (p *dlProgress) Plan(int, int64) {}
func (p *dlProgress) FileStart(_ string, _, already int64) {
	p.add(already)
}
func (p *dlProgress) Add(_ string, n int64)  { p.add(n) }
func (p *dlProgress) FileDone(string, error) {}
func (p *dlProgress) add(n int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	*p.done += n
	p.fn(Progress{Phase: "download", Done: *p.done, Total: p.total, Layer: -1})
	p.mu.Unlock()
}
