package affinity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Options are one run of the benchmark.
type Options struct {
	Backends Backends
	Workload Workload
	// Warmup fills the caches and starts the chats' lifetimes before
	// anything is measured; Duration is the measured window after it.
	Warmup, Duration time.Duration
	Policies         []Policy
	// Step, if set, is told when each policy starts (a progress bar).
	Step func(label string)
	// LogLevel of the sidecars' logs on stderr; info shows the access
	// log. The zero value is info: Defaults set warn.
	LogLevel slog.Level
}

// Defaults are the full run (make bench-affinity, about 3.5 minutes on 2
// cores). The workload holds more live session state than the backends'
// caches, and its load is skewed: agents' bursts of parallel calls, and
// another tenant's batch jobs on one backend. See README "Affinity
// policy" for the reasoning.
var Defaults = Options{
	Backends: Backends{N: 4, MaxRunning: 16, Prefill: 100 * time.Microsecond, Decode: 20 * time.Millisecond, CacheBlocks: 256},
	Workload: Workload{
		Agents: 3, AgentContext: 1000, AgentGrowth: 50, Parallel: 8, AgentTokens: 64, AgentThink: 2 * time.Second,
		ChatEvery: 150 * time.Millisecond, SystemTokens: 200, ChatFirstMin: 100, ChatFirstMax: 400,
		ChatTurnsMax: 6, ChatTurnAdded: 60, ChatTokens: 32, ChatThinkMin: 500 * time.Millisecond, ChatThinkMax: 3 * time.Second,
		BatchEvery: 12 * time.Second, BatchFor: 6 * time.Second, BatchShare: 0.9,
		Seed: 1,
	},
	Warmup: 6 * time.Second, Duration: 36 * time.Second,
	Policies: Policies, LogLevel: slog.LevelWarn,
}

// Quick is the smoke run of make bench-quick (about 25 s): every policy
// works, no figure is asserted.
var Quick = func() Options {
	o := Defaults
	o.Warmup, o.Duration = 500*time.Millisecond, 2*time.Second
	return o
}()

// Result is one policy's measurements over the measured window.
type Result struct {
	Policy   Policy
	Requests int // requests started in the window
	Errors   int
	FirstErr string
	P50, P99 time.Duration // TTFT of the window's successful requests

	// Token counts of the backends over the measured window, and of the
	// backends and the sidecars over the whole run (warm-up included).
	BackendPrompt, BackendCached       int64
	RunBackendPrompt, RunBackendCached int64
	SidecarPrompt, SidecarCached       float64
	Wired                              bool               // the sidecars export the usage counters
	Broken                             map[string]float64 // pins broken, by reason
	// PrefillBusy is the share of the backends' prefill capacity the
	// uncached prompt tokens of the window took: near 1, the queues are
	// what the TTFTs measure.
	PrefillBusy float64
}

// HitBackends is the prefix-cache hit rate the backends counted.
func (r *Result) HitBackends() float64 {
	return float64(r.BackendCached) / float64(max(r.BackendPrompt, 1))
}

// HitSidecar is the hit rate the sidecars read from the responses' usage
// over the whole run, and HitRun the backends' over the same requests.
func (r *Result) HitSidecar() float64 { return r.SidecarCached / max(r.SidecarPrompt, 1) }

func (r *Result) HitRun() float64 {
	return float64(r.RunBackendCached) / float64(max(r.RunBackendPrompt, 1))
}

// Sidecar reports whether the policy runs through tether.
func (r *Result) Sidecar() bool { return !r.Policy.RoundRobin }

// Run runs the policies one after the other, each on backends and
// replicas of its own (see StackHeader).
func Run(ctx context.Context, o Options) ([]*Result, error) {
	dir, err := os.MkdirTemp("", "bench-affinity-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f, err := startFleet(o.Backends, len(o.Policies))
	if err != nil {
		return nil, err
	}
	defer f.close()
	var out []*Result
	for i, p := range o.Policies {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if o.Step != nil {
			o.Step("affinity: " + p.Name)
		}
		r := &Result{Policy: p}
		out = append(out, r)
		s := &stack{tag: i, sims: f.sims[i], result: r}
		err := s.startPolicy(p, f.addrs, filepath.Join(dir, fmt.Sprint(i)), o.LogLevel)
		if err == nil {
			err = measure(s, o, time.Now())
		}
		s.close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return out, nil
}

// measure drives the workload through s's replicas from start and fills
// s.result.
func measure(s *stack, o Options, start time.Time) error {
	r := s.result
	tr := &http.Transport{MaxIdleConnsPerHost: 512, ResponseHeaderTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	d := &driver{w: o.Workload, urls: s.urls, tag: fmt.Sprint(s.tag), client: &http.Client{Transport: tr}, occupy: s.sims[0].Occupy}
	warm := start.Add(o.Warmup)
	var before counts
	var snapErr error
	snapped := make(chan struct{})
	go func() {
		defer close(snapped)
		time.Sleep(time.Until(warm))
		before, snapErr = s.counts()
	}()
	samples := d.run(start, warm.Add(o.Duration))
	<-snapped
	after, err := s.counts()
	if err = errors.Join(snapErr, err); err != nil {
		return fmt.Errorf("%s: %w", r.Policy.Name, err)
	}
	c := after.since(before)
	r.BackendPrompt, r.BackendCached, r.Broken = c.backendPrompt, c.backendCached, c.broken
	// The agreement is over the whole run: both count from zero and every
	// request has ended, so both have counted the very same requests
	// (over the window alone they would not: the backends count a request
	// when it is admitted, the sidecars when its response ends).
	r.RunBackendPrompt, r.RunBackendCached = after.backendPrompt, after.backendCached
	r.SidecarPrompt, r.SidecarCached, r.Wired = after.sidecarPrompt, after.sidecarCached, after.wired
	b := o.Backends
	r.PrefillBusy = float64(c.backendPrompt-c.backendCached) * b.Prefill.Seconds() / (float64(b.N) * o.Duration.Seconds())

	var ttfts []time.Duration
	for _, x := range samples {
		if x.start.Before(warm) {
			continue
		}
		r.Requests++
		if x.err != nil {
			if r.Errors++; r.FirstErr == "" {
				r.FirstErr = x.err.Error()
			}
			continue
		}
		ttfts = append(ttfts, x.ttft)
	}
	slices.Sort(ttfts)
	if n := len(ttfts); n > 0 {
		r.P50, r.P99 = ttfts[n/2], ttfts[n*99/100]
	}
	return nil
}
