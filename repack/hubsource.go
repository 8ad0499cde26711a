package repack

import (
	"context"

	"github.com/qpack-go/qpack/checkpoint"
)

// openHub opens o.FromHF through package checkpoint: the cache first,
// offline when asked (Options.Offline or HF_HUB_OFFLINE=1), the Hub for
// the rest. The Hub client is made there from the options.
func openHub(ctx context.Context, o Options) (*Source, error) {
	hopts := o.Hub
	if o.Token != "" {
		hopts.Token = o.Token
	}
	if o.Endpoint != "" {
		hopts.Endpoint = o.Endpoint
	}
	if o.HTTPClient != nil {
		hopts.HTTPClient = o.HTTPClient
	}
	hopts.Logger = o.Logger
	return checkpoint.OpenHub(ctx, checkpoint.HubOptions{
		Repo: o.FromHF, Revision: o.Revision, ClientOptions: hopts,
		CacheDir: o.CacheDir, NoCache: o.NoCache, Offline: o.Offline, Logger: o.Logger,
	})
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
