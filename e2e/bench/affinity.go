// bench affinity compares round robin (no affinity), hard affinity and
// soft affinity on one multi-turn workload with a skewed load: a few long
// agent sessions that send several requests at once plus many short
// chats, across 4 in-process modelsim backends behind one in-process
// sidecar, all on loopback. It prints TTFT p50/p99 (time to the first SSE
// event of a streamed chat completion) and the prefix-cache hit rate (sum
// of cached prompt tokens over sum of prompt tokens, from the backends).
//
//	go run ./e2e/bench affinity [-duration 20s] [-seed 1]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/server"
)

var (
	affinityFlags = flag.NewFlagSet("affinity", flag.ExitOnError)
	duration      = affinityFlags.Duration("duration", 20*time.Second, "workload time per mode")
	seed          = affinityFlags.Uint64("seed", 1, "workload random seed")
	parallel      = affinityFlags.Int("parallel", 12, "requests an agent session sends at once")
	agents        = affinityFlags.Int("agents", 2, "long agent sessions")
	maxRunning    = affinityFlags.Int("max-running", 2, "requests each backend serves at once (the rest queue)")
	agentOut      = affinityFlags.Int("agent-tokens", 64, "output tokens of an agent request")
	chatEvery     = affinityFlags.Duration("chat-every", 50*time.Millisecond, "a new short chat starts this often")
	think         = affinityFlags.Duration("agent-think", time.Second, "an agent's pause between turns (running its tools)")
)

type mode struct{ name, sources, affinity string }

var modes = []mode{
	{"round robin", "[{type: Header, name: X-No-Session}]", "{mode: hard}"},
	{"hard affinity", "[{type: Header, name: X-Session-ID}]", "{mode: hard}"},
	{"soft affinity", "[{type: Header, name: X-Session-ID}]", "{mode: soft, maxWaiting: 8, loadMargin: 4, cooldown: 2s}"},
}

func affinityMain(args []string) error {
	_ = affinityFlags.Parse(args)
	fmt.Printf("workload: %s per mode, 4 backends (MaxRunning %d, prefill 200µs/token, decode 2ms/token), %d agent sessions x %d parallel requests of %d output tokens every %s + burst, a 3-turn short chat starting every %s\n\n",
		*duration, *maxRunning, *agents, *parallel, *agentOut, *think, *chatEvery)
	fmt.Printf("%-14s %9s %9s %9s %9s %9s\n", "mode", "requests", "TTFT p50", "TTFT p99", "hit rate", "broken")
	for _, m := range modes {
		r, err := affinityRun(m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		fmt.Printf("%-14s %9d %9s %9s %8.1f%% %9d\n", m.name, r.n, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), 100*r.hit, r.broken)
	}
	return nil
}

type result struct {
	n        int
	p50, p99 time.Duration
	hit      float64
	broken   int
}

func affinityRun(m mode) (result, error) {
	var sims []*sim.Server
	var addrs []string
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := range 4 {
		s := sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", i), MaxRunning: *maxRunning, PrefillPerToken: 200 * time.Microsecond, DecodePerToken: 2 * time.Millisecond, CacheBlocks: 2048})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return result{}, err
		}
		hs := &http.Server{Handler: s}
		go hs.Serve(ln)
		servers = append(servers, hs)
		sims = append(sims, s)
		addrs = append(addrs, ln.Addr().String())
	}
	a, _ := json.Marshal(addrs)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: bench
    sessionSticky: {sources: %s}
    backends: {static: %s}
    affinity: %s
    loadMetrics: {interval: 100ms, timeout: 100ms}
`, m.sources, a, m.affinity)))
	if err != nil {
		return result{}, err
	}
	logs := &counter{}
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, nil)), server.Deps{})
	if err != nil {
		return result{}, err
	}
	if err := srv.Listen(); err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	url := "http://" + srv.PoolAddr("bench") + "/v1/chat/completions"
	time.Sleep(300 * time.Millisecond) // first scrapes

	var mu sync.Mutex
	var ttfts []time.Duration
	record := func(d time.Duration) { mu.Lock(); ttfts = append(ttfts, d); mu.Unlock() }
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	end := time.Now().Add(*duration)
	rng := rand.New(rand.NewPCG(*seed, 2))
	var wg sync.WaitGroup
	// Long agent sessions: a large shared context, four requests at a
	// time (parallel tool calls), each turn extending the history.
	for s := range *agents {
		wg.Go(func() {
			hist := []string{words(fmt.Sprintf("agent%d system", s), 600)}
			for turn := 0; time.Now().Before(end); turn++ {
				var tw sync.WaitGroup
				for c := range *parallel {
					msgs := append(slices.Clone(hist), words(fmt.Sprintf("a%d t%d call%d", s, turn, c), 20))
					tw.Go(func() {
						if d, ok := chat(client, url, fmt.Sprintf("agent-%d", s), msgs, *agentOut); ok {
							record(d)
						}
					})
				}
				tw.Wait()
				// While the agent runs its tools its backend looks idle, so
				// new short chats are bound there; the next burst then
				// queues ahead of their later turns.
				time.Sleep(*think)
				hist = append(hist, words(fmt.Sprintf("a%d t%d result", s, turn), 60))
			}
		})
	}
	// Short chats: a new one every -chat-every, three turns each; they are
	// bound wherever load is low at their start and then find an agent's
	// burst queued ahead of them — the case soft affinity is for.
	for i := 0; time.Now().Before(end); i++ {
		n := 80 + rng.IntN(200)
		wg.Go(func() {
			hist := []string{words(fmt.Sprintf("chat%d", i), n)}
			for turn := range 3 {
				if d, ok := chat(client, url, fmt.Sprintf("chat-%d", i), hist, 16); ok {
					record(d)
				}
				hist = append(hist, words(fmt.Sprintf("c%d t%d", i, turn), 30))
				time.Sleep(200 * time.Millisecond)
			}
		})
		time.Sleep(*chatEvery)
	}
	wg.Wait()
	var prompt, cached int64
	for _, s := range sims {
		st := s.Stats()
		prompt += st.PromptTokens
		cached += st.CachedTokens
	}
	slices.Sort(ttfts)
	r := result{n: len(ttfts), hit: float64(cached) / float64(max(prompt, 1)), broken: logs.broken()}
	if len(ttfts) > 0 {
		r.p50 = ttfts[len(ttfts)/2]
		r.p99 = ttfts[len(ttfts)*99/100]
	}
	return r, nil
}

func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s-%d ", prefix, i%50)
	}
	return b.String()
}

// chat streams one chat completion and returns the time to its first SSE event.
func chat(c *http.Client, url, session string, msgs []string, maxTokens int) (time.Duration, bool) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []msg
	for i, m := range msgs {
		ms = append(ms, msg{Role: []string{"user", "assistant"}[i%2], Content: m})
	}
	body, _ := json.Marshal(map[string]any{"model": "modelsim", "stream": true, "max_tokens": maxTokens, "messages": ms})
	req, _ := http.NewRequest("POST", url, strings.NewReader(string(body)))
	req.Header.Set("X-Session-ID", session)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	for sc.Scan() {
		if first == 0 && strings.HasPrefix(sc.Text(), "data:") {
			first = time.Since(start)
		}
	}
	return first, resp.StatusCode == 200 && first > 0
}

// counter counts access-log lines with decision broken.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n += strings.Count(string(p), `"decision":"broken"`)
	c.mu.Unlock()
	return len(p), nil
}

func (c *counter) broken() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
