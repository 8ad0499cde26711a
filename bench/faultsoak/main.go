// Command faultsoak runs hfhub's single-corruption download property
// (hfhub/faultprop) for many seeds: each seed corrupts one response (model
// info, a tree page, a small file, a shard's header range or a data range;
// a bit flip, a swap of equal-length substrings or a truncation) and the
// download must end in a byte-identical cache or a clear error that left
// no wrong byte behind.
//
//	go run ./bench/faultsoak -seeds 3000
//	go run ./bench/faultsoak -seeds 500 -start 10000 -v
//
// It prints the outcome counts and exits 1 on the first violation (with
// its seed, to rerun alone: -start SEED -seeds 1 -v).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"time"

	"github.com/qpack-go/qpack/hfhub/faultprop"
)

func main() {
	seeds := flag.Uint64("seeds", 3000, "how many seeds")
	start := flag.Uint64("start", 1, "first seed")
	verbose := flag.Bool("v", false, "print every seed's outcome")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tmp, err := os.MkdirTemp("", "faultsoak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	counts := map[string]int{}
	t0 := time.Now()
	for s := *start; s < *start+*seeds; s++ {
		out, err := faultprop.Check(ctx, s, tmp)
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "interrupted")
			os.RemoveAll(tmp)
			os.Exit(130)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "VIOLATION %v\n", err)
			os.RemoveAll(tmp)
			os.Exit(1)
		}
		k := out.Target + " " + outcome(out)
		counts[k]++
		if *verbose {
			fmt.Printf("%v: %s (%s) %v\n", out.Case, outcome(out), out.Applied, out.Err)
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("%d seeds from %d in %v, no violation\n", *seeds, *start, time.Since(t0).Round(time.Millisecond))
	for _, k := range keys {
		fmt.Printf("  %-32s %d\n", k, counts[k])
	}
}

func outcome(o faultprop.Outcome) string {
	switch {
	case o.Applied == "":
		return "not-applied"
	case o.Err != nil:
		return "clear-error"
	default:
		return "identical"
	}
}
