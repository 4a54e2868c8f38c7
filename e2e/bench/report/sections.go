package report

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/sticky"
	"github.com/tetherproxy/tether/e2e/bench/table"
	"github.com/tetherproxy/tether/e2e/bench/workload"
)

func hopSection(b *bytes.Buffer, dir string, in *Input) error {
	r := in.Hop
	if r == nil {
		return nil
	}
	fmt.Fprintf(b, "## 1. What one hop costs\n\n`%s`\n\n%s. Every proxy runs as a real process on loopback with the config the bench writes: HAProxy %s with one thread, a stick table on `X-Session-ID` (`stick on req.hdr(x-session-id)`, `balance leastconn`) and keep-alive to the backends; nginx %s with one worker, `hash $http_x_session_id consistent`, upstream keep-alive and `proxy_buffering off` (so SSE events pass as they come); tether-sidecar with one pool on the same header (memory store with and without its access log; Redis store on a real redis-server; gossip store in a ring of three sidecars, the load on one). The backends are modelsim with no artificial latency for every proxy (so the figures include a realistic OpenAI JSON and SSE backend, not a static file), one process serving each backend on its own listener, without a log line per request. The load generator writes each request's bytes on keep-alive connections and reads the answer on the goroutine that sent it, without net/http's Transport: on 2 cores the generator and the backends share the machine with the proxy measured, and what they spend is taken from it (at 5,000 req/s direct, a generator on net/http's Transport and three logging modelsim processes kept the cores 86%% busy and direct's own p99 at 11 ms; this harness, 60%% busy and 1.7 ms). CPU is utime+stime of the proxy's processes from /proc over the measured part; in brackets what it needs besides (redis-server, the other ring members). Peak RSS is VmHWM. *Added* is the proxy's percentile minus direct's at the same rate and mode.\n\n",
		in.HopCmd, r.Setup(), toolVersion("haproxy"), toolVersion("nginx"))
	writeTables(b, r.Tables())
	if ts := hopTargetTables(r); ts != nil {
		writeTables(b, ts)
		fmt.Fprintf(b, "**How much one run decides.** The p99 of a point of %v at 1,000 requests/s is its %d slowest requests, and they come in bursts: requests due within a few milliseconds that waited out the same stop of the machine (a backend or the generator not scheduled, the kernel's own work) or of the proxy, and were answered at about the same moment ([docs/hop-cost.md](../../docs/hop-cost.md), \"Where the tail comes from\"). The interval column resamples each point's requests in blocks of %d ms by their due time (a block bootstrap: each burst stays whole; %d draws of each point's blocks with replacement, each point on its own, seeded) and gives the range of the middle 90%% of the p99 ratios: where another draw of this run's seconds could put it. It holds the bursts of these seconds only, not what moves a whole run (the machine's next quarter hour: series of runs a quarter hour apart differ by more, docs/hop-cost.md \"How much one run decides\"), nor a state that lasts a whole point: measured with the same build in two slots, it held their run-to-run spread at 2,000 requests/s and was too narrow at 5,000, where a point's tail depends on more than its bursts (which seconds of the machine it got; docs/hop-cost.md, \"An interval for one run's p99\"). A miss whose interval reaches down to 1 is within this run's sampling noise; one whose interval stays above it is the proxy's in this run, and at the highest rate a verdict wants several runs (`bench hop -runs N` counts where each run's interval lay). The highest-rate target has no interval: each rung of its search is one probe.\n\n",
			r.Opts.Duration, int(0.01*1000*r.Opts.Duration.Seconds()), r.Opts.BlockWidth.Milliseconds(), bootstrap.Draws)
	}
	for _, mode := range r.Opts.Modes {
		// Latency itself, on a log scale, with direct's as the floor: what
		// a proxy adds is its line's height above direct's, and the rates
		// where a proxy runs out of CPU (seconds) and those where it adds a
		// fraction of a millisecond read on one chart.
		var series []Series
		for c, name := range r.Opts.Proxies {
			var xs, p99, p50 []float64
			for _, p := range r.Points {
				if p.Proxy != name || p.Mode != mode {
					continue
				}
				xs = append(xs, p.Rate)
				p99 = append(p99, float64(p.Res.Latency.Quantile(0.99))/1e6)
				p50 = append(p50, float64(p.Res.Latency.Quantile(0.5))/1e6)
			}
			series = append(series, Series{Name: hop.Labels[name], X: xs, Y: p99, Color: c},
				Series{X: xs, Y: p50, Dashed: true, Color: c})
		}
		title := fmt.Sprintf("Latency vs offered rate, %s (solid p99, dashed p50; log scale)", mode)
		f := figure{File: fmt.Sprintf("hop-%s.png", mode), Caption: fmt.Sprintf("%s: a proxy's added latency is its height above direct's line. `%s`", title, in.HopCmd)}
		if err := LineChart(filepath.Join(dir, f.File), title, shortCmd(in.HopCmd),
			"offered requests/s", "latency, ms", series, Axes{LogY: true}); err != nil {
			return err
		}
		b.WriteString(f.markdown() + "\n")
	}
	conditionsSection(b, in.Conditions)
	return nil
}

// conditionsSection is section 1's points under conditions its steady
// points do not make, each once a bug that no point showed.
func conditionsSection(b *bytes.Buffer, cs []Condition) {
	if len(cs) == 0 {
		return
	}
	b.WriteString("### Conditions the points above do not make\n\nThe points above keep every connection, log to a file and send prompts of about 130 bytes. Each condition below was once a cost that no point showed: a client's hang-up stopped the sidecar for up to 10 ms, a full log pipe held the thread requests needed, and a long prompt went to the backend in 4 KiB writes ([docs/hop-cost.md](../../docs/hop-cost.md): \"The poller's own wait\", \"A log reader that falls behind\", \"A prompt of many kilobytes\"). One point each, HAProxy and tether beside direct.\n\n")
	for _, c := range cs {
		fmt.Fprintf(b, "**%s.** `%s`\n\n%s.\n\n", c.Name, c.Cmd, c.Hop.Setup())
		writeTables(b, c.Hop.Tables())
	}
}

func stickySection(b *bytes.Buffer, dir string, in *Input) error {
	if len(in.Sticky) == 0 {
		return nil
	}
	o := in.StickyOpts
	fmt.Fprintf(b, "## 2. What stickiness is worth\n\n`%s`\n\n", in.StickyCmd)
	fmt.Fprintf(b, "%s\n\n", stickySetup(in))
	writeTables(b, sticky.Tables(o, in.Sticky))
	writeTables(b, targetTables(in))
	fmt.Fprintf(b, "**How much one run decides.** Each ratio rests on this run's conversations (%d at B = %d), and under a policy that places sessions by load or spreads their turns, which backend a conversation's turns met is a draw of its own. The interval column resamples the conversations (%d draws with replacement, both policies of a ratio on the same draw, seeded) and gives the range of the middle 90%% of the ratios: where another draw of conversations like these could put it. It holds the conversations' own spread only, not what moves all of a run's conversations at once (which backend's cache overflows first, the machine's stalls), so another run can land further out. A miss whose interval reaches past its target is within this run's sampling noise; one whose interval stays below it is a miss of the policy.\n\n",
		o.ForBackends(slices.Min(o.Backends)).Conversations, slices.Min(o.Backends), bootstrap.Draws)
	share, distinct := workload.Footprint(workload.Generate(o.Workload), o.Workload)
	cacheB := slices.Min(o.Backends)
	next := " The same workload with other cache sizes:\n\n"
	t := sticky.SweepTable(o, in.Sticky, in.Sweep)
	if t != nil {
		cacheB = in.Sweep[0].B
	} else {
		next = " `go run ./e2e/bench sticky` alone repeats the largest R and smallest B with other cache sizes (`-cache-sweep`, 1024 and 16384 blocks by default; left out of `make bench` to keep it short).\n\n"
	}
	fmt.Fprintf(b, "**Why the gaps are this size.** Two things give every policy hits, sticky or not: the shared system prompt is %.0f%% of all prompt tokens (each backend caches it at its first use), and a conversation's earlier turns stay cached on every backend it visited while the cache has room, so a policy that moves a conversation still finds its prefix as of its last visit there. A per-replica store whose replicas place new sessions by load is little better than that: a turn reaches a replica that has seen its session with a probability that grows only slowly with the turns (1/R for the second), otherwise that replica's own choice, so the penalty grows with R and with the length of the conversations; placing by the key's hash (tether's default) makes the replicas' independent choices agree, so tether's per-replica memory can come close to the shared stores (compare its row). What makes moving expensive is eviction: the workload's conversations hold %d distinct tokens, the B = %d backends' caches %d tokens together; a policy that spreads each conversation over several backends keeps several copies, and the smaller the cache, the more those copies evict each other. TTFT follows the uncached tokens: a sticky turn prefills the previous answer and the new user message, a moved turn also everything since its last visit to that backend, so on idle GPUs the TTFT ratio is at most the ratio of uncached tokens (about 2-4×), less the fixed costs of a request. Under load it grows: prefill is serial on a GPU, a policy that recomputes 2-3× the tokens keeps its prefill lanes 2-3× as busy, and a queue's wait grows as busy/(1 − busy), so round robin's TTFT rises much faster than a sticky policy's (compare the prefill busy column with TTFT p50).%s%s",
		100*share, distinct, cacheB, cacheB*o.Model.CacheBlocks*16, uncachedNote(in)+systemPromptNote(in)+evictionNote(in), next)
	if t != nil {
		writeTables(b, []*table.Table{t})
	}
	if len(in.Sweep) > 0 {
		r, bk := in.Sweep[0].R, in.Sweep[0].B
		var series []Series
		for c, p := range o.SweepPolicies {
			s := Series{Name: sticky.Labels[p], Color: c}
			for _, x := range append(slices.Clone(in.Sweep), in.Sticky...) {
				if x.Policy == p && x.R == r && x.B == bk {
					s.X, s.Y = append(s.X, float64(x.CacheBlocks*16)), append(s.Y, 100*x.HitRate())
				}
			}
			sortXY(&s)
			series = append(series, s)
		}
		f := figure{File: "sticky-cache-sweep.png",
			Caption: fmt.Sprintf("Hit rate vs prefix-cache size per backend, R = %d, B = %d. `%s`", r, bk, in.StickyCmd)}
		if err := LineChart(filepath.Join(dir, f.File), fmt.Sprintf("Hit rate vs prefix-cache size, R = %d, B = %d", r, bk),
			shortCmd(in.StickyCmd), "prefix-cache capacity per backend, tokens", "hit rate, %", series, Axes{LogX: true}); err != nil {
			return err
		}
		b.WriteString(f.markdown() + "\n")
	}
	policies := slices.DeleteFunc(slices.Clone(o.Policies), func(p string) bool { return p == sticky.Oracle })
	var labels []string
	for _, p := range policies {
		labels = append(labels, sticky.Labels[p])
	}
	for _, bk := range o.Backends {
		for _, m := range []struct {
			file, what, unit string
			val              func(*sticky.Result) float64
		}{
			{"hitrate", "Prefix-cache hit rate", "cached prompt tokens / prompt tokens, %", func(x *sticky.Result) float64 { return 100 * x.HitRate() }},
			{"ttft", "TTFT p50", "time to first token, p50, ms", func(x *sticky.Result) float64 { return float64(x.TTFT.Quantile(0.5)) / 1e6 }},
		} {
			var groups []Bars
			var refs []RefLine
			for i, r := range o.Replicas {
				g := Bars{Name: fmt.Sprintf("R = %d", r)}
				for _, p := range policies {
					v := 0.0
					if x := sticky.Find(in.Sticky, p, r, bk); x != nil {
						v = m.val(x)
					}
					g.Values = append(g.Values, v)
				}
				groups = append(groups, g)
				if x := sticky.Find(in.Sticky, sticky.Oracle, r, bk); x != nil {
					refs = append(refs, RefLine{Name: fmt.Sprintf("oracle, R = %d", r), Y: m.val(x), Color: i})
				}
			}
			f := figure{File: fmt.Sprintf("sticky-%s-B%d.png", m.file, bk),
				Caption: fmt.Sprintf("%s per policy, B = %d backends, bars per router replica count R, dashed lines the oracle. `%s`", m.what, bk, in.StickyCmd)}
			if err := BarChart(filepath.Join(dir, f.File), fmt.Sprintf("%s per policy, B = %d backends", m.what, bk),
				shortCmd(in.StickyCmd), m.unit, labels, groups, refs); err != nil {
				return err
			}
			b.WriteString(f.markdown() + "\n")
		}
	}
	return nil
}

func scaleSection(b *bytes.Buffer, dir string, in *Input) error {
	r := in.Scale
	if r == nil {
		return nil
	}
	fmt.Fprintf(b, "## 3. Scale of the stores\n\n`%s`\n\nMeasured in the bench process through the stores' public APIs (the gossip nodes are real memberlist nodes on loopback with production timers): bytes per binding is the live heap the store grew by (after a GC on both sides) over the bindings it holds, keys included (as the resolver makes them: a 128-bit hash of pool and session key), backend IDs shaped like Kubernetes pods (`namespace/name/uid`, 100 distinct). Lookups per CPU-second: lookup-and-refresh of random held keys from one goroutine per core (Redis: 32 in flight), divided by the CPU time spent (Redis: the bench's and redis-server's). Redis round trips are counted by a relay between a real tether-sidecar and redis-server: a round trip is the client writing again after the server answered. Convergence: a binding created on one node of the ring until every other node holds it, polled every 50 µs. Join: a new replica joins a ring whose one member holds the bindings, until it reports synced (its `/readyz` turns ready) and holds them all (a sample checked).\n\n", in.ScaleCmd)
	writeTables(b, r.Tables())
	var series []Series
	for i, st := range []string{"memory", "gossip"} {
		s := Series{Name: st + " store", Color: i}
		for _, f := range r.Footprints {
			if f.Store == st {
				s.X, s.Y = append(s.X, float64(f.Bindings)), append(s.Y, f.Bytes)
			}
		}
		series = append(series, s)
	}
	f := figure{File: "scale-bytes.png", Caption: fmt.Sprintf("Bytes per binding vs bindings held. `%s`", in.ScaleCmd)}
	if err := LineChart(filepath.Join(dir, f.File), "Bytes per binding vs bindings held", shortCmd(in.ScaleCmd),
		"bindings", "bytes per binding", series, Axes{LogX: true}); err != nil {
		return err
	}
	b.WriteString(f.markdown() + "\n")
	var p50, p99 Series
	p50, p99 = Series{Name: "p50", Color: 0}, Series{Name: "p99", Color: 1}
	for _, c := range r.Convergence {
		p50.X, p50.Y = append(p50.X, float64(c.Nodes)), append(p50.Y, float64(c.P50)/1e6)
		p99.X, p99.Y = append(p99.X, float64(c.Nodes)), append(p99.Y, float64(c.P99)/1e6)
	}
	f = figure{File: "scale-convergence.png", Caption: fmt.Sprintf("Gossip convergence time vs ring size. `%s`", in.ScaleCmd)}
	if err := LineChart(filepath.Join(dir, f.File), "Gossip convergence vs ring size", shortCmd(in.ScaleCmd),
		"nodes in the ring", "until every node holds a new binding, ms", []Series{p50, p99}, Axes{}); err != nil {
		return err
	}
	b.WriteString(f.markdown() + "\n")
	return nil
}

// shortCmd fits a command into a chart title (the caption has it whole).
func shortCmd(c string) string {
	if len(c) > 110 {
		return c[:107] + "..."
	}
	return c
}

// sortXY orders a series by x.
func sortXY(s *Series) {
	idx := make([]int, len(s.X))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case s.X[a] < s.X[b]:
			return -1
		case s.X[a] > s.X[b]:
			return 1
		}
		return 0
	})
	x, y := make([]float64, len(idx)), make([]float64, len(idx))
	for i, j := range idx {
		x[i], y[i] = s.X[j], s.Y[j]
	}
	s.X, s.Y = x, y
}

// uncachedNote says, for the largest R and every B, how many times the
// uncached prompt tokens of tether gossip round robin computed, and how
// busy its prefill was: on lightly loaded backends that ratio bounds the
// TTFT ratio, so it explains a B where the TTFT target is close.
func uncachedNote(in *Input) string {
	o := in.StickyOpts
	r := slices.Max(o.Replicas)
	var parts []string
	for _, b := range o.Backends {
		rr, g := sticky.Find(in.Sticky, sticky.RoundRobin, r, b), sticky.Find(in.Sticky, sticky.TetherGossip, r, b)
		if rr == nil || g == nil || g.Prompt == g.Cached {
			continue
		}
		parts = append(parts, fmt.Sprintf("%.1f× the uncached prompt tokens tether gossip computed at B = %d (round robin's prefill busy %.0f%% of the run)",
			float64(rr.Prompt-rr.Cached)/float64(g.Prompt-g.Cached), b, 100*rr.PrefillBusy(o.Model)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf(" In this run, at R = %d, round robin computed %s.", r, strings.Join(parts, ", and "))
}

// longSystemPrompt is the system prompt systemPromptNote compares with:
// instructions plus tool definitions, as agents and tool-using
// assistants send.
const longSystemPrompt = 1000

// systemPromptNote says, at the largest R and every B, how many times
// per-replica memory's uncached prompt tokens tether gossip's were, and
// what the hit-rate ratio of the two would be with a system prompt of
// longSystemPrompt tokens. Every backend caches the system prompt at its
// first use, so a longer one adds the same cached tokens to every request
// of every policy: hit rates rise towards 1 and their ratio shrinks,
// while the tokens a policy recomputes, which are what cost GPU time,
// stay what they were. The ratio target is on hit rates, so the
// report shows how much of it the workload's prompt length decides.
func systemPromptNote(in *Input) string {
	o := in.StickyOpts
	extra := int64(longSystemPrompt - o.Workload.SystemTokens)
	if extra <= 0 {
		return ""
	}
	r := slices.Max(o.Replicas)
	var parts []string
	for _, b := range o.Backends {
		pr, g := sticky.Find(in.Sticky, sticky.TetherMemory, r, b), sticky.Find(in.Sticky, sticky.TetherGossip, r, b)
		if pr == nil || g == nil || g.Prompt == g.Cached || pr.Cached == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("at B = %d, %.1f× the uncached prompt tokens of tether gossip, and a hit rate %.2f× below it, %.2f× had every prompt carried a %d-token system prompt",
			b, float64(pr.Prompt-pr.Cached)/float64(g.Prompt-g.Cached), g.HitRate()/pr.HitRate(),
			hitRateWithMore(g, extra)/hitRateWithMore(pr, extra), longSystemPrompt))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf(" The system prompt's share moves hit rates, not the tokens recomputed: at R = %d, per-replica memory computed %s (the same run's counts, every request given %d more cached tokens: a system prompt is cached on every backend after its first use).",
		r, strings.Join(parts, "; "), extra)
}

// hitRateWithMore is x's hit rate had every answered request carried
// extra more prompt tokens, all of them cached.
func hitRateWithMore(x *sticky.Result, extra int64) float64 {
	n := extra * int64(x.Requests-x.Errors)
	return float64(x.Cached+n) / float64(max(x.Prompt+n, 1))
}

// sameRouting is how many of its later turns a store must keep on their
// previous turn's backend for evictionNote to count it as routing every
// turn as the oracle does.
const sameRouting = 0.995

// evictionNote puts side by side, at every (R ≥ 3, B) where the stores
// are compared with the oracle, the hit rates of tether Redis and tether
// gossip when both kept (nearly) every later turn on its backend: the
// same routing, so what parts their hit rates is the draw of which
// sessions land together (each policy's backends listen on other ports,
// which the key's hash mixes in) and the order in which requests arrived,
// which the backends' LRU caches evict by and the machine's timing of
// those seconds sets. Their difference is this run's noise on a hit-rate
// ratio; the *same backend* column is the routing.
func evictionNote(in *Input) string {
	o := in.StickyOpts
	var parts []string
	for _, b := range o.Backends {
		for _, r := range o.Replicas {
			rs, g := sticky.Find(in.Sticky, sticky.TetherRedis, r, b), sticky.Find(in.Sticky, sticky.TetherGossip, r, b)
			if r < 3 || rs == nil || g == nil || rs.Stayed < sameRouting || g.Stayed < sameRouting {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s and %s at R = %d, B = %d", pct(rs.HitRate()), pct(g.HitRate()), r, b))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf(" With the same routing, a hit rate still moves by a few points from run to run. A backend evicts by the order its requests arrived in, which the machine's timing of those seconds sets, and under this cache pressure an early eviction recomputes a history that evicts others; and a hashed placement of 150 conversations is a draw: which long conversations share a backend changes with the backends' addresses, which differ between policies and runs (README \"Placement\"; a fleet with thousands of sessions per backend evens it out). Tether Redis and tether gossip place new sessions by the same hash, bounded by bindings and by recent work (Redis by each replica's own count of it, gossip by a view the ring shares; README \"Placement\"), and in this run both kept at least %.1f%% of later turns on their previous turn's backend, as the oracle does (column *same backend*); their hit rates were %s. Where a store falls a few points short of the oracle, look at its *token imbalance*: the draw of which long conversations share a backend, which the work bound narrows (README \"Placement\" measures it over 13 runs) and the run-to-run noise does the rest.",
		100*sameRouting, strings.Join(parts, "; "))
}
