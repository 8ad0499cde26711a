package faultprop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// Targets a corruption can hit.
const (
	TargetInfo     = "model-info"
	TargetTree     = "tree-page"
	TargetSmall    = "small-file"
	TargetHeader   = "header-range"
	TargetData     = "data-range"
	repoID         = "org/prop"
	chunkSize      = 32 << 10
	shardSize      = 5*chunkSize + 1234
	treePageSize   = 2
	smallFilePath  = "config.json"
	tokenizerPath  = "tokenizer.json"
	shardPathFirst = "model-00001-of-00002.safetensors"
	shardPathLast  = "model-00002-of-00002.safetensors"
)

var targets = []string{TargetInfo, TargetTree, TargetSmall, TargetHeader, TargetData}

// Case is the corruption a seed picks.
type Case struct {
	Seed   uint64
	Target string
	Op     hubtest.MutationOp
	Path   string // the file hit (small-file, header-range, data-range)
	Page   int    // tree-page: which page (0-based)
	Offset int64  // data-range: a byte the corrupted range covers
}

func (c Case) String() string {
	s := fmt.Sprintf("seed %d: %s %v", c.Seed, c.Target, c.Op)
	switch c.Target {
	case TargetSmall, TargetHeader:
		s += " of " + c.Path
	case TargetData:
		s += fmt.Sprintf(" of %s at byte %d", c.Path, c.Offset)
	case TargetTree:
		s += fmt.Sprintf(" (page %d)", c.Page+1)
	}
	return s
}

// Pick derives the case for a seed.
func Pick(seed uint64) Case {
	r := rand.New(rand.NewPCG(seed, 0x7072_6f70))
	c := Case{Seed: seed, Target: targets[r.IntN(len(targets))], Op: hubtest.MutationOp(r.IntN(3))}
	shards := []string{shardPathFirst, shardPathLast}
	switch c.Target {
	case TargetTree:
		c.Page = r.IntN(2) // 4 files, 2 per page
	case TargetSmall:
		c.Path = []string{smallFilePath, tokenizerPath}[r.IntN(2)]
	case TargetHeader:
		c.Path = shards[r.IntN(2)]
	case TargetData:
		c.Path = shards[r.IntN(2)]
		c.Offset = chunkSize + r.Int64N(shardSize-chunkSize)
	}
	return c
}

// Outcome is what a seed's download did.
type Outcome struct {
	Case
	Applied string // the request log's note on the corruption ("" if it never applied)
	Err     error  // the download's error; nil: the cache is byte-identical
}

// files is the repository every seed downloads: two shards whose first
// bytes are a safetensors-like header, a config and a tokenizer.
func files(seed uint64) []hubtest.File {
	r := rand.New(rand.NewPCG(seed, 0x66696c65))
	shard := func(name string) hubtest.File {
		b := make([]byte, shardSize)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		hdr := []byte(`{"model.layers.0.mlp.experts.0.down_proj.weight":{"dtype":"BF16","shape":[64,32],"data_offsets":[0,4096]},` +
			`"model.layers.0.mlp.experts.1.down_proj.weight":{"dtype":"BF16","shape":[64,32],"data_offsets":[4096,8192]}}`)
		b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = byte(len(hdr)), byte(len(hdr)>>8), 0, 0, 0, 0, 0, 0
		copy(b[8:], hdr)
		return hubtest.File{Path: name, Data: b, LFS: true}
	}
	return []hubtest.File{
		{Path: smallFilePath, Data: []byte(`{"model_type":"qwen3_moe","hidden_size":64,"num_experts":2,"num_hidden_layers":1}`)},
		{Path: tokenizerPath, Data: bytes.Repeat([]byte(`{"vocab":{"a":0,"b":1}}`), 40)},
		shard(shardPathFirst),
		shard(shardPathLast),
	}
}

func (c Case) fault() hubtest.Fault {
	m := hubtest.Mutation{Op: c.Op, Seed: c.Seed | 1}
	f := hubtest.Fault{Kind: hubtest.FaultCorrupt, Mutation: m, Method: "GET"}
	switch c.Target {
	case TargetInfo:
		f.Route = hubtest.RouteInfo
	case TargetTree:
		f.Route, f.Skip = hubtest.RouteTree, c.Page
	case TargetSmall:
		f.Route, f.Path = hubtest.RouteResolve, c.Path
	case TargetHeader:
		f.Route, f.Path, f.Match = hubtest.RouteCDN, c.Path, hubtest.RangeCovers(0)
	case TargetData:
		f.Route, f.Path, f.Match = hubtest.RouteCDN, c.Path, hubtest.RangeCovers(c.Offset)
	}
	return f
}

// Check runs one seed in a fresh fake Hub and cache under tmp. The
// returned error is a violation of the property (or a harness failure);
// the Outcome says what happened either way.
func Check(ctx context.Context, seed uint64, tmp string) (Outcome, error) {
	c := Pick(seed)
	out := Outcome{Case: c}
	hub, err := hubtest.NewServer(hubtest.Config{TreePageSize: treePageSize})
	if err != nil {
		return out, err
	}
	defer hub.Close()
	src := files(seed)
	commit, err := hub.AddRepo(repoID, src, hubtest.RepoOptions{})
	if err != nil {
		return out, err
	}
	hub.Inject(c.fault())
	cl, err := hfhub.NewClient(hfhub.Options{
		Endpoint: hub.URL, Anonymous: true, MaxRetries: 3,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond, MaxRetryAfter: 10 * time.Millisecond,
		StallTimeout: 2 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return out, err
	}
	cache, err := os.MkdirTemp(tmp, "cache-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(cache)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, derr := cl.Download(dctx, hfhub.DownloadRequest{Repo: repoID, CacheDir: cache, ChunkSize: chunkSize, Connections: 3})
	out.Err = derr
	for _, r := range hub.Requests() {
		if strings.HasPrefix(r.Fault, "corrupt") {
			out.Applied = r.Fault
		}
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	if dctx.Err() != nil {
		return out, fmt.Errorf("%v: the download did not end within 30 s", c)
	}
	return out, verify(c, cache, commit, src, res, derr)
}

// verify checks the property on what the download left.
func verify(c Case, cache, commit string, src []hubtest.File, res *hfhub.DownloadResult, derr error) error {
	repoDir := filepath.Join(cache, hfhub.RepoFolderName(repoID))
	want := map[string][]byte{}
	for _, f := range src {
		want[f.Path] = f.Data
	}
	// Whatever is in the snapshot or blobs/ must be exactly the source.
	snap := filepath.Join(repoDir, "snapshots", commit)
	blobs := filepath.Join(repoDir, "blobs")
	for path, data := range want {
		b, err := os.ReadFile(filepath.Join(snap, filepath.FromSlash(path)))
		switch {
		case err == nil && !bytes.Equal(b, data):
			return fmt.Errorf("%v: %s in the snapshot differs from the Hub's (download error: %v)", c, path, derr)
		case err != nil && derr == nil:
			return fmt.Errorf("%v: the download succeeded but %s is missing: %v", c, path, err)
		}
	}
	ents, _ := os.ReadDir(blobs)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".") {
			continue // our temp files: .qpack-part, .json
		}
		b, err := os.ReadFile(filepath.Join(blobs, e.Name()))
		if err != nil {
			return fmt.Errorf("%v: blobs/%s: %v", c, e.Name(), err)
		}
		ok := false
		for _, data := range want {
			ok = ok || bytes.Equal(b, data)
		}
		if !ok {
			return fmt.Errorf("%v: blobs/%s holds bytes that are no file of the repository", c, e.Name())
		}
	}
	// Other snapshots (a corrupted commit id) must not hold wrong files either.
	snaps, _ := os.ReadDir(filepath.Join(repoDir, "snapshots"))
	for _, s := range snaps {
		if s.Name() != commit {
			return fmt.Errorf("%v: a snapshot for another commit %q was created", c, s.Name())
		}
	}
	ref, rerr := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if derr != nil {
		if errors.Is(rerr, os.ErrNotExist) == false {
			return fmt.Errorf("%v: refs/main written (%q) though the download failed: %v", c, ref, derr)
		}
		msg := derr.Error()
		if strings.TrimSpace(msg) == "" || !strings.Contains(msg, repoID) {
			return fmt.Errorf("%v: unclear error %q", c, msg)
		}
		if res != nil {
			for _, fr := range res.Files {
				if fr.Status == hfhub.StatusFailed && fr.Error == "" {
					return fmt.Errorf("%v: %s failed without a message", c, fr.Path)
				}
			}
		}
		return nil
	}
	if string(ref) != commit {
		return fmt.Errorf("%v: refs/main is %q, want %s", c, ref, commit)
	}
	return nil
}
