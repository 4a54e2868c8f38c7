// Package sticky measures what stickiness is worth (the benchmarks'
// section 2): one multi-turn workload, served by R router replicas over B
// modelsim backends with finite prefix caches, under every policy a user
// would otherwise pick — and tether's stores — side by side.
package sticky

import (
	"fmt"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/routers"
)

// Policies, in report order. The first four are routers of the benchmark
// itself (package routers); the others are tether-sidecar processes.
const (
	RoundRobin       = routers.RoundRobin
	LeastOutstanding = routers.LeastOutstanding
	ConsistentHash   = routers.ConsistentHash
	// TetherMemory is a per-replica memory store that places new sessions
	// by load, not by key (Kthena's default: each router replica its own
	// map, a new session to the backend its scheduler picks), so replicas
	// that have not seen a session place it independently.
	TetherMemory = "tether-memory"
	// TetherMemoryHash is tether's memory store with its default
	// placement (rendezvous hashing of the key): replicas still keep
	// their own maps, but propose the same backend for a new key.
	TetherMemoryHash = "tether-memory-hash"
	TetherRedis      = "tether-redis"
	TetherGossip     = "tether-gossip"
	TetherSoft       = "tether-soft" // soft affinity over the gossip store
	Oracle           = routers.Oracle
)

// AllPolicies lists every policy.
var AllPolicies = []string{RoundRobin, LeastOutstanding, ConsistentHash, TetherMemory, TetherMemoryHash, TetherRedis, TetherGossip, TetherSoft, Oracle}

// Labels name the policies in tables and charts.
var Labels = map[string]string{
	RoundRobin:       "round robin",
	LeastOutstanding: "least outstanding",
	ConsistentHash:   "consistent hash",
	TetherMemory:     "per-replica memory (placed by load)",
	TetherMemoryHash: "tether memory (per replica, hashed)",
	TetherRedis:      "tether Redis",
	TetherGossip:     "tether gossip",
	TetherSoft:       "tether soft (gossip)",
	Oracle:           "oracle",
}

// Model is the simulated GPU server every backend runs.
type Model struct {
	PrefillPerToken time.Duration // per uncached prompt token, serialised over requests
	DecodePerToken  time.Duration // per output token, requests decode in parallel (batched)
	CacheBlocks     int           // prefix-cache capacity per backend, blocks of 16 tokens
}

func (m Model) flags() []string {
	return []string{"--prefill-per-token", m.PrefillPerToken.String(), "--decode-per-token", m.DecodePerToken.String(),
		"--cache-blocks", fmt.Sprint(m.CacheBlocks), "--serial-prefill"}
}

// stack is one policy's routers and backends.
type stack struct {
	policy   string
	backends []string
	urls     []string // router replicas
	group    *routers.Group
}

// startStack starts B backends and R router replicas for policy.
func startStack(env *procs.Env, policy string, r, b int, m Model) (*stack, error) {
	s := &stack{policy: policy}
	ids := make([]string, b)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-b%d", policy, i)
	}
	var err error
	if s.backends, err = startModelsims(env, ids, m); err != nil {
		return nil, err
	}
	switch policy {
	case RoundRobin, LeastOutstanding, ConsistentHash, Oracle:
		g, err := routers.Start(policy, s.backends, r)
		if err != nil {
			return nil, err
		}
		s.group, s.urls = g, g.URLs()
		return s, nil
	}
	side := procs.Sidecar{Backends: s.backends, LogLevel: "warn"}
	switch policy {
	case TetherMemory:
		side.Pool = "    affinity: {placement: leastLoaded}"
	case TetherMemoryHash:
	case TetherRedis:
		_, addr, err := env.Redis(policy + "-redis")
		if err != nil {
			return nil, err
		}
		side.Store, side.RedisAddr = "redis", addr
	case TetherGossip:
		side.Store = "gossip"
	case TetherSoft:
		side.Store, side.Pool = "gossip", "    affinity: {mode: soft}"
	default:
		return nil, fmt.Errorf("unknown policy %q", policy)
	}
	for i := range r {
		side.Name = fmt.Sprintf("%s-r%d", policy, i)
		run, err := env.Sidecar(side)
		if err != nil {
			return nil, err
		}
		if side.Store == "gossip" && i == 0 {
			side.GossipJoin = []string{run.Gossip}
		}
		s.urls = append(s.urls, "http://"+run.Addr)
	}
	return s, nil
}

// simEnv runs each policy's simulated fleet on one thread with a lazier
// garbage collector: its work is a few milliseconds of CPU per request
// (parsing and hashing prompts of thousands of tokens) while its clocks
// are simulated, so a second thread and frequent collections would only
// take the machine from the routers and sidecars whose TTFT is measured.
var simEnv = []string{"GOMAXPROCS=1", "GOGC=400"}

// startModelsims starts the backends (one process, one listener each),
// on other free ports when one was taken between the Env's probe and the
// process's bind (a shared machine's other processes take ports too; a
// run starts hundreds).
func startModelsims(env *procs.Env, ids []string, m Model) ([]string, error) {
	var err error
	for attempt := range 3 {
		try := ids
		if attempt > 0 {
			try = make([]string, len(ids))
			for i, id := range ids {
				try[i] = fmt.Sprintf("%s-retry%d", id, attempt)
			}
		}
		var p *procs.Process
		var addrs []string
		if p, addrs, err = env.Modelsims(try, simEnv, m.flags()...); err == nil {
			return addrs, nil
		}
		if p != nil {
			p.Kill()
		}
	}
	return nil, err
}

func (s *stack) close() {
	if s.group != nil {
		s.group.Close()
	}
}
