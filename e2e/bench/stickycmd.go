package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/sticky"
	"github.com/tetherproxy/tether/e2e/bench/workload"
)

// stickyFlags are section 2's parameters.
type stickyFlags struct {
	replicas, backends, policies string
	prefill, decode              time.Duration
	cacheBlocks                  int
	cacheSweep, sweepPolicies    string
	scaleWithBackends            bool
	work                         workload.Params
}

// stickyDefaults: timing of a Llama-3.1-8B-class model on one H100 (see
// the report's section 2 for the sources), modelsim's default cache.
var stickyDefaults = stickyFlags{
	replicas: "1,3,6", backends: "4,8", policies: strings.Join(sticky.AllPolicies, ","),
	prefill: 50 * time.Microsecond, decode: 6 * time.Millisecond, cacheBlocks: 4096,
	cacheSweep: "1024,16384", sweepPolicies: "round-robin,tether-memory,tether-gossip,oracle",
	scaleWithBackends: true, work: workload.Defaults,
}

func (s *stickyFlags) register(fs *flag.FlagSet, d stickyFlags) {
	fs.StringVar(&s.replicas, "replicas", d.replicas, "router replica counts R, comma-separated")
	fs.StringVar(&s.backends, "backends", d.backends, "backend counts B, comma-separated")
	fs.StringVar(&s.policies, "policies", d.policies, "policies, comma-separated")
	fs.DurationVar(&s.prefill, "prefill", d.prefill, "modelsim time per uncached prompt token (one prefill at a time per backend)")
	fs.DurationVar(&s.decode, "decode", d.decode, "modelsim time per output token")
	fs.IntVar(&s.cacheBlocks, "cache-blocks", d.cacheBlocks, "modelsim prefix-cache capacity per backend, in blocks of 16 tokens")
	fs.StringVar(&s.cacheSweep, "cache-sweep", d.cacheSweep, "also run -sweep-policies at the largest R and smallest B with these cache sizes (blocks); empty: none")
	fs.StringVar(&s.sweepPolicies, "sweep-policies", d.sweepPolicies, "policies of the cache sweep")
	fs.BoolVar(&s.scaleWithBackends, "scale-with-backends", d.scaleWithBackends, "scale -conversations by B / the smallest B, so every backend is offered the same load (a larger B's policies then run in groups, each offering the machine about the smallest B's load)")
	s.work.Register(fs, d.work)
}

func (s *stickyFlags) options(bin string) (sticky.Options, error) {
	s.work.Decode = s.decode
	o := sticky.Options{Bin: bin, Workload: s.work, ScaleWithBackends: s.scaleWithBackends,
		Model: sticky.Model{PrefillPerToken: s.prefill, DecodePerToken: s.decode, CacheBlocks: s.cacheBlocks}}
	var err error
	if o.Replicas, err = parseInts("-replicas", s.replicas); err != nil {
		return o, err
	}
	if o.Backends, err = parseInts("-backends", s.backends); err != nil {
		return o, err
	}
	if o.Policies, err = parsePolicies("-policies", s.policies); err != nil {
		return o, err
	}
	if s.cacheSweep != "" {
		if o.CacheSweep, err = parseInts("-cache-sweep", s.cacheSweep); err != nil {
			return o, err
		}
		if o.SweepPolicies, err = parsePolicies("-sweep-policies", s.sweepPolicies); err != nil {
			return o, err
		}
	}
	return o, nil
}

func parsePolicies(flag, list string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		p = strings.TrimSpace(p)
		if _, ok := sticky.Labels[p]; !ok {
			return nil, fmt.Errorf("%s: unknown policy %q (want %s)", flag, p, strings.Join(sticky.AllPolicies, ","))
		}
		out = append(out, p)
	}
	return out, nil
}

// flagsString is the command line that reproduces these parameters.
func (s *stickyFlags) String() string {
	return fmt.Sprintf("-replicas %s -backends %s -prefill %v -decode %v -cache-blocks %d -cache-sweep %q -sweep-policies %s -scale-with-backends=%t %s",
		s.replicas, s.backends, s.prefill, s.decode, s.cacheBlocks, s.cacheSweep, s.sweepPolicies, s.scaleWithBackends, s.work)
}

func parseInts(flag, list string) ([]int, error) {
	var out []int
	for v := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flag, v)
		}
		out = append(out, n)
	}
	return out, nil
}

func stickyMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sticky", flag.ExitOnError)
	bin := fs.String("bin", "bin", "directory with tether-sidecar and modelsim")
	var s stickyFlags
	s.register(fs, stickyDefaults)
	_ = fs.Parse(args)
	o, err := s.options(*bin)
	if err != nil {
		return err
	}
	o.Step = func(st string) { fmt.Fprintln(os.Stderr, "…", st) }
	for _, b := range o.Backends {
		w := o.ForBackends(b)
		fmt.Printf("workload, B = %d: %s\n", b, workload.Summary(workload.Generate(w), w))
	}
	res, sweep, err := sticky.Run(ctx, o)
	if err != nil {
		return err
	}
	sticky.Print(os.Stdout, o, res)
	if t := sticky.SweepTable(o, res, sweep); t != nil {
		t.Text(os.Stdout)
	}
	return nil
}
