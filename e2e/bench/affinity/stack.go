package affinity

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/routers"
	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/server"
)

// Backends shape the simulated model servers.
type Backends struct {
	N           int           // backends
	MaxRunning  int           // requests served at once; the rest queue (FIFO)
	Prefill     time.Duration // per uncached prompt token, on one serial lane per backend
	Decode      time.Duration // per output token
	CacheBlocks int           // prefix-cache capacity in blocks of sim.DefaultBlockTokens tokens
}

// stack is one policy's router replicas and backends.
type stack struct {
	tag      int           // its StackHeader value
	sims     []*sim.Server // its backends (served by the fleet)
	sidecars []*sidecar
	group    *routers.Group
	urls     []string // each replica's chat-completions URL
	result   *Result
}

type sidecar struct {
	srv  *server.Server
	stop context.CancelFunc
	done chan error
}

// sidecarConfig is one replica's configuration: a pool "bench" keyed on
// X-Session-ID over the backends, scraping their queues every 100 ms
// (soft affinity and placement read them) from stack tag's metrics, with
// the given store.
func sidecarConfig(backends []string, store, affinity string, tag int) string {
	quoted := make([]string, len(backends))
	for i, b := range backends {
		quoted[i] = fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
store: %s
pools:
  - name: bench
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%s]}
    affinity: %s
    loadMetrics: {interval: 100ms, timeout: 100ms, path: /stack/%d/metrics}
`, store, strings.Join(quoted, ", "), affinity, tag)
}

// startPolicy starts p's router replicas over backends: round-robin
// proxies, one sidecar with a memory store, or sidecars in a gossip ring
// (encrypted, as tether's default requires) that dir holds the key of.
func (s *stack) startPolicy(p Policy, backends []string, dir string, level slog.Level) error {
	if p.RoundRobin {
		g, err := routers.Start(routers.RoundRobin, backends, p.Replicas)
		if err != nil {
			return err
		}
		s.group = g
		for _, u := range g.URLs() {
			s.urls = append(s.urls, u+"/v1/chat/completions")
		}
		return nil
	}
	key := filepath.Join(dir, "gossip.key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if p.Replicas > 1 {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		if err := os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
			return err
		}
	}
	var seed string
	for i := range p.Replicas {
		store := "{backend: memory}"
		if p.Replicas > 1 {
			port, err := procs.FreePort()
			if err != nil {
				return err
			}
			bind := fmt.Sprintf("127.0.0.1:%d", port)
			join := ""
			if seed != "" {
				join = fmt.Sprintf("%q", seed)
			} else {
				seed = bind
			}
			store = fmt.Sprintf("{backend: gossip, gossip: {bind: %q, advertise: %q, join: [%s], secretKeyFile: %q}}", bind, bind, join, key)
		}
		cfg, err := config.Parse([]byte(sidecarConfig(backends, store, p.Affinity, s.tag)))
		if err != nil {
			return err
		}
		// Warn level unless asked: no access log line per request (the
		// counters come from the metrics), as a busy production sidecar
		// would run.
		log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		srv, err := server.New(context.Background(), cfg, log, server.Deps{PodName: fmt.Sprintf("bench-%d", i)})
		if err != nil {
			return err
		}
		if err := srv.Listen(); err != nil {
			return err
		}
		ctx, stop := context.WithCancel(context.Background())
		sc := &sidecar{srv: srv, stop: stop, done: make(chan error, 1)}
		go func() { sc.done <- srv.Run(ctx) }()
		s.sidecars = append(s.sidecars, sc)
		s.urls = append(s.urls, "http://"+srv.PoolAddr("bench")+"/v1/chat/completions")
	}
	// Every replica ready: the ring formed and synced, the first load
	// scrapes done.
	for _, sc := range s.sidecars {
		if err := waitReady("http://"+sc.srv.AdminAddr()+"/readyz", 60*time.Second); err != nil {
			return err
		}
	}
	time.Sleep(300 * time.Millisecond)
	return nil
}

func waitReady(url string, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (last: %v)", url, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// close stops the replicas gracefully, one after the other (a replica
// leaving a ring whose other members leave at the same moment waits out
// its leave timeout for acknowledgements).
func (s *stack) close() {
	for _, sc := range s.sidecars {
		sc.stop()
		<-sc.done
	}
	if s.group != nil {
		s.group.Close()
	}
}

// counts are the cumulative counters the results are differences of.
type counts struct {
	backendPrompt, backendCached int64
	// The sidecars' tether_prompt_tokens_total and
	// tether_cached_prompt_tokens_total, summed over replicas and
	// decisions; wired is false when this build does not export them.
	sidecarPrompt, sidecarCached float64
	wired                        bool
	broken                       map[string]float64 // tether_affinity_broken_total by reason
}

func (s *stack) counts() (counts, error) {
	c := counts{broken: map[string]float64{}}
	for _, m := range s.sims {
		st := m.Stats()
		c.backendPrompt += st.PromptTokens
		c.backendCached += st.CachedTokens
	}
	for _, sc := range s.sidecars {
		fams, err := sc.srv.Registry().Gather()
		if err != nil {
			return c, err
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["pool"] != "bench" || m.GetCounter() == nil {
					continue
				}
				v := m.GetCounter().GetValue()
				switch f.GetName() {
				case "tether_prompt_tokens_total":
					c.sidecarPrompt += v
					c.wired = true
				case "tether_cached_prompt_tokens_total":
					c.sidecarCached += v
				case "tether_affinity_broken_total":
					c.broken[labels["reason"]] += v
				}
			}
		}
	}
	return c, nil
}

// since is c minus an earlier snapshot.
func (c counts) since(o counts) counts {
	d := counts{
		backendPrompt: c.backendPrompt - o.backendPrompt, backendCached: c.backendCached - o.backendCached,
		sidecarPrompt: c.sidecarPrompt - o.sidecarPrompt, sidecarCached: c.sidecarCached - o.sidecarCached,
		wired: c.wired, broken: map[string]float64{},
	}
	for r, v := range c.broken {
		if v -= o.broken[r]; v > 0 {
			d.broken[r] = v
		}
	}
	return d
}
