package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

func init() {
	register(&cli.Command{
		Name:      "hub-serve",
		Hidden:    true,
		Usage:     "serve directories as a fake Hugging Face Hub (developer tool, for tests against other clients)",
		ArgsUsage: "DIR",
		Description: "DIR holds repositories as DIR/<org>/<name>/..., each served as the \"main\" branch of model\n" +
			"<org>/<name>. A file is LFS (served by a 302 to the CDN address, with X-Linked-Etag = sha256)\n" +
			"when the repository's .gitattributes gives it filter=lfs, or when it has at least\n" +
			"--lfs-threshold bytes; other files are served by the Hub with their git blob sha1 as ETag.\n" +
			"Prints the Hub and CDN URLs, then serves until interrupted. Use the Hub URL as HF_ENDPOINT\n" +
			"(with HF_HUB_DISABLE_XET=1 and NO_PROXY=127.0.0.1,localhost for the Python client).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:0", Usage: "Hub listen address"},
			&cli.StringFlag{Name: "cdn-addr", Value: "127.0.0.1:0", Usage: "CDN listen address"},
			&cli.StringFlag{Name: "cdn-host", Value: "localhost", Usage: "host name in CDN URLs (must differ from the Hub's)"},
			&cli.Int64Flag{Name: "lfs-threshold", Value: hubtest.DefaultLFSThreshold, Usage: "files of at least this many bytes are LFS (negative: only .gitattributes decides)"},
			&cli.IntFlag{Name: "tree-page-size", Value: 1000, Usage: "entries per tree listing page"},
			&cli.Int64Flag{Name: "bandwidth", Usage: "cap each response body at this many bytes/s (0: none)"},
			&cli.BoolFlag{Name: "resolve-cache", Usage: "answer regular files with a relative 307 to /api/resolve-cache/... first"},
			&cli.StringFlag{Name: "token", Usage: "a valid token with access to every private or gated repository"},
			&cli.StringSliceFlag{Name: "private", Usage: "make this repository private (repeatable)"},
			&cli.StringSliceFlag{Name: "gated", Usage: "make this repository gated (repeatable)"},
			&cli.StringFlag{Name: "log", Usage: "write the request log here as JSON lines on exit"},
			&cli.StringSliceFlag{Name: "fault", Usage: "inject a scripted fault, e.g. kind=trickle,route=cdn,conn=3,rate=8192,times=-1 (repeatable; keys: see hubtest.ParseFault)"},
		},
		Action: func(cc *cli.Context) error {
			c, err := parseLateFlags(cc)
			if err != nil {
				return err
			}
			if len(c.Args()) != 1 {
				return withCode(2, fmt.Errorf("hub-serve: give exactly one DIR"))
			}
			repos, err := hubtest.LoadDir(c.Args()[0], c.Int64("lfs-threshold"))
			if err != nil {
				return withCode(2, err)
			}
			s, err := hubtest.NewServer(hubtest.Config{
				HubAddr: c.String("addr"), CDNAddr: c.String("cdn-addr"), CDNHost: c.String("cdn-host"),
				TreePageSize: c.Int("tree-page-size"), BandwidthPerConn: c.Int64("bandwidth"),
				ResolveCache: c.Bool("resolve-cache"),
			})
			if err != nil {
				return err
			}
			defer s.Close()
			for _, spec := range c.StringSlice("fault") {
				f, err := hubtest.ParseFault(spec)
				if err != nil {
					return withCode(2, err)
				}
				s.Inject(f)
			}
			private, gated := map[string]bool{}, map[string]bool{}
			for _, r := range c.StringSlice("private") {
				private[r] = true
			}
			for _, r := range c.StringSlice("gated") {
				gated[r] = true
			}
			var ids []string
			for id, files := range repos {
				opts := hubtest.RepoOptions{Private: private[id]}
				if gated[id] {
					opts.Gated = "manual"
				}
				commit, err := s.AddRepo(id, files, opts)
				if err != nil {
					return fmt.Errorf("repository %s: %w", id, err)
				}
				ids = append(ids, id)
				fmt.Fprintf(cc.App.ErrWriter, "repo %s main=%s (%d files)\n", id, commit, len(files))
			}
			if t := c.String("token"); t != "" {
				s.AddToken(t, ids...)
			}
			fmt.Fprintf(cc.App.Writer, "hub %s\ncdn %s\n", s.URL, s.CDNURL)
			if f, ok := cc.App.Writer.(*os.File); ok {
				f.Sync()
			}
			<-cc.Context.Done()
			if p := c.String("log"); p != "" {
				f, err := os.Create(p)
				if err != nil {
					return err
				}
				enc := json.NewEncoder(f)
				for _, r := range s.Requests() {
					enc.Encode(r)
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			return nil
		},
	})
}
