package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/sysmon"
)

// hopFlags are section 1's parameters; `bench all` uses the same set.
type hopFlags struct {
	proxies, modes, rates string
	streamRates           string
	duration, warmup      time.Duration
	maxRate               bool
	probe                 time.Duration
	sessions, backends    int
	headers               string
	gomaxprocs            int
	baseline              string
	godebug               string
	stalls                time.Duration // bench hop -stalls (hopMain registers it)
	block                 time.Duration // bench hop -block (hopMain registers it)
	threads               bool          // bench hop -threads (the same)
	pause                 time.Duration // bench hop -pause (the same)
	closeEvery            int           // bench hop -close-every (the same)
	logReaderPause        time.Duration // bench hop -log-reader-pause (the same)
	promptBytes           int           // bench hop -prompt-bytes (the same)
	idleConns             int           // bench hop -idle-conns (the same)
	idleHeld              int           // bench hop -idle-held (the same)
}

func (h *hopFlags) register(fs *flag.FlagSet, d hopFlags) {
	fs.StringVar(&h.proxies, "proxies", d.proxies, "proxies, comma-separated: "+strings.Join(hop.AllProxies, ",")+" (and "+hop.TetherBaseline+", with -tether-baseline; "+hop.GoRelay+", a Go TCP relay as the floor of a Go proxy; "+hop.GoMinimal+", the least sticky HTTP proxy in Go as the floor of a Go HTTP proxy; "+hop.GoMinimalWork+" and "+hop.GoMinimalWorkNoLog+", that proxy doing tether's per-request work, with and without the access log; "+hop.GoLayersWork+" and "+hop.GoLayersWorkNoLog+", the same work on tether's own server and transport without its handler)")
	fs.StringVar(&h.modes, "modes", d.modes, "response shapes: non-streaming,streaming")
	fs.StringVar(&h.rates, "rates", d.rates, "offered rates in requests/s, comma-separated")
	fs.StringVar(&h.streamRates, "stream-rates", d.streamRates, "offered rates of streamed requests (50 SSE events each)")
	fs.DurationVar(&h.duration, "duration", d.duration, "measured time per point")
	fs.DurationVar(&h.warmup, "warmup", d.warmup, "warm-up before each point, same rate, not recorded")
	fs.BoolVar(&h.maxRate, "max-rate", d.maxRate, "find each proxy's highest sustained rate: p99 added over direct's < 5ms, no errors, probed up a ladder of rates")
	fs.DurationVar(&h.probe, "probe", d.probe, "measured time of one rate-search probe")
	fs.IntVar(&h.sessions, "sessions", d.sessions, "distinct X-Session-ID values")
	fs.IntVar(&h.backends, "hop-backends", d.backends, "modelsim backends of the hop benchmark")
	fs.StringVar(&h.headers, "headers", d.headers, "the requests' fields besides Host, Content-Type, X-Session-ID and Content-Length: "+hop.HeadersPlain+" (none) or "+hop.HeadersSDK+" (the 14 an OpenAI Python SDK request carries, a bearer key among them)")
	fs.IntVar(&h.gomaxprocs, "tether-gomaxprocs", d.gomaxprocs, "GOMAXPROCS of the sidecars, fixed (0: the sidecar's own choice, one thread while one keeps up and two under load, README \"Threads\")")
	fs.StringVar(&h.godebug, "godebug", d.godebug, "GODEBUG of the Go proxies (tether's sidecars, the Go ReverseProxy, relay and minimal proxy); empty: the sidecar sets its own ("+sysmon.GODEBUG+", README \"Threads\") and the others get the same; schedtrace=0: Go's default for all")
	fs.StringVar(&h.baseline, "tether-baseline", d.baseline, "another tether-sidecar binary, measured beside tether as "+hop.TetherBaseline+" (a change's before and after in one run)")
}

// hopDefaults are issue 13's comparison: direct, HAProxy, nginx and
// tether with and without its access log, at 2,000 and 5,000 requests/s.
var hopDefaults = hopFlags{
	proxies: "direct,haproxy,nginx,go-reverseproxy,tether,tether-nolog", modes: "non-streaming,streaming", rates: "2000,5000", streamRates: "200,500",
	duration: 3 * time.Second, warmup: time.Second, maxRate: true, probe: 1500 * time.Millisecond,
	sessions: 1000, backends: 3, headers: hop.HeadersPlain,
}

func (h *hopFlags) options(env *procs.Env) (hop.Options, error) {
	o := hop.Options{Env: env, Duration: h.duration, Warmup: h.warmup, MaxRate: h.maxRate, ProbeTime: h.probe,
		Sessions: h.sessions, Backends: h.backends, Headers: h.headers}
	if _, err := hop.HeaderLines(h.headers); err != nil {
		return o, fmt.Errorf("-%v", err)
	}
	for p := range strings.SplitSeq(h.proxies, ",") {
		o.Proxies = append(o.Proxies, strings.TrimSpace(p))
	}
	for m := range strings.SplitSeq(h.modes, ",") {
		switch mode := hop.Mode(strings.TrimSpace(m)); mode {
		case hop.NonStreaming, hop.Streaming:
			o.Modes = append(o.Modes, mode)
		default:
			return o, fmt.Errorf("-modes: unknown mode %q (want non-streaming or streaming)", m)
		}
	}
	var err error
	if o.Rates, err = parseRates("-rates", h.rates); err != nil {
		return o, err
	}
	if o.StreamRates, err = parseRates("-stream-rates", h.streamRates); err != nil {
		return o, err
	}
	if h.baseline != "" {
		o.BaselineBinary = h.baseline
		if !slices.Contains(o.Proxies, hop.TetherBaseline) {
			o.Proxies = append(o.Proxies, hop.TetherBaseline)
		}
	}
	if h.gomaxprocs > 0 {
		o.SidecarEnv = []string{fmt.Sprint("GOMAXPROCS=", h.gomaxprocs)}
	}
	o.GoDebug = h.godebug
	o.StallsOver = h.stalls
	if h.block < 0 {
		return o, fmt.Errorf("-block: %v, want 0 (%v) or more", h.block, hop.DefaultBlockWidth)
	}
	o.BlockWidth = h.block
	o.Threads = h.threads
	o.Pause = h.pause
	if h.logReaderPause < 0 {
		return o, fmt.Errorf("-log-reader-pause: %v, want 0 (the log to a file) or more", h.logReaderPause)
	}
	o.LogReaderPause = h.logReaderPause
	for _, f := range []struct {
		name, zero string
		v          int
		to         *int
	}{
		{"-close-every", "keep every connection", h.closeEvery, &o.CloseEvery},
		{"-prompt-bytes", "the small body", h.promptBytes, &o.PromptBytes},
		{"-idle-conns", "not measured", h.idleConns, &o.IdleConns},
		{"-idle-held", "none", h.idleHeld, &o.IdleHeld},
	} {
		if f.v < 0 {
			return o, fmt.Errorf("%s: %d, want 0 (%s) or more", f.name, f.v, f.zero)
		}
		*f.to = f.v
	}
	return o, nil
}

func hopMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hop", flag.ExitOnError)
	bin := fs.String("bin", "bin", "directory with tether-sidecar and modelsim")
	runs := fs.Int("runs", 1, "repeat the whole measurement this many times, each with fresh processes and every other one in the opposite order, and end with each proxy's median and range of its runs' own ratios to HAProxy, and tether's to "+hop.TetherBaseline+"'s when both ran (one run's p99 is a few bursts deep: docs/hop-cost.md \"How much one run decides\")")
	var h hopFlags
	h.register(fs, hopDefaults)
	// bench hop's own, as -runs: bench all's report has no place for it.
	fs.BoolVar(&h.threads, "threads", false, "a table of the time each tether sidecar ran on one thread and on its full count, and its changes, during each point (README \"Threads\"; the counters are read on the sidecar's admin listener as the point begins and ends)")
	fs.DurationVar(&h.pause, "pause", 0, "if set, stop each proxy (SIGSTOP) for this long a fifth into every point's measured part, then let it go on: how it comes back from the backlog (docs/hop-cost.md \"Falling behind, and coming back\"); direct is not paused")
	fs.IntVar(&h.closeEvery, "close-every", 0, "if set, every Nth request closes its connection once answered, as a client that ends its conversation does, and the next request opens a new one: each proxy then accepts, and sees hang up, rate/N connections a second (0: every connection is kept)")
	fs.IntVar(&h.promptBytes, "prompt-bytes", 0, "if set, each request's body is padded to this many bytes, as a later turn's prompt holding the conversation so far (a 10-turn chat: tens of KiB; a long context: hundreds); 0: a body of about 130 bytes")
	fs.DurationVar(&h.logReaderPause, "log-reader-pause", 0, "if set, each tether sidecar's stderr (its log) is a pipe the bench drains only every this long, taking all it holds at once, as a log reader that falls behind now and then: a sidecar logging more than the pipe's 64 KiB per pause finds it full (docs/hop-cost.md \"A log reader that falls behind\"); 0: a file")
	fs.IntVar(&h.idleConns, "idle-conns", 0, "if set, after the points: what idle keep-alive client connections cost each proxy, as a router's pool of connections to its sidecar between bursts: this many opened, each after one request, then as many more; the resident memory the second step added per connection, and the proxy's CPU while all sit idle (every proxy needs twice this many descriptors, and the bench as many again)")
	fs.IntVar(&h.idleHeld, "idle-held", 0, "if set, this many idle keep-alive client connections opened to every proxy before the points (each after one request) and held through them: the load beside a router's pool of idle connections (the bench needs this many descriptors per proxy, each proxy as many)")
	fs.DurationVar(&h.block, "block", hop.DefaultBlockWidth, "the span of due times each point's requests are resampled in for the p99 ratio's 90% interval (a block bootstrap; docs/hop-cost.md \"An interval for one run's p99\")")
	fs.DurationVar(&h.stalls, "stalls", 0, "if set, a table of each point's requests slower than this: alone, or in bursts of requests that waited out the same stop (docs/hop-cost.md \"Where the tail comes from\")")
	_ = fs.Parse(args)
	if *runs < 1 {
		return fmt.Errorf("-runs: %d, want 1 or more", *runs)
	}
	fmt.Println("bench hop", strings.Join(args, " "))
	var all []*hop.Results
	for i := range *runs {
		res, err := hopRun(ctx, *bin, h, i%2 == 1)
		if err != nil {
			return err
		}
		if *runs > 1 {
			fmt.Printf("\n=== run %d of %d\n", i+1, *runs)
		}
		res.Print(os.Stdout)
		all = append(all, res)
	}
	if *runs > 1 {
		for _, t := range hop.Spread(all) {
			t.Text(os.Stdout)
		}
		if t := hop.Paired(all); t != nil {
			t.Text(os.Stdout)
		}
		if t := hop.StallsSpread(all); t != nil {
			t.Text(os.Stdout)
		}
	}
	return nil
}

// hopRun is one measurement with its own processes, stopped at its end;
// reversed measures the proxies in the opposite order.
func hopRun(ctx context.Context, bin string, h hopFlags, reversed bool) (*hop.Results, error) {
	env, err := procs.NewEnv(bin)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	o, err := h.options(env)
	if err != nil {
		return nil, err
	}
	o.Step = func(s string) { fmt.Fprintln(os.Stderr, "…", s) }
	o.Reversed = reversed
	return hop.Run(ctx, o)
}

func parseRates(flag, list string) ([]float64, error) {
	var out []float64
	for r := range strings.SplitSeq(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flag, r)
		}
		out = append(out, v)
	}
	return out, nil
}

// String is the flags that reproduce these parameters.
func (h *hopFlags) String() string {
	s := fmt.Sprintf("-proxies %s -modes %s -rates %s -stream-rates %s -duration %v -warmup %v -max-rate=%t -probe %v -sessions %d -hop-backends %d",
		h.proxies, h.modes, h.rates, h.streamRates, h.duration, h.warmup, h.maxRate, h.probe, h.sessions, h.backends)
	if h.closeEvery > 0 {
		s += fmt.Sprintf(" -close-every %d", h.closeEvery)
	}
	if h.logReaderPause > 0 {
		s += fmt.Sprintf(" -log-reader-pause %v", h.logReaderPause)
	}
	if h.promptBytes > 0 {
		s += fmt.Sprintf(" -prompt-bytes %d", h.promptBytes)
	}
	if h.idleConns > 0 {
		s += fmt.Sprintf(" -idle-conns %d", h.idleConns)
	}
	if h.idleHeld > 0 {
		s += fmt.Sprintf(" -idle-held %d", h.idleHeld)
	}
	return s
}
