package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/affinity"
	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/progress"
	"github.com/tetherproxy/tether/e2e/bench/report"
	"github.com/tetherproxy/tether/e2e/bench/scale"
	"github.com/tetherproxy/tether/e2e/bench/sticky"
)

// The full run's parameters (make bench: sections 1-3, about 13 minutes
// on 2 cores). Section 4, the affinity bench, is left out of it: its five
// policies take almost 4 minutes more, past the 15 the side-by-side
// benchmarks are meant to take, and make bench-affinity runs it alone;
// the quick run keeps a reduced one, so CI still runs it.
var (
	fullHop = hopFlags{
		proxies: strings.Join(hop.AllProxies, ","), modes: "non-streaming,streaming",
		rates: "1000,5000", streamRates: "200,500",
		duration: 2500 * time.Millisecond, warmup: 500 * time.Millisecond, maxRate: true, probe: time.Second,
		sessions: 1000, backends: 3,
	}
	// Without bench sticky's cache sweep: it adds a run of a minute and
	// the section's tables and targets do not need it.
	fullSticky = func() stickyFlags {
		s := stickyDefaults
		s.cacheSweep = ""
		return s
	}()
	fullScale = scaleDefaults
)

// The quick run's (make bench-quick, CI): every section, every proxy and
// policy, smaller. It fails when something does not work; it asserts no
// performance figure.
var (
	quickHop = hopFlags{
		proxies: strings.Join(hop.AllProxies, ","), modes: "non-streaming,streaming",
		rates: "1000", streamRates: "100",
		duration: time.Second, warmup: 500 * time.Millisecond, maxRate: false, probe: time.Second,
		sessions: 1000, backends: 3,
	}
	quickSticky = func() stickyFlags {
		s := stickyDefaults
		s.replicas, s.backends, s.cacheSweep = "3", "4", "1024"
		s.work.Conversations, s.work.Ramp, s.work.TurnsMax, s.work.ThinkMean, s.work.ThinkMax = 40, 2*time.Second, 6, 500*time.Millisecond, 2*time.Second
		return s
	}()
	quickScale = scaleFlags{sizes: "10000,100000", rings: "3,10", samples: 30, redisN: 10000, rtN: 50, lookupTime: 500 * time.Millisecond}
)

func allMain(ctx context.Context, args []string) error {
	quick := slices.Contains(args, "-quick") || slices.Contains(args, "--quick")
	h, s, sc := fullHop, fullSticky, fullScale
	var ao *affinity.Options // nil: no affinity section
	out, readme := "e2e/bench", "README.md"
	if quick {
		h, s, sc, ao = quickHop, quickSticky, quickScale, &affinity.Quick
		out, readme = "bin/bench-quick", ""
	}
	fs := flag.NewFlagSet("all", flag.ExitOnError)
	fs.Bool("quick", false, "a reduced run of every section, the affinity bench included (CI); writes to bin/bench-quick, not the README")
	bin := fs.String("bin", "bin", "directory with tether-sidecar and modelsim")
	outDir := fs.String("out", out, "directory for REPORT.md and the charts")
	readmePath := fs.String("readme", readme, "README whose headline block to rewrite (empty: none)")
	h.register(fs, h)
	s.register(fs, s)
	sc.register(fs, sc)
	_ = fs.Parse(args)
	s.work.Decode = s.decode

	env, err := procs.NewEnv(*bin)
	if err != nil {
		return err
	}
	defer env.Close()
	ho, err := h.options(env)
	if err != nil {
		return err
	}
	so, err := s.options(*bin)
	if err != nil {
		return err
	}
	sco, err := sc.options(*bin)
	if err != nil {
		return err
	}

	bar := progress.New()
	planHop(bar, ho)
	planConditions(bar, h)
	bar.Plan(so.Runs(), so.Workload.Ramp+40*time.Second)
	bar.Plan(1, time.Duration(slices.Max(sco.Sizes)/100)*time.Microsecond*10+2*time.Second)
	bar.Plan(1, time.Duration(slices.Max(sco.Sizes)/100)*time.Microsecond*40+3*time.Second)
	bar.Plan(len(sco.Rings), 6*time.Second)
	bar.Plan(1, 10*time.Second)
	ho.Step, so.Step, sco.Step = bar.Step, bar.Step, bar.Step
	if ao != nil {
		bar.Plan(len(ao.Policies), ao.Warmup+ao.Duration+5*time.Second)
		ao.Step = bar.Step
	}
	ho.Skip = bar.Skip

	in := &report.Input{
		Command:   "go run ./e2e/bench all " + strings.Join(args, " "),
		HopCmd:    "go run ./e2e/bench hop " + h.String(),
		StickyCmd: "go run ./e2e/bench sticky " + s.String(),
		ScaleCmd:  "go run ./e2e/bench scale " + sc.String(),
		Started:   time.Now(),
		Machine:   machine(),
	}
	if quick {
		in.Command = "make bench-quick"
	} else if len(args) == 0 {
		in.Command = "make bench"
	}
	bar.Start()
	var aff []*affinity.Result
	var affStarted time.Time
	if in.Hop, err = hop.Run(ctx, ho); err == nil {
		in.Conditions, err = runConditions(ctx, env, h, bar.Step)
	}
	if err == nil {
		in.StickyOpts = so
		if in.Sticky, in.Sweep, err = sticky.Run(ctx, so); err == nil {
			if in.Scale, err = scale.Run(ctx, sco); err == nil && ao != nil {
				affStarted = time.Now()
				aff, err = affinity.Run(ctx, *ao)
			}
		}
	}
	bar.Finish()
	if err != nil {
		return err
	}
	in.Took = time.Since(in.Started)
	headline, err := report.Write(*outDir, in)
	if err != nil {
		return err
	}
	fmt.Println(headline)
	fmt.Printf("\nreport: %s/REPORT.md\n", *outDir)
	if ao != nil {
		if err := writeAffinity(*outDir, *ao, aff, in.Command+" (its affinity section; alone: make bench-affinity)", in.Machine, affStarted); err != nil {
			return err
		}
	}
	// A broken part fails the run (after the report, which shows it);
	// the README keeps its previous headline then.
	if err := errors.Join(sanity(in), affinity.Sanity(aff)); err != nil {
		return err
	}
	if *readmePath != "" {
		return report.UpdateReadme(*readmePath, headline, in.Command)
	}
	return nil
}

// planHop puts section 1's steps on the bar, in hop.Run's order.
func planHop(bar *progress.Bar, o hop.Options) {
	n := len(o.Proxies)
	if !slices.Contains(o.Proxies, hop.Direct) {
		n++
	}
	for _, m := range o.Modes {
		rates := o.Rates
		if m == hop.Streaming {
			rates = o.StreamRates
		}
		bar.Plan(n*len(rates), o.Warmup+o.Duration+300*time.Millisecond)
		if o.MaxRate {
			bar.Plan(hop.ClimbProbes(n, m), o.ProbeTime*5/4+300*time.Millisecond)
		}
	}
}

// sanity fails the run when a part did not work (no successful requests,
// most requests failing, no cache hits where stickiness must give some).
// It asserts no performance figure: the machine is shared and noisy.
func sanity(in *report.Input) error {
	var errs []error
	// A proxy must work at the lowest rate of its mode; above it, errors
	// are what it measured (2 cores overload at 5,000 requests/s, direct
	// included), shown in the tables' ok/sent, not a broken part.
	lowest := map[hop.Mode]float64{}
	for _, p := range in.Hop.Points {
		if l, ok := lowest[p.Mode]; !ok || p.Rate < l {
			lowest[p.Mode] = p.Rate
		}
	}
	// failed: more than a twentieth of p's requests failed.
	failed := func(what string, p hop.Point) error {
		if p.Res.Errors <= p.Res.Sent/20 {
			return nil
		}
		return fmt.Errorf("hop%s %s %s at %.0f/s: %d of %d requests failed (first: %v)", what, p.Proxy, p.Mode, p.Rate, p.Res.Errors, p.Res.Sent, p.Res.FirstErr)
	}
	for _, p := range in.Hop.Points {
		if p.Rate == lowest[p.Mode] {
			errs = append(errs, failed("", p))
		}
	}
	// A condition's one point is at a rate every proxy carries.
	for _, c := range in.Conditions {
		for _, p := range c.Hop.Points {
			errs = append(errs, failed(", "+c.Name+":", p))
		}
	}
	for _, r := range append(slices.Clone(in.Sticky), in.Sweep...) {
		// The oracle keeps every later turn on its previous turn's
		// backend by construction, and round robin moves most of them:
		// otherwise the backends did not name themselves in their
		// answers (X-Modelsim-Id) and the same-backend column means
		// nothing.
		if r.Policy == sticky.Oracle && r.Stayed < 0.99 || r.Policy == sticky.RoundRobin && r.B > 1 && r.Stayed > 0.9 {
			errs = append(errs, fmt.Errorf("sticky %s R=%d B=%d: %.1f%% of later turns on their previous turn's backend (is X-Modelsim-Id missing?)", r.Policy, r.R, r.B, 100*r.Stayed))
		}
		if r.Errors > r.Requests/10 || r.Requests == r.Errors {
			errs = append(errs, fmt.Errorf("sticky %s R=%d B=%d: %d of %d requests failed (first: %v)", r.Policy, r.R, r.B, r.Errors, r.Requests, r.FirstErr))
		}
		if r.Cached == 0 {
			errs = append(errs, fmt.Errorf("sticky %s R=%d B=%d: no prefix-cache hit at all", r.Policy, r.R, r.B))
		}
	}
	s := in.Scale
	for _, st := range []string{"memory", "gossip", "redis"} {
		if s.Lookups[st] <= 0 {
			errs = append(errs, fmt.Errorf("scale: no %s lookups", st))
		}
	}
	if s.RoundTrips.Sticky == 0 || s.Join <= 0 {
		errs = append(errs, errors.New("scale: Redis round trips or the join were not measured"))
	}
	return errors.Join(errs...)
}

// machine describes where the run happened.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	l, _, _ := strings.Cut(string(load), " ")
	return fmt.Sprintf("Machine: %d cores (%s), %s; load average %s when the run started.", runtime.NumCPU(), cpu, runtime.Version(), l)
}
