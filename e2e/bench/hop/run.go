package hop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
	"github.com/tetherproxy/tether/e2e/bench/procs"
)

// Options of one hop benchmark.
type Options struct {
	Env     *procs.Env
	Proxies []string  // from AllProxies; direct is always added first
	Modes   []Mode    // non-streaming, streaming
	Rates   []float64 // non-streaming requests per second, each measured for every proxy
	// StreamRates are the rates of streamed requests (each is
	// StreamEvents events, so a tenth of the non-streaming rates keeps
	// the events per second comparable).
	StreamRates []float64
	Backends    int // modelsim processes (default 3)
	Sessions    int // distinct X-Session-ID values (default 1000)
	// Headers are the requests' fields besides Host, Content-Type,
	// X-Session-ID and Content-Length: HeadersPlain (none, the default)
	// or HeadersSDK.
	Headers string
	// CloseEvery, if set, makes every CloseEvery-th request close its
	// connection once answered (a client ending its conversation); the
	// next request on that address opens a new one.
	CloseEvery int
	// PromptBytes, if set, pads each request's body to this many bytes
	// (a later turn's prompt, the conversation so far); unset, the body
	// is about 130 bytes.
	PromptBytes int
	Warmup      time.Duration
	Duration    time.Duration
	// MaxRate searches the highest rate each proxy sustains with the
	// p99 added over direct's < P99Limit, no errors and the offered rate
	// completed.
	MaxRate   bool
	P99Limit  time.Duration
	ProbeTime time.Duration // measured time of one search probe
	// SidecarEnv is added to every tether-sidecar's environment, and the
	// Go ReverseProxy's, relay's and minimal proxy's.
	SidecarEnv []string
	// GoDebug, if set, is the GODEBUG of every Go proxy and of the
	// backends (modelsim). Unset, the sidecars set their own
	// (sysmon.GODEBUG) and the other Go processes are given the same.
	GoDebug string
	// StallsOver, if set, keeps every request's latency and groups those
	// over it (Point.Stalls, Results.StallsTable).
	StallsOver time.Duration
	// BlockWidth is the span of due times a point's requests are
	// resampled in for QuantileRatioInterval (default
	// DefaultBlockWidth).
	BlockWidth time.Duration
	// Threads reads each tether sidecar's thread counters as a point's
	// measured part begins and ends (Point.Threads, Results.ThreadsTable).
	// The reads cost the sidecar a scrape's CPU (a few milliseconds)
	// within the part.
	Threads bool
	// Pause, if set, stops the proxy measured (SIGSTOP to its process
	// group) for this long a fifth into each point's measured part, then
	// lets it go on: how each proxy comes back from the backlog (README
	// "Falling behind, and coming back"). Direct is not paused.
	Pause time.Duration
	// LogReaderPause, if set, gives each measured tether sidecar a log
	// reader that falls behind: its stderr is a pipe the bench drains
	// only every LogReaderPause (procs.Sidecar.StderrPause), where it is
	// a file otherwise.
	LogReaderPause time.Duration
	// IdleConns, if set, measures after the points what idle keep-alive
	// client connections cost each proxy (Results.Idle, IdleTable):
	// IdleConns opened, then IdleConns more.
	IdleConns int
	// IdleHeld, if set, opens this many idle keep-alive connections to
	// every proxy before the points (each after one request) and holds
	// them through all of them: the load measured beside a router's pool
	// of idle connections (the collector scans each one's goroutine, the
	// poller holds each one's descriptor).
	IdleHeld int
	// IdleFor is how long the idle connections sit before their memory
	// is read, and then how long the proxy's CPU is counted (default 5
	// s: long enough for a Go proxy whose heap grew by the connections'
	// buffers to have collected it).
	IdleFor time.Duration
	// BaselineBinary is the tether-sidecar that TetherBaseline runs.
	BaselineBinary string
	// Reversed measures the proxies in the opposite order: `bench hop
	// -runs` sets it on every other run, so that over the runs each
	// proxy is measured as often early as late in a point's sequence (a
	// slot of its own reads a few percent differently on this machine;
	// docs/hop-cost.md "How much one run decides").
	Reversed bool
	// Step is called before every measurement (progress reporting).
	Step func(what string)
	// Skip is told, at the end of each mode's search, how many of the
	// ClimbProbes planned for it were not needed.
	Skip func(n int)
}

func (o *Options) setDefaults() {
	if o.Backends == 0 {
		o.Backends = 3
	}
	if o.Sessions == 0 {
		o.Sessions = 1000
	}
	if o.BlockWidth == 0 {
		o.BlockWidth = DefaultBlockWidth
	}
	if o.P99Limit == 0 {
		o.P99Limit = 5 * time.Millisecond
	}
	if o.ProbeTime == 0 {
		o.ProbeTime = 2 * time.Second
	}
	if o.IdleFor == 0 {
		o.IdleFor = 5 * time.Second
	}
	if o.Skip == nil {
		o.Skip = func(int) {}
	}
	if o.Step == nil {
		o.Step = func(string) {}
	}
	o.Proxies = append([]string{Direct}, slices.DeleteFunc(slices.Clone(o.Proxies), func(p string) bool { return p == Direct })...)
}

// order is the order the proxies are measured in at a mode's ri-th rate:
// as listed at even ones, the opposite at odd ones; the other way round
// when Reversed.
func (o *Options) order(ri int) []string {
	order := slices.Clone(o.Proxies)
	if (ri%2 == 1) != o.Reversed {
		slices.Reverse(order)
	}
	return order
}

// RatesOf is the offered rates of mode's points.
func (o *Options) RatesOf(m Mode) []float64 {
	if m == Streaming {
		return o.StreamRates
	}
	return o.Rates
}

// Point is one proxy at one rate in one mode.
type Point struct {
	Proxy string
	Mode  Mode
	Rate  float64
	Res   *loadgen.Result
	// CPUPer1k is the proxy process's CPU time (utime+stime) per 1,000
	// requests over the measured part; AuxCPUPer1k that of what it needs
	// besides (redis-server, the other ring members).
	CPUPer1k, AuxCPUPer1k time.Duration
	// SysCPUPer1k is the part of CPUPer1k spent in the kernel (stime).
	SysCPUPer1k time.Duration
	PeakRSS     int64   // the proxy's VmHWM after this point, bytes
	Stalls      *Stalls // with Options.StallsOver
	// Blocks are the point's successful requests in blocks of
	// Options.BlockWidth by due time, for QuantileRatioInterval.
	Blocks *loadgen.Blocks
	// Threads: what the thread controller did (with Options.Threads; nil
	// for other proxies and for a sidecar on a fixed count).
	Threads *Threads
}

// MaxRate is the result of one rate search.
type MaxRate struct {
	Proxy  string
	Mode   Mode
	Rate   float64 // highest rate that passed; 0 if none did
	Capped bool    // the search stopped at its ceiling, not at a failure
	Probes int
	// Stop is the confirmed failure that ended the search (nil when
	// Capped): what a reader needs to tell a proxy's tail from the
	// machine's minute or a backlog.
	Stop *Failure
}

// Failure is a rung's second, confirming probe that did not pass: its
// rate and the rules of passes it broke, as the tables print them.
type Failure struct {
	Rate  float64
	Broke []string
}

func (f *Failure) String() string {
	return fmt.Sprintf("at %.0f/s: %s", f.Rate, strings.Join(f.Broke, ", "))
}

// Label is the rate as the tables print it: "≥ 8000" at the ladder's
// top, "< 1000" when even the first rung failed.
func (m MaxRate) Label() string {
	switch {
	case m.Capped:
		return fmt.Sprintf("≥ %.0f", m.Rate)
	case m.Rate == 0:
		return fmt.Sprintf("< %.0f", rungsOf(m.Mode)[0])
	}
	return fmt.Sprintf("%.0f", m.Rate)
}

// RatioTo is m's rate over h's as the tables print it: a bound when
// either search ended at the ladder's top, "—" when either failed even
// the first rung (the ratio of "< 1000" to a rate is not a number).
func (m MaxRate) RatioTo(h MaxRate) string {
	switch {
	case m.Rate == 0 || h.Rate == 0 || m.Capped && h.Capped:
		return "—"
	case m.Capped:
		return "≥ " + Ratio(m.Rate, h.Rate)
	case h.Capped:
		return "≤ " + Ratio(m.Rate, h.Rate)
	}
	return Ratio(m.Rate, h.Rate)
}

// Results of a hop benchmark.
type Results struct {
	Opts   Options
	Points []Point
	Max    []MaxRate
	Idle   []IdleCost // with Options.IdleConns, in the proxies' order
}

// Point returns the measurement of proxy at rate in mode, or nil.
func (r *Results) Point(proxy string, mode Mode, rate float64) *Point {
	for i := range r.Points {
		if p := &r.Points[i]; p.Proxy == proxy && p.Mode == mode && p.Rate == rate {
			return p
		}
	}
	return nil
}

// MaxOf returns proxy's rate search in mode, or nil.
func (r *Results) MaxOf(proxy string, mode Mode) *MaxRate {
	for i := range r.Max {
		if m := &r.Max[i]; m.Proxy == proxy && m.Mode == mode {
			return m
		}
	}
	return nil
}

// Run starts the backends and every proxy, then measures each rate and
// mode for every proxy in turn (the order of proxies reversed at every
// other rate, so that none always runs right after the same other, and
// at every rate when Reversed).
func Run(ctx context.Context, o Options) (*Results, error) {
	o.setDefaults()
	// The backends are one modelsim process (one backend per listener),
	// without a log line per request and with the runtime setting the
	// sidecars run with: on 2 cores whatever the backends spend is taken
	// from the proxy measured (README "Benchmarks").
	ids := make([]string, o.Backends)
	for i := range ids {
		ids[i] = fmt.Sprint("hop-backend-", i)
	}
	_, backends, err := o.Env.Modelsims(ids, []string{o.goDebugEnv()},
		"--prefill-per-token", "0", "--decode-per-token", "0", "--max-running", "100000", "--log-requests=false")
	if err != nil {
		return nil, err
	}
	targets := map[string]*target{}
	for _, name := range o.Proxies {
		t, err := startTarget(&o, name, backends)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		targets[name] = t
	}
	if o.IdleHeld > 0 {
		o.Step(fmt.Sprintf("hop: %d idle connections to each proxy, held through the points", o.IdleHeld))
		held, err := holdIdle(ctx, o, targets)
		defer closeAll(held)
		if err != nil {
			return nil, err
		}
	}
	res := &Results{Opts: o}
	for _, mode := range o.Modes {
		for ri, rate := range o.RatesOf(mode) {
			for _, name := range o.order(ri) {
				o.Step(fmt.Sprintf("hop %s %s %.0f/s", name, mode, rate))
				p, err := measure(ctx, targets[name], backends, o, mode, rate, o.Warmup, o.Duration)
				if err != nil {
					return nil, err
				}
				if p.Res.OK == 0 {
					return nil, fmt.Errorf("%s %s at %.0f/s: no successful request (first error: %v)", name, mode, rate, p.Res.FirstErr)
				}
				res.Points = append(res.Points, *p)
			}
		}
		if o.MaxRate {
			max, err := climb(o, mode, func(name string, rate float64) (*loadgen.Result, error) {
				p, err := measure(ctx, targets[name], backends, o, mode, rate, o.ProbeTime/4, o.ProbeTime)
				if err != nil {
					return nil, err
				}
				return p.Res, nil
			})
			if err != nil {
				return nil, err
			}
			res.Max = append(res.Max, max...)
		}
	}
	if o.IdleConns > 0 {
		for _, name := range o.order(0) {
			if name == Direct {
				continue
			}
			o.Step(fmt.Sprintf("hop %s %d idle connections", name, 2*o.IdleConns))
			c, err := measureIdle(ctx, targets[name], o)
			if err != nil {
				return nil, err
			}
			res.Idle = append(res.Idle, c)
		}
	}
	return res, nil
}

// measure runs one constant-rate load against t.
func measure(ctx context.Context, t *target, backends []string, o Options, mode Mode, rate float64, warmup, dur time.Duration) (*Point, error) {
	for _, p := range append([]*procs.Process{t.proc}, t.aux...) {
		if p == nil {
			continue
		}
		if err := p.Exited(); err != nil {
			return nil, err
		}
	}
	extra, err := HeaderLines(o.Headers)
	if err != nil {
		return nil, err
	}
	c := newClient(t, backends, o.Sessions, mode, extra, o.PromptBytes)
	c.closeEvery = o.CloseEvery
	defer c.close()
	var cpu0, aux0 procs.Usage
	usage := func() (proxy, aux procs.Usage) {
		if t.proc != nil {
			proxy = t.proc.Usage()
		}
		for _, p := range t.aux {
			aux.CPU += p.Usage().CPU
		}
		return
	}
	var probe *threadsProbe
	if o.Threads && t.admin != "" {
		probe = &threadsProbe{admin: t.admin}
	}
	paused := func() {} // returns once a pause is over
	res := loadgen.Run(ctx, loadgen.Config{Rate: rate, Warmup: warmup, Duration: dur,
		OnMeasure: func() {
			cpu0, aux0 = usage()
			if o.Pause > 0 && t.proc != nil {
				paused = pause(ctx, t.proc, dur/5, o.Pause)
			}
			if probe != nil {
				probe.begin(ctx)
			}
		}, Samples: true}, c.do)
	paused()
	cpu1, aux1 := usage()
	p := &Point{Proxy: t.name, Mode: mode, Rate: rate, Res: res}
	if probe != nil {
		th, err := probe.end(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%s: reading its thread counters: %w", t.name, err)
		}
		p.Threads = th
	}
	p.Blocks = loadgen.BlocksOf(res.Samples, o.BlockWidth)
	if o.StallsOver > 0 {
		s := StallsOf(res.Samples, o.StallsOver, dur)
		p.Stalls = &s
	}
	res.Samples = nil // 16 bytes a request; the blocks hold what is read later
	if res.Sent > 0 {
		per1k := func(d time.Duration) time.Duration { return d * 1000 / time.Duration(res.Sent) }
		spent := cpu1.Since(cpu0)
		p.CPUPer1k, p.SysCPUPer1k = per1k(spent.CPU), per1k(spent.System)
		p.AuxCPUPer1k = per1k(aux1.Since(aux0).CPU)
	}
	p.PeakRSS = cpu1.PeakRSS // the high-water mark, read with the CPU time
	return p, ctx.Err()
}

// passes reports whether a run sustained its rate: no errors, (nearly)
// every offered request completed in time, and the p99 the proxy added
// over direct's at the same rung under the limit. Added, not end to end:
// on a shared 2-core machine direct's own p99 (no proxy at all) crosses
// 5 ms at 500 req/s in some minutes, and a 50-event stream's always does,
// so an end-to-end limit would rank the machine, not the proxies.
func passes(r *loadgen.Result, limit, direct time.Duration) bool {
	return len(broken(r, limit, direct)) == 0
}

// broken lists the rules of passes that r broke, as the tables print
// them; none when it passed.
func broken(r *loadgen.Result, limit, direct time.Duration) []string {
	var out []string
	if added := r.Latency.Quantile(0.99) - direct; added >= limit {
		out = append(out, "p99 +"+Ms(added)+" ms")
	}
	if r.Errors > 0 {
		out = append(out, fmt.Sprintf("%d errors", r.Errors))
	}
	switch {
	case r.OK == 0:
		out = append(out, "no successful request")
	case r.Completed < 0.95*r.Offered:
		out = append(out, fmt.Sprintf("%.0f%% of the rate completed", 100*r.Completed/r.Offered))
	}
	return out
}

// Ladders are the rates the search climbs, per mode. They start where
// every proxy of the bench, direct included, has passed on 2 cores (500
// and 50 requests/s added only probes): a proxy failing the first rung
// is reported below it.
var (
	ladder       = []float64{1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000}
	streamLadder = []float64{100, 200, 300, 500, 750, 1000, 1500, 2000}
)

// ClimbProbes is the most probes a search of one mode makes over proxies
// (direct included): every proxy at every rung, each failing its probe
// there and confirmed (direct and the proxy again), a confirmation that
// passes keeping it on the ladder. A progress bar plans this many and is
// told (Options.Skip) how many were not needed: fewer would let a search
// run into the steps planned for what follows.
func ClimbProbes(proxies int, mode Mode) int {
	rungs := len(rungsOf(mode))
	return rungs*proxies + 2*rungs*(proxies-1)
}

// rungsOf is mode's ladder.
func rungsOf(mode Mode) []float64 {
	if mode == Streaming {
		return streamLadder
	}
	return ladder
}

// climb finds each proxy's highest sustained rate: every proxy still
// passing is probed at each rung of the ladder, in turn (the order
// reversed at every other rung, as the measured points are), so that all
// of them meet the machine's noise of the same minutes; a proxy drops out
// at its first failed rung and its result is the rung below. A failure
// is confirmed before it counts: direct and the proxy are probed once
// more, back to back (a probe's p99 is its few slowest requests, and one
// stall of a shared machine is enough to fail it). measureAt runs one
// probe of a proxy at a rate.
func climb(o Options, mode Mode, measureAt func(name string, rate float64) (*loadgen.Result, error)) ([]MaxRate, error) {
	rungs := rungsOf(mode)
	out := make([]MaxRate, len(o.Proxies))
	defer func() {
		probes := 0
		for _, m := range out {
			probes += m.Probes
		}
		o.Skip(ClimbProbes(len(o.Proxies), mode) - probes)
	}()
	climbing := map[string]bool{}
	for i, name := range o.Proxies {
		out[i] = MaxRate{Proxy: name, Mode: mode, Capped: true}
		climbing[name] = true
	}
	for ri, rate := range rungs {
		order := slices.Clone(o.Proxies)
		if ri%2 == 1 {
			slices.Reverse(order)
		}
		var direct time.Duration
		// Direct first, and at every rung: the others are measured against it.
		order = append([]string{Direct}, slices.DeleteFunc(order, func(p string) bool { return p == Direct })...)
		probe := func(name string) (*loadgen.Result, error) {
			o.Step(fmt.Sprintf("hop %s %s: highest rate, %.0f/s", name, mode, rate))
			res, err := measureAt(name, rate)
			if err != nil {
				return nil, err
			}
			out[slices.Index(o.Proxies, name)].Probes++
			if name == Direct {
				direct = res.Latency.Quantile(0.99)
			}
			return res, nil
		}
		for _, name := range order {
			if !climbing[name] && name != Direct {
				continue
			}
			res, err := probe(name)
			if err != nil {
				return nil, err
			}
			if !climbing[name] {
				continue
			}
			if !passes(res, o.P99Limit, direct) && name != Direct {
				// Confirm against a fresh direct.
				if _, err := probe(Direct); err != nil {
					return nil, err
				}
				if res, err = probe(name); err != nil {
					return nil, err
				}
			}
			i := slices.Index(o.Proxies, name)
			if passes(res, o.P99Limit, direct) {
				out[i].Rate = rate
			} else {
				climbing[name], out[i].Capped = false, false
				out[i].Stop = &Failure{Rate: rate, Broke: broken(res, o.P99Limit, direct)}
			}
		}
		if !slices.ContainsFunc(o.Proxies, func(p string) bool { return climbing[p] }) {
			break
		}
	}
	return out, nil
}
