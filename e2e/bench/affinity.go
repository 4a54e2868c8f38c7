// bench affinity compares round robin, hard affinity, threshold soft
// affinity, cost soft affinity and a global-map oracle on a skewed
// multi-turn workload under cache pressure (package e2e/bench/affinity),
// prints the table and writes it, with the setup, to AFFINITY.md.
//
//	go run ./e2e/bench affinity [-duration 30s] [-seed 1] [-out e2e/bench] …
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/affinity"
)

func affinityMain(ctx context.Context, args []string) error {
	o := affinity.Defaults
	fs := flag.NewFlagSet("affinity", flag.ExitOnError)
	registerAffinity(fs, &o, affinity.Defaults)
	out := fs.String("out", "e2e/bench", "directory for AFFINITY.md (empty: none)")
	policies := fs.String("policies", "rr,hard,threshold,cost,oracle", "policies to run: rr, hard, threshold, cost, oracle")
	_ = fs.Parse(args)
	var err error
	if o.Policies, err = affinity.Select(*policies); err != nil {
		return err
	}
	fmt.Println(affinity.Describe(o))
	o.Step = func(label string) { fmt.Fprintln(os.Stderr, time.Now().Format("15:04:05.000"), label) }
	started, mach := time.Now(), machine()
	rs, err := affinity.Run(ctx, o)
	if err != nil {
		return err
	}
	affinity.Table(rs).Text(os.Stdout)
	if t := affinity.Targets(rs); t != nil {
		t.Text(os.Stdout)
	}
	cmd := "make bench-affinity"
	if len(args) > 0 {
		cmd = "go run ./e2e/bench affinity " + strings.Join(args, " ")
	}
	if *out != "" {
		if err := writeAffinity(*out, o, rs, cmd, mach, started); err != nil {
			return err
		}
	}
	return affinity.Sanity(rs)
}

// registerAffinity adds the run's flags, with d's values as defaults.
func registerAffinity(fs *flag.FlagSet, o *affinity.Options, d affinity.Options) {
	o.Workload.Register(fs, d.Workload)
	fs.DurationVar(&o.Duration, "duration", d.Duration, "measured time per policy")
	fs.DurationVar(&o.Warmup, "warmup", d.Warmup, "load before the measured time (caches fill, chats pile up)")
	fs.IntVar(&o.Backends.N, "backends", d.Backends.N, "modelsim backends")
	fs.IntVar(&o.Backends.MaxRunning, "max-running", d.Backends.MaxRunning, "requests each backend serves at once (the rest queue)")
	fs.DurationVar(&o.Backends.Prefill, "prefill", d.Backends.Prefill, "time per uncached prompt token (one serial lane per backend)")
	fs.DurationVar(&o.Backends.Decode, "decode", d.Backends.Decode, "time per output token")
	fs.TextVar(&o.LogLevel, "log-level", d.LogLevel, "level of the sidecars' logs on stderr (info: the access log)")
	fs.IntVar(&o.Backends.CacheBlocks, "cache-blocks", d.Backends.CacheBlocks, "prefix-cache capacity per backend, in blocks of 16 tokens")
}

// writeAffinity writes dir/AFFINITY.md.
func writeAffinity(dir string, o affinity.Options, rs []*affinity.Result, cmd, machine string, started time.Time) error {
	var b bytes.Buffer
	affinity.Markdown(&b, o, rs, cmd, machine, started, time.Since(started))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "AFFINITY.md")
	fmt.Printf("\nreport: %s\n", path)
	return os.WriteFile(path, b.Bytes(), 0o644)
}
