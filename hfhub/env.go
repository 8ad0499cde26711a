package hfhub

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hub used when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// EnvEndpoint returns HF_ENDPOINT without its trailing slashes, or DefaultEndpoint.
func EnvEndpoint() string {
	if e := strings.TrimRight(strings.TrimSpace(os.Getenv("HF_ENDPOINT")), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// parseEndpoint checks that an endpoint is an http(s) URL with a host and
// returns it without a trailing slash.
func parseEndpoint(e string) (*url.URL, error) {
	e = strings.TrimRight(strings.TrimSpace(e), "/")
	u, err := url.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("hub endpoint %q: %v", e, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("hub endpoint %q: want an http:// or https:// URL with a host", e)
	}
	if u.User != nil {
		return nil, fmt.Errorf("hub endpoint %s: credentials in the URL are not supported (use HF_TOKEN)", u.Redacted())
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// HFHome returns $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func HFHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandHome(h)
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// HubCacheDir returns the official cache root: $HF_HUB_CACHE, else
// $HUGGINGFACE_HUB_CACHE, else HFHome()/hub.
func HubCacheDir() string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := os.Getenv(k); v != "" {
			return expandHome(v)
		}
	}
	return filepath.Join(HFHome(), "hub")
}

// EnvOffline reports whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to a true value.
func EnvOffline() bool {
	return envTrue("HF_HUB_OFFLINE") || envTrue("TRANSFORMERS_OFFLINE")
}

func envTrue(k string) bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv(k))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// TokenSource names where a token came from (never the token itself).
type TokenSource string

const (
	TokenNone     TokenSource = ""
	TokenExplicit TokenSource = "explicit"
	TokenEnv      TokenSource = "HF_TOKEN"
	TokenEnvOld   TokenSource = "HUGGING_FACE_HUB_TOKEN"
	TokenFile     TokenSource = "token file"
)

// LookupToken finds the token the way the official client does: the explicit
// value, then HF_TOKEN, then HUGGING_FACE_HUB_TOKEN, then the file named by
// HF_TOKEN_PATH (default $HF_HOME/token). HF_HUB_DISABLE_IMPLICIT_TOKEN turns
// off everything but the explicit value. An empty token means anonymous.
func LookupToken(explicit string) (string, TokenSource, error) {
	if explicit != "" {
		return checkToken(explicit, TokenExplicit)
	}
	if envTrue("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
		return "", TokenNone, nil
	}
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return checkToken(t, TokenEnv)
	}
	if t := strings.TrimSpace(os.Getenv("HUGGING_FACE_HUB_TOKEN")); t != "" {
		return checkToken(t, TokenEnvOld)
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		p = filepath.Join(HFHome(), "token")
	}
	p = expandHome(p)
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", TokenNone, nil
		}
		return "", TokenNone, fmt.Errorf("reading the token file %s: %w", p, err)
	}
	defer f.Close()
	buf := make([]byte, 4097)
	n, _ := f.Read(buf)
	if n > 4096 {
		return "", TokenNone, fmt.Errorf("token file %s is larger than 4 KiB: not a token", p)
	}
	t := strings.TrimSpace(string(buf[:n]))
	if t == "" {
		return "", TokenNone, nil
	}
	return checkToken(t, TokenFile)
}

// checkToken refuses tokens that could inject headers; the message never
// contains the token.
func checkToken(t string, src TokenSource) (string, TokenSource, error) {
	t = strings.TrimSpace(t)
	for i := 0; i < len(t); i++ {
		if c := t[i]; c < 0x21 || c > 0x7e {
			return "", TokenNone, fmt.Errorf("the token from %s contains a space or control character at byte %d: refusing to send it", src, i)
		}
	}
	return t, src, nil
}
