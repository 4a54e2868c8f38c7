package report

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/sticky"
	"github.com/tetherproxy/tether/e2e/bench/table"
	"github.com/tetherproxy/tether/e2e/bench/workload"
)

// toolVersion is the first line of `name -v`, trimmed to the version.
func toolVersion(name string) string {
	out, _ := exec.Command(name, "-v").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"/"); ok { // nginx/1.22.1
			return v
		}
		if len(f) > 0 && f[0] >= '0' && f[0] <= '9' && strings.Contains(f, ".") { // HAProxy version 2.6.12-1
			return f
		}
	}
	return "(version unknown)"
}

func stickySetup(in *Input) string {
	o := in.StickyOpts
	m := o.Model
	w := o.Workload
	convs := workload.Generate(w)
	return fmt.Sprintf(`**Model.** Every backend is a modelsim server (a policy's B backends are one modelsim process with a listener, cache, queue and counters per backend, on one thread: the simulated GPUs' clocks are simulated, and dozens of Go runtimes would only take the 2 cores from the routers measured) simulating one GPU serving a Llama-3.1-8B-class model: %v per uncached prompt token, computed one request at a time (`+"`--serial-prefill`"+`: prefill is the GPU's compute, shared by all requests, as vLLM's token budget per step shares it), and %v per output token, decoded in parallel (batched). Sources: prefill of an 8B Llama takes 15.7 ms for 1,000 input tokens on a GH200 (16 µs/token) and 48 ms for 500 tokens on an A100-80GB (97 µs/token) at concurrency 1 (NVIDIA NIM "Llama 3.1 Nemotron Safety Guard 8B" performance pages, versions 1.14.0 and 1.10.1); %v is an H100 at a realistic utilisation between the two. Decode: Llama-3.1-8B-Instruct on one H100 has an inter-token latency of 5.19 ms at 25 concurrent requests and 5.91 ms at 50 (NVIDIA NIM LLM benchmarking, "Performance", NIM 1.8.0). So prefilling one token costs about 1/%.0f of decoding one, the ratio that decides what a cache hit saves. Each backend has a prefix cache of %d blocks of 16 tokens (%d tokens, LRU, modelsim's default), hashed per block as vLLM's prefix cache is. A real H100-80GB serving an 8B model in bf16 has room for about 450,000 tokens of KV cache (128 KiB per token: 32 layers × 8 KV heads × 128 dimensions × K and V × 2 bytes), but it also serves hundreds of conversations, not the few dozen of this scaled-down fleet: what decides the hit rates is the conversations' working set relative to the cache (`+"`-cache-sweep`"+` measures other sizes).

**Workload** (`+"`%s`"+`, at B = %d; %s): %s. Retrieval-augmented chat: a conversation's turns share one system prompt of %d tokens (the assistant's instructions, cached on every backend after its first use; the share of prompt tokens it makes decides how far apart hit rates can land, see *Why the gaps are this size*); each turn sends the whole history (user messages and the model's earlier answers) plus a new user message carrying retrieved passages; answers are streamed (the first %d tokens; the rest of an answer's decode time is waited out by the client and its full text joins the history, so prompts and pacing are those of full answers at a fraction of the SSE events a 2-core machine can carry). Why this workload: prompts of several thousand tokens, typical of RAG and agents, make a turn's uncached prefill cost about 30 ms (the new user message and the previous answer) to 200 ms (a history recomputed) of simulated GPU time, above the tens of milliseconds this 2-core machine's CPU adds to a request with every policy's processes running at once (more when the machine is loaded besides), so the simulated GPU, not the machine, decides most of TTFT; and conversations arrive fast enough that round robin's prefill lanes are busy about half the run (column *prefill busy*), the load of a fleet sized to its traffic, where the tokens a policy recomputes turn into queueing, as they do on real GPUs. %s Tokens are short base-36 words after one conversation tag: the prefix cache chains each block's hash to the blocks before it, so only the tag needs to be unique, and short words keep long prompts cheap for the machine. Each request goes to a router replica drawn at random, as behind a Kubernetes Service. TTFT is the time to the first token event at the client; hit rate is the sum of usage.prompt_tokens_details.cached_tokens over the sum of usage.prompt_tokens, from the responses; a session's hit rate is the same over its own turns (conversations of two turns or more); same backend is the share of a conversation's later turns answered by the backend that answered its previous turn (X-Modelsim-Id; the routing alone, which no cache's eviction moves); imbalance is the most requests one backend served over the mean, token imbalance the most prompt tokens one backend was sent over the mean (sessions dealt evenly can still leave it uneven: conversations differ in length, and the backend sent the most tokens overflows its prefix cache first); prefill busy is the uncached tokens' prefill time over B × the run's wall time.

**Policies.** Round robin, least outstanding (each replica's own in-flight counts, no stickiness), consistent hashing on X-Session-ID (160 points per backend on a crc32 ring, as nginx's ketama; every replica computes the same) and the oracle (one binding map and one set of in-flight counts that every replica shares instantly; new sessions go to the least loaded backend) are small reverse proxies in the bench process, one listener per replica. The tether policies are R tether-sidecar processes with one pool keyed on X-Session-ID, access log off: per-replica memory placed by load (each replica its own store, a session it has not seen placed on the least loaded backend: a per-replica store as Kthena's default, whose replicas place a session independently), tether memory with its default placement (each replica its own store, but a new session placed by rendezvous hashing of its key, so replicas that have not seen it agree anyway), Redis (one redis-server), gossip (the R sidecars in one ring), soft (soft affinity with its default thresholds over the gossip store, scraping the backends' vLLM metrics). The policies run at once (at a scaled B, in the groups the workload paragraph names), each on its own backends with the same workload, so they share the machine's noise of the same seconds.`,
		m.PrefillPerToken, m.DecodePerToken, m.PrefillPerToken, float64(m.DecodePerToken)/float64(m.PrefillPerToken),
		m.CacheBlocks, m.CacheBlocks*16, w, slices.Min(o.Backends), scaled(o), workload.Summary(convs, w), w.SystemTokens, w.StreamTokens, scaling(o))
}

// scaled says how many conversations each B plays.
func scaled(o sticky.Options) string {
	var parts []string
	for _, b := range o.Backends {
		parts = append(parts, fmt.Sprintf("%d conversations at B = %d", o.ForBackends(b).Conversations, b))
	}
	return strings.Join(parts, ", ")
}

// scaling says whether a larger B got more conversations, and why not.
func scaling(o sticky.Options) string {
	if o.ScaleWithBackends {
		return "The conversations scale with B (`-scale-with-backends`): every backend is offered the same load, as a fleet of twice the backends serves twice the conversations, so round robin's prefill is about as busy at every B. A 2-core machine running every policy at once on twice the requests queues on its own CPU, which the client would measure as time to first token, so at a larger B the policies run in groups, one after the other, each offering the machine about the smallest B's load at once: the policies the issue's targets compare (round robin, per-replica memory, tether Redis, tether gossip, the oracle) in the first, so each target's ratio is of the same seconds, the others in the next."
	}
	return "Every B plays the same conversations, so at the larger B each backend has proportionally less to do (round robin's prefill is less busy, and its TTFT gap narrows to about the ratio of uncached tokens): loading every backend alike (`-scale-with-backends`) doubles the machine's work at B = 8, which a 2-core machine running every policy at once cannot carry without its own CPU queueing swamping the simulated GPU's."
}

// check formats a measured ratio against a minimum, with a third or
// fourth decimal where two would show a miss as the target itself (0.977
// as "0.98 (target ≥ 0.98) ✗").
func check(v, target float64) string { return checked(v, target, v >= target, "≥") }

// checkAtMost formats a measured ratio against a maximum, as check.
func checkAtMost(v, target float64) string { return checked(v, target, v <= target, "≤") }

func checked(v, target float64, met bool, rel string) string {
	mark := "✗ not met"
	if met {
		mark = "✓"
	}
	prec := 2
	for prec < 4 && !met && fmt.Sprintf("%.*f", prec, v) == fmt.Sprintf("%.*f", prec, target) {
		prec++
	}
	return fmt.Sprintf("%.*f (target %s %.2f) %s", prec, v, rel, target, mark)
}

func targetTables(in *Input) []*table.Table {
	o, res := in.StickyOpts, in.Sticky
	t := &table.Table{Title: "issue targets, as measured in this run",
		Head: []string{"target", "R", "B", "measured", "90% interval, conversations resampled", "same backend: tether ÷ the other"}}
	// stays shows the routing behind a ratio: the share of later turns
	// each policy kept on their previous turn's backend, which the
	// caches' eviction order does not move.
	stays := func(x, other *sticky.Result) string {
		return fmt.Sprintf("%s ÷ %s", pct(x.Stayed), pct(other.Stayed))
	}
	for _, b := range o.Backends {
		for _, r := range o.Replicas {
			oracle, mem, rr := sticky.Find(res, sticky.Oracle, r, b), sticky.Find(res, sticky.TetherMemory, r, b), sticky.Find(res, sticky.RoundRobin, r, b)
			for _, p := range []string{sticky.TetherRedis, sticky.TetherGossip} {
				x := sticky.Find(res, p, r, b)
				if x == nil {
					continue
				}
				if oracle != nil && r >= 3 {
					t.Add(sticky.Labels[p]+" hit rate ÷ oracle's", fmt.Sprint(r), fmt.Sprint(b), check(x.HitRate()/oracle.HitRate(), 0.98),
						interval(x, oracle, sticky.HitRateStat), stays(x, oracle))
				}
				if mem != nil && r >= 6 {
					t.Add(sticky.Labels[p]+" hit rate ÷ per-replica memory's", fmt.Sprint(r), fmt.Sprint(b), check(x.HitRate()/mem.HitRate(), 1.8),
						interval(x, mem, sticky.HitRateStat), stays(x, mem))
				}
				if rr != nil && x.TTFT.Quantile(0.5) > 0 {
					t.Add("round robin's TTFT p50 ÷ "+sticky.Labels[p]+"'s", fmt.Sprint(r), fmt.Sprint(b),
						check(float64(rr.TTFT.Quantile(0.5))/float64(x.TTFT.Quantile(0.5)), 3), interval(rr, x, sticky.TTFTP50Stat), stays(x, rr))
				}
			}
		}
	}
	return []*table.Table{t}
}

// overPerReplica is the headline's cell for the 1.8× target:
// tether gossip's hit rate over the per-replica store's at r replicas,
// at every B, each with its interval.
func overPerReplica(in *Input, r int) string {
	var cells []string
	for _, b := range in.StickyOpts.Backends {
		g, mem := sticky.Find(in.Sticky, sticky.TetherGossip, r, b), sticky.Find(in.Sticky, sticky.TetherMemory, r, b)
		if g == nil || mem == nil || mem.HitRate() == 0 {
			continue
		}
		cells = append(cells, fmt.Sprintf("%.2f× (%s) at B = %d", g.HitRate()/mem.HitRate(), interval(g, mem, sticky.HitRateStat), b))
	}
	return strings.Join(cells, "; ")
}

// interval formats the 90% interval of a target's ratio over its
// conversations resampled (sticky.RatioInterval).
func interval(num, den *sticky.Result, stat sticky.Stat) string {
	return bootstrap.Format(sticky.RatioInterval(num, den, stat, 0.9))
}

func msf(d time.Duration) string { return hop.Ms(d) + " ms" }

// headline is the README's table: the claims, as measured.
func headline(in *Input) *table.Table {
	t := &table.Table{Head: []string{"claim", "measured in this run"}}
	if r := in.Hop; r != nil {
		for _, mode := range r.Opts.Modes {
			rates := r.Opts.RatesOf(mode)
			// The lowest rate: every proxy carries it on 2 cores, so its
			// figures are the hop's cost; above it, the Go proxies run out
			// of CPU first and the tables show queueing, not the hop (the
			// highest-rate rows below say where each one stops).
			rate := slices.Min(rates)
			tp, hp := r.Point(hop.Tether, mode, rate), r.Point(hop.HAProxy, mode, rate)
			if tp == nil || hp == nil {
				continue
			}
			ta, _ := r.Added(tp, 0.99)
			ha, _ := r.Added(hp, 0.99)
			cell := fmt.Sprintf("%s vs %s; p99 %s vs %s, %s (%s)", msf(ta), msf(ha), msf(tp.Res.Latency.Quantile(0.99)), msf(hp.Res.Latency.Quantile(0.99)),
				hop.Ratio(float64(tp.Res.Latency.Quantile(0.99)), float64(hp.Res.Latency.Quantile(0.99))), p99Interval(tp, hp))
			if d := r.Point(hop.Direct, mode, rate); d != nil && (ta < 0 || ha < 0) {
				// Direct's own point was the slower: the shared machine
				// stalled in its seconds, not a proxy faster than none.
				cell += fmt.Sprintf(" (direct's own p99 %s: the machine stalled in its seconds; compare the p99s)", msf(d.Res.Latency.Quantile(0.99)))
			}
			t.Add(fmt.Sprintf("added p99 over direct, %s, %.0f req/s: tether (memory) vs HAProxy (in brackets the p99 ratio's 90%% interval, %d ms blocks of requests resampled)", mode, rate, r.Opts.BlockWidth.Milliseconds()), cell)
			t.Add(fmt.Sprintf("CPU per 1,000 requests, %s, %.0f req/s: tether vs HAProxy", mode, rate),
				fmt.Sprintf("%.0f ms vs %.0f ms (%s)", float64(tp.CPUPer1k)/1e6, float64(hp.CPUPer1k)/1e6, hop.Ratio(float64(tp.CPUPer1k), float64(hp.CPUPer1k))))
		}
		for _, mode := range r.Opts.Modes {
			if tr, hr := r.MaxOf(hop.Tether, mode), r.MaxOf(hop.HAProxy, mode); tr != nil && hr != nil {
				t.Add(fmt.Sprintf("highest rate at p99 added over direct < %v, %s: tether vs HAProxy", r.Opts.P99Limit, mode),
					fmt.Sprintf("%s vs %s req/s (%s)", tr.Label(), hr.Label(), tr.RatioTo(*hr)))
			}
		}
	}
	if len(in.Sticky) > 0 {
		o := in.StickyOpts
		r, b := slices.Max(o.Replicas), slices.Max(o.Backends)
		x := func(p string) *sticky.Result { return sticky.Find(in.Sticky, p, r, b) }
		if g, or, mem, rr := x(sticky.TetherGossip), x(sticky.Oracle), x(sticky.TetherMemory), x(sticky.RoundRobin); g != nil && or != nil && mem != nil && rr != nil {
			t.Add(fmt.Sprintf("prefix-cache hit rate, R = %d replicas, B = %d: tether gossip / oracle / per-replica memory / round robin", r, b),
				fmt.Sprintf("%s / %s / %s / %s", pct(g.HitRate()), pct(or.HitRate()), pct(mem.HitRate()), pct(rr.HitRate())))
			if cell := overPerReplica(in, r); cell != "" {
				t.Add(fmt.Sprintf("hit rate, tether gossip ÷ per-replica memory, R = %d (in brackets its 90%% interval, conversations resampled)", r), cell)
			}
			t.Add(fmt.Sprintf("later turns on their previous turn's backend, R = %d, B = %d: tether gossip / oracle / per-replica memory / round robin", r, b),
				fmt.Sprintf("%s / %s / %s / %s", pct(g.Stayed), pct(or.Stayed), pct(mem.Stayed), pct(rr.Stayed)))
			t.Add(fmt.Sprintf("TTFT p50, R = %d, B = %d: tether gossip vs round robin", r, b),
				fmt.Sprintf("%s vs %s (%.2f× better)", msf(g.TTFT.Quantile(0.5)), msf(rr.TTFT.Quantile(0.5)),
					float64(rr.TTFT.Quantile(0.5))/float64(max(g.TTFT.Quantile(0.5), 1))))
		}
	}
	if s := in.Scale; s != nil {
		n := slices.Max(s.Opts.Sizes)
		var mem, gos float64
		for _, f := range s.Footprints {
			if f.Bindings == n && f.Store == "memory" {
				mem = f.Bytes
			} else if f.Bindings == n && f.Store == "gossip" {
				gos = f.Bytes
			}
		}
		t.Add(fmt.Sprintf("bytes per binding at %d bindings: memory / gossip store", n), fmt.Sprintf("%.0f / %.0f", mem, gos))
		if len(s.Convergence) > 0 {
			c := s.Convergence[len(s.Convergence)-1]
			t.Add(fmt.Sprintf("gossip convergence, %d nodes", c.Nodes), fmt.Sprintf("p50 %s, p99 %s", msf(c.P50), msf(c.P99)))
		}
		t.Add(fmt.Sprintf("a replica joining a ring of %d bindings serves them after", n), fmt.Sprintf("%.1f s", s.Join.Seconds()))
	}
	return t
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
