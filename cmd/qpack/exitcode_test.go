package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("disk full"), 1},
		{fmt.Errorf("x: %w", hfhub.ErrRepoNotFound), 2},
		{fmt.Errorf("x: %w", hfhub.ErrGatedRepo), 2},
		{fmt.Errorf("x: %w", hfhub.ErrUnauthorized), 2},
		{fmt.Errorf("x: %w", hfhub.ErrHashMismatch), 1},
		{fmt.Errorf("open x: %w", os.ErrNotExist), 2},
		{fmt.Errorf("x: %w", context.Canceled), 130},
		{withCode(1, hfhub.ErrRepoNotFound), 1}, // a command's own code wins
		{&interruptedError{err: errors.New("x")}, 130},
		{fmt.Errorf("m: %w", &safetensors.FormatError{File: "a.safetensors", Msg: "bad"}), 2},
		{&qpack.Error{File: "manifest.json", Err: qpack.ErrInvalid}, 2},
		{fmt.Errorf("config.json: %w", jsonSyntaxError()), 2},
		{fmt.Errorf("%w: %w", hfhub.ErrBadResponse, jsonSyntaxError()), 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestExitCodesAcrossCommands: not found, gated and a bad token exit 2 in
// download, repack and verify-install alike, with one line on stderr that
// names the repository once; an interrupt exits 130 with the resume hint.
func TestExitCodesAcrossCommands(t *testing.T) {
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	files := []hubtest.File{{Path: "config.json", Data: []byte(`{"model_type":"qwen3_next"}`)}}
	hub.MustAddRepo("org/gated", files, hubtest.RepoOptions{Gated: "manual"})
	hub.MustAddRepo("org/private", files, hubtest.RepoOptions{Private: true})
	hub.MustAddRepo("org/open", files, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	work := t.TempDir()
	container := filepath.Join(work, "c.qpack")
	if _, stderr, code := runMain(t, "repack", "--from-dir", filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64"), "--output", container, "--reserve", "-1"); code != 0 {
		t.Fatalf("repack: %s", stderr)
	}
	commands := map[string]func(repo string) []string{
		"download": func(repo string) []string {
			return []string{"download", repo, "--cache-dir", filepath.Join(work, "cache")}
		},
		"repack": func(repo string) []string {
			return []string{"repack", "--from-hf", repo, "--output", filepath.Join(work, "out.qpack"), "--reserve", "-1"}
		},
		"verify-install": func(repo string) []string {
			return []string{"verify-install", "--deep", "--source", repo, "--no-receipt", container}
		},
	}
	for name, args := range commands {
		for _, tc := range []struct{ what, repo, token string }{
			{"not found", "org/missing", ""},
			{"gated", "org/gated", ""},
			{"bad token", "org/private", "hf_not_a_valid_token"},
		} {
			t.Setenv("HF_TOKEN", tc.token)
			stdout, stderr, code := runMain(t, args(tc.repo)...)
			if code != 2 {
				t.Errorf("%s, %s: exit %d, want 2\n%s", name, tc.what, code, stderr)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("%s, %s: stderr is not one line: %q", name, tc.what, stderr)
			}
			ours, _, _ := strings.Cut(stderr, "(Hub: ") // the Hub's own message may name it too
			if strings.Count(ours, tc.repo) > 1 {
				t.Errorf("%s, %s: the repository is named more than once: %q", name, tc.what, stderr)
			}
			if name != "verify-install" && stdout != "" {
				t.Errorf("%s, %s: stdout %q", name, tc.what, stdout)
			}
		}
	}
	t.Setenv("HF_TOKEN", "")
	// An interrupt: the context is cancelled before the work starts.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	commands["verify-install"] = func(string) []string {
		return []string{"verify-install", "--deep", "--source", filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64"), "--no-receipt", container}
	}
	for _, name := range []string{"download", "repack", "verify-install"} {
		var o, e bytes.Buffer
		code := run(ctx, append([]string{"qpack"}, commands[name]("org/open")...), &o, &e)
		if code != 130 || strings.TrimSpace(e.String()) != "qpack: "+resumeHint {
			t.Errorf("%s interrupted: exit %d, stderr %q", name, code, e.String())
		}
	}
}

func jsonSyntaxError() error {
	var v any
	return json.Unmarshal([]byte("{bad"), &v)
}
