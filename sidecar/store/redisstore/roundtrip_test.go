package redisstore

import (
	"context"
	"fmt"
	"github.com/tetherproxy/tether/sidecar/config"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
)

// tripCounter counts round trips two ways: go-redis hook invocations (one
// per command or pipeline sent, retries and NOSCRIPT fallbacks included)
// and writes on the sockets (one per request flushed to Redis).
type tripCounter struct {
	hooks  atomic.Int64
	writes atomic.Int64
}

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.hooks.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.hooks.Add(1)
		return next(ctx, cmds)
	}
}

func (c *tripCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, writes: &c.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *tripCounter) options() Options {
	return Options{hooks: []redis.Hook{c}, dialer: c.dial}
}

func (c *tripCounter) reset() { c.hooks.Store(0); c.writes.Store(0) }

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t testing.TB, srv *redistest.Server) map[string]int {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[name] = n
	}
	return calls
}

// TestOneRoundTripPerLookup proves the lookup-and-refresh costs one round
// trip: N lookups send N requests on the socket, through N go-redis
// calls, and Redis runs N transactions of HMGET+PEXPIRE.
func TestOneRoundTripPerLookup(t *testing.T) {
	srv := redistest.Start(t)
	var c tripCounter
	// Round trips are counted, not timed: a loaded CI machine may stall a
	// call past the 200ms the other tests use.
	cfg := cfgFor(srv)
	cfg.Timeout = config.Duration{Duration: 5 * time.Second}
	e := newEnv(t, srv, cfg, c.options())
	if _, err := e.s.Create(ctx, "hit", binding("p", "", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Warm up: the connection is dialled and greeted (HELLO …).
	e.s.Lookup(ctx, "hit", time.Minute)
	srv.Do("CONFIG", "RESETSTAT")
	c.reset()

	const n = 1000
	for i := range n {
		key := "hit"
		if i%2 == 1 {
			key = "miss" // a miss costs the same single trip
		}
		if _, _, err := e.s.Lookup(ctx, key, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	calls := commandCalls(t, srv)
	perLookup := float64(c.writes.Load()) / n
	t.Logf("round trips per lookup = %.2f (socket writes %d, go-redis calls %d, server: multi=%d hmget=%d pexpire=%d exec=%d, for %d lookups)",
		perLookup, c.writes.Load(), c.hooks.Load(), calls["multi"], calls["hmget"], calls["pexpire"], calls["exec"], n)
	if c.writes.Load() != n || c.hooks.Load() != n {
		t.Fatalf("%d socket writes and %d go-redis calls for %d lookups, want %d each", c.writes.Load(), c.hooks.Load(), n, n)
	}
	for _, cmd := range []string{"multi", "hmget", "pexpire", "exec"} {
		if calls[cmd] != n {
			t.Errorf("server ran %s %d times for %d lookups: %v", cmd, calls[cmd], n, calls)
		}
	}
}

// Create and CompareAndDelete are one EVALSHA each once Redis knows the
// script (a flushed script cache costs one more trip, once).
func TestScriptRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	var c tripCounter
	e := newEnv(t, srv, nil, c.options())
	e.s.Create(ctx, "warm", binding("p", "", 0), time.Minute)
	e.s.CompareAndDelete(ctx, "warm", binding("p", "", 0))
	c.reset()
	const n = 200
	for i := range n {
		if _, err := e.s.Create(ctx, fmt.Sprint(i), binding("p", "", 0), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	creates := c.writes.Load()
	c.reset()
	for i := range n {
		if _, err := e.s.CompareAndDelete(ctx, fmt.Sprint(i), binding("p", "", 0)); err != nil {
			t.Fatal(err)
		}
	}
	deletes := c.writes.Load()
	t.Logf("round trips per create = %.2f, per compare-and-delete = %.2f", float64(creates)/n, float64(deletes)/n)
	if creates != n || deletes != n {
		t.Fatalf("%d and %d socket writes for %d creates and %[3]d deletes", creates, deletes, n)
	}
	// After SCRIPT FLUSH (a Redis restart), the first call falls back to
	// EVAL and later calls are single trips again.
	srv.Do("SCRIPT", "FLUSH")
	c.reset()
	e.s.Create(ctx, "a", binding("p", "", 0), time.Minute)
	e.s.Create(ctx, "b", binding("p", "", 0), time.Minute)
	if w := c.writes.Load(); w != 3 {
		t.Fatalf("%d writes for two creates after SCRIPT FLUSH, want 3 (EVALSHA, EVAL, EVALSHA)", w)
	}
}
