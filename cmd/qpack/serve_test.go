package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// qpack serve end to end: it listens on a free loopback port, answers a
// chat completion on the tiny model, and a signal (the context's end)
// stops it with exit code 130.
func TestServeCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := newApp()
	var errw syncBuffer
	app.Writer, app.ErrWriter = io.Discard, &errw
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"qpack", "serve", genModel, "--port", "0", "--model-id", "tiny", "--expert-cache", "1MiB"})
	}()
	addr := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/v1`)
	var base string
	deadline := time.Now().Add(60 * time.Second)
	for base == "" {
		if m := addr.FindStringSubmatch(errw.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, errw.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %s", errw.String())
		}
	}
	for {
		res, err := http.Get(base + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("/health: %d", res.StatusCode)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the model did not load in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Object  string
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	err = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || body.Object != "chat.completion" || body.Usage.CompletionTokens == 0 {
		t.Fatalf("%d %+v %v", res.StatusCode, body, err)
	}
	cancel()
	select {
	case err := <-done:
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 130 {
			t.Fatalf("after the signal: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after the signal")
	}
}

func TestServeUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", genModel, "--host", "0.0.0.0"}, "--api-key"},
		{[]string{"serve", "/nonexistent/model"}, "does not exist"},
		{[]string{"serve"}, "MODEL"},
		{[]string{"serve", genModel, "--port", "70000"}, "--port"},
		{[]string{"serve", genModel, "--max-body", "lots"}, "--max-body"},
	} {
		_, _, err := runGenCLI(t, c.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v", c.args, err)
		}
	}
	for _, h := range []string{"127.0.0.1", "::1", "[::1]", "localhost"} {
		if !isLoopback(h) {
			t.Fatal(h)
		}
	}
	for _, h := range []string{"0.0.0.0", "", "192.168.1.2", "::"} {
		if isLoopback(h) {
			t.Fatal(h)
		}
	}
}

// serve takes MODEL as generate does: a repo id names its cached snapshot;
// a repo that is not cached is exit 2 saying how to get it.
func TestServeResolvesRepoID(t *testing.T) {
	root, commit := fakeCache(t)
	t.Setenv("HF_HUB_CACHE", root)
	got, err := resolveServeModel(context.Background(), "org/tiny")
	if want := filepath.Join(root, "models--org--tiny", "snapshots", commit); err != nil || got != want {
		t.Fatalf("org/tiny: %q, %v; want %q", got, err, want)
	}
	_, err = resolveServeModel(context.Background(), "org/absent")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "qpack download") {
		t.Fatalf("org/absent: %v (exit %d)", err, exitCode(err))
	}
}
