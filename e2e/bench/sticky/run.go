package sticky

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/workload"
)

// Options of the stickiness benchmark.
type Options struct {
	Bin      string // tether-sidecar and modelsim
	Replicas []int  // R values
	Backends []int  // B values
	Policies []string
	// Workload is the workload of every B, or with ScaleWithBackends that
	// of the smallest B (see ForBackends).
	Workload          workload.Params
	ScaleWithBackends bool
	Model             Model
	// CacheSweep repeats SweepPolicies at the largest R and smallest B
	// with each of these prefix-cache sizes (blocks per backend), to show
	// how the cache's size relative to the workload decides the gaps.
	CacheSweep    []int
	SweepPolicies []string
	// Step is called before each configuration (progress).
	Step func(what string)
}

// Result is one policy at one (R, B).
type Result struct {
	Policy      string
	R, B        int
	CacheBlocks int
	Requests    int
	Errors      int
	FirstErr    error
	Prompt      int64 // prompt tokens, from the responses' usage
	Cached      int64 // cached prompt tokens, from the responses' usage
	SessionP50  float64
	SessionP10  float64 // per-session hit rates over conversations of 2+ turns
	// Stayed is the share of later turns (a conversation's second turn
	// on, its previous turn answered) that the backend of the previous
	// turn answered: the routing itself, which the backends' LRU caches
	// do not blur (the report's column "same backend").
	Stayed     float64
	TTFT       *loadgen.Histogram
	Throughput float64 // completed requests per second, first send to last answer
	Imbalance  float64 // max/mean requests per backend
	// TokenImbalance is max/mean prompt tokens per backend: what a placement that balances sessions
	// or requests can still leave uneven, since conversations differ in
	// length, and what decides which backend's prefix cache overflows.
	TokenImbalance float64
	Wall           time.Duration
	// Convs holds each conversation's answered turns, by its index in
	// the workload: what RatioInterval resamples.
	Convs map[int]*Conv
}

// PrefillBusy is the share of the run the backends' prefill lanes were
// busy, on average: uncached prompt tokens × prefill time per token over
// B × the run's wall time.
func (r *Result) PrefillBusy(m Model) float64 {
	if r.Wall <= 0 {
		return 0
	}
	busy := time.Duration(r.Prompt-r.Cached) * m.PrefillPerToken
	return busy.Seconds() / (float64(r.B) * r.Wall.Seconds())
}

// HitRate is cached prompt tokens over prompt tokens.
func (r *Result) HitRate() float64 { return float64(r.Cached) / float64(max(r.Prompt, 1)) }

// ForBackends is the workload played against b backends: o.Workload,
// or with ScaleWithBackends its conversations scaled by b / the smallest
// B, so that every backend is offered the same load whatever B is (a
// fleet sized to its traffic: twice the backends serve twice the
// conversations; it doubles the machine's work too, which is why a larger
// B's policies run in groups, see groups). The same seed draws the same
// first conversations, so a larger B's workload holds the smaller one's.
func (o Options) ForBackends(b int) workload.Params {
	w := o.Workload
	if o.ScaleWithBackends && len(o.Backends) > 0 {
		w.Conversations = w.Conversations * b / slices.Min(o.Backends)
	}
	return w
}

// Run measures every (R, B): the policies' stacks are started, then the
// same workload is played against each of them at once, so that the
// policies share the machine's noise of the same seconds (at a scaled B,
// in groups: see groups). Then the cache sweep, whose results come second.
func Run(ctx context.Context, o Options) (main, sweep []*Result, err error) {
	// A configuration's processes stop while the next one starts: a
	// gossip ring whose members all stop at once waits out each one's
	// leave timeout, idle seconds the next configuration need not wait.
	var closing sync.WaitGroup
	defer closing.Wait()
	step := func(s string) {
		if o.Step != nil {
			o.Step(s)
		}
	}
	for _, b := range o.Backends {
		w := o.ForBackends(b)
		convs := workload.Generate(w)
		groups := o.groups(b)
		for _, r := range o.Replicas {
			for i, g := range groups {
				step(fmt.Sprintf("sticky R=%d B=%d: %d policies at once (group %d of %d)", r, b, len(g), i+1, len(groups)))
				og := o
				og.Policies = g
				res, err := runConfig(ctx, og, w, convs, r, b, &closing)
				if err != nil {
					return nil, nil, fmt.Errorf("cell R=%d B=%d: %w", r, b, err)
				}
				main = append(main, res...)
			}
		}
	}
	r, b := slices.Max(o.Replicas), slices.Min(o.Backends)
	w := o.ForBackends(b)
	convs := workload.Generate(w)
	for _, c := range o.CacheSweep {
		step(fmt.Sprintf("sticky cache sweep: %d blocks per backend, R=%d B=%d", c, r, b))
		so := o
		so.Model.CacheBlocks, so.Policies = c, o.SweepPolicies
		res, err := runConfig(ctx, so, w, convs, r, b, &closing)
		if err != nil {
			return nil, nil, fmt.Errorf("cache %d blocks: %w", c, err)
		}
		sweep = append(sweep, res...)
	}
	return main, sweep, nil
}

// targetPolicies are the policies the targets compare: they run
// in the first group, so every target's ratio is of the same seconds.
var targetPolicies = []string{RoundRobin, TetherMemory, TetherRedis, TetherGossip, Oracle}

// groups splits the policies into the groups measured one after the
// other at b backends. The machine carries at once at most about the load
// of every policy at the smallest B: with the workload scaled, b backends
// get b / the smallest B times the conversations, and a 2-core machine
// running every policy on twice the requests queues on its own CPU, which
// the client would measure as time to first token. The target policies
// come first, so their ratios are measured together.
func (o Options) groups(b int) [][]string {
	ps := slices.Clone(o.Policies)
	if !o.ScaleWithBackends || len(o.Backends) == 0 || b <= slices.Min(o.Backends) {
		return [][]string{ps}
	}
	rank := func(p string) int {
		if i := slices.Index(targetPolicies, p); i >= 0 {
			return i
		}
		return len(targetPolicies)
	}
	slices.SortStableFunc(ps, func(x, y string) int { return rank(x) - rank(y) })
	per := max(1, (len(ps)*slices.Min(o.Backends)+b-1)/b) // rounded up
	return slices.Collect(slices.Chunk(ps, per))
}

// Runs is how many runs Run makes, each announced by Step: one per group
// of policies at every (R, B), one per cache size of the sweep.
func (o Options) Runs() int {
	n := len(o.CacheSweep)
	for _, b := range o.Backends {
		n += len(o.Replicas) * len(o.groups(b))
	}
	return n
}

// runConfig measures one (R, B); its processes are stopped in closing.
func runConfig(ctx context.Context, o Options, w workload.Params, convs []workload.Conversation, r, b int, closing *sync.WaitGroup) ([]*Result, error) {
	env, err := procs.NewEnv(o.Bin)
	if err != nil {
		return nil, err
	}
	defer closing.Go(env.Close)
	stacks := make([]*stack, len(o.Policies))
	errs := make([]error, len(o.Policies))
	var wg sync.WaitGroup
	for i, p := range o.Policies {
		wg.Go(func() { stacks[i], errs[i] = startStack(env, p, r, b, o.Model) })
	}
	wg.Wait()
	defer func() {
		for _, s := range stacks {
			if s != nil {
				s.close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	results := make([]*Result, len(stacks))
	for i, s := range stacks {
		wg.Go(func() {
			samples := workload.Drive(ctx, convs, w, s.urls)
			results[i] = summarize(s.policy, r, b, samples)
			results[i].CacheBlocks = o.Model.CacheBlocks
			results[i].Imbalance, errs[i] = imbalance(s.backends)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, errors.Join(errs...)
}

// summarize reduces one policy's samples, in conversation and turn order
// as Drive returns them, to its Result.
func summarize(policy string, r, b int, samples []workload.Sample) *Result {
	res := &Result{Policy: policy, R: r, B: b, TTFT: &loadgen.Histogram{}, Convs: map[int]*Conv{}}
	perBackend := map[string]int64{}
	var first, last time.Time
	var later, stayed int
	for i, s := range samples {
		if i > 0 && s.Err == nil && samples[i-1].Conv == s.Conv && samples[i-1].Err == nil {
			later++
			if s.Backend == samples[i-1].Backend {
				stayed++
			}
		}
		res.Requests++
		if s.Err != nil {
			res.Errors++
			if res.FirstErr == nil {
				res.FirstErr = s.Err
			}
			continue
		}
		res.TTFT.Record(s.TTFT)
		res.Prompt += int64(s.Prompt)
		res.Cached += int64(s.Cached)
		perBackend[s.Backend] += int64(s.Prompt)
		c := res.Convs[s.Conv]
		if c == nil {
			c = &Conv{}
			res.Convs[s.Conv] = c
		}
		c.Prompt, c.Cached, c.TTFT = c.Prompt+int64(s.Prompt), c.Cached+int64(s.Cached), append(c.TTFT, s.TTFT)
		if first.IsZero() || s.Sent.Before(first) {
			first = s.Sent
		}
		if end := s.Sent.Add(s.Done); end.After(last) {
			last = end
		}
	}
	var rates []float64
	for _, c := range res.Convs {
		if len(c.TTFT) >= 2 { // answered turns: one TTFT each
			rates = append(rates, HitRateStat([]*Conv{c}))
		}
	}
	if later > 0 {
		res.Stayed = float64(stayed) / float64(later)
	}
	slices.Sort(rates)
	if n := len(rates); n > 0 {
		res.SessionP50, res.SessionP10 = rates[n/2], rates[n/10]
	}
	res.TokenImbalance = maxOverMean(perBackend, b)
	if res.Wall = last.Sub(first); res.Wall > 0 {
		res.Throughput = float64(res.Requests-res.Errors) / res.Wall.Seconds()
	}
	return res
}

// maxOverMean is the largest of n's values over their mean across b
// backends (one that n does not name had none); 0 for nothing at all.
func maxOverMean(n map[string]int64, b int) float64 {
	var total, most int64
	for _, v := range n {
		total += v
		most = max(most, v)
	}
	if total == 0 || b == 0 {
		return 0
	}
	return float64(most) / (float64(total) / float64(max(b, len(n))))
}

// imbalance reads every backend's request count: max over mean.
func imbalance(backends []string) (float64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	requests := map[string]int64{}
	for _, b := range backends {
		resp, err := c.Get("http://" + b + "/sim/stats")
		if err != nil {
			return 0, err
		}
		var st struct {
			Requests int64 `json:"requests"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("%s/sim/stats: %w", b, err)
		}
		requests[b] = st.Requests
	}
	return maxOverMean(requests, len(backends)), nil
}
