package affinity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
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
}

// Defaults are the full run (make bench-affinity, about 4 minutes on 2
// cores). The workload holds more live session state than the backends'
// caches: see README "Affinity policy" for the reasoning.
var Defaults = Options{
	Backends: Backends{N: 4, MaxRunning: 4, Prefill: 100 * time.Microsecond, Decode: 5 * time.Millisecond, CacheBlocks: 512},
	Workload: Workload{
		Agents: 3, AgentContext: 1500, AgentGrowth: 150, Parallel: 8, AgentTokens: 48, AgentThink: time.Second,
		ChatEvery: 60 * time.Millisecond, SystemTokens: 200, ChatFirstMin: 100, ChatFirstMax: 400,
		ChatTurnsMax: 6, ChatTurnAdded: 60, ChatTokens: 24, ChatThinkMin: 500 * time.Millisecond, ChatThinkMax: 3 * time.Second,
		Seed: 1,
	},
	Warmup: 10 * time.Second, Duration: 30 * time.Second,
	Policies: Policies,
}

// Quick is the smoke run of make bench-quick: every policy works, no
// figure is asserted.
var Quick = func() Options {
	o := Defaults
	o.Warmup, o.Duration = time.Second, 3*time.Second
	return o
}()

// Result is one policy's measurements over the measured window.
type Result struct {
	Policy   Policy
	Affinity string // the affinity block it ran with ("" for round robin)
	Skipped  string // why it did not run (an optional policy this build lacks)
	Requests int    // requests started in the window
	Errors   int
	FirstErr string
	P50, P99 time.Duration // TTFT of the window's successful requests

	BackendPrompt, BackendCached int64
	SidecarPrompt, SidecarCached float64
	Wired                        bool               // the sidecars export the usage counters
	Broken                       map[string]float64 // pins broken, by reason
}

// HitBackends is the prefix-cache hit rate the backends counted.
func (r *Result) HitBackends() float64 {
	return float64(r.BackendCached) / float64(max(r.BackendPrompt, 1))
}

// HitSidecar is the hit rate the sidecars read from the responses' usage.
func (r *Result) HitSidecar() float64 { return r.SidecarCached / max(r.SidecarPrompt, 1) }

// Sidecar reports whether the policy runs through tether.
func (r *Result) Sidecar() bool { return !r.Policy.RoundRobin }

// Run runs every policy in turn, each on fresh backends.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	var out []*Result
	for _, p := range o.Policies {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if o.Step != nil {
			o.Step("affinity: " + p.Name)
		}
		r, err := runPolicy(p, o)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runPolicy(p Policy, o Options) (*Result, error) {
	r := &Result{Policy: p}
	aff, err := accepted(p)
	if err != nil {
		if p.Optional {
			r.Skipped = "this build's config does not accept `" + p.Affinity + "`"
			return r, nil
		}
		return nil, err
	}
	r.Affinity = aff
	dir, err := os.MkdirTemp("", "bench-affinity-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s := &stack{}
	defer s.close()
	backends, err := s.startBackends(o.Backends)
	if err != nil {
		return nil, err
	}
	if err := s.startPolicy(p, aff, backends, dir); err != nil {
		return nil, err
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 512, ResponseHeaderTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	d := &driver{w: o.Workload, urls: s.urls, client: &http.Client{Transport: tr}}
	start := time.Now()
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
		return nil, err
	}
	c := after.since(before)
	r.BackendPrompt, r.BackendCached = c.backendPrompt, c.backendCached
	r.SidecarPrompt, r.SidecarCached, r.Wired, r.Broken = c.sidecarPrompt, c.sidecarCached, c.wired, c.broken

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
	return r, nil
}
