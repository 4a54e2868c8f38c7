package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store/redis/redistest"
)

// TestMain fails the run if goroutines outlive the tests. It waits up to
// 3s for them: after an outage go-redis's pool redials in a goroutine
// that sleeps 1s between tries and notices Close only when it wakes.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(3 * time.Second)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one store under test with its registry and log.
type env struct {
	s   *Store
	srv *redistest.Server
	reg *prometheus.Registry
	log *syncBuf
}

func cfgFor(srv *redistest.Server) *config.RedisStore {
	return &config.RedisStore{
		Address:   srv.Addr,
		Timeout:   config.Duration{Duration: 200 * time.Millisecond},
		KeyPrefix: "tether",
	}
}

func newEnv(t *testing.T, srv *redistest.Server, cfg *config.RedisStore, opts Options) *env {
	t.Helper()
	if cfg == nil {
		cfg = cfgFor(srv)
	}
	e := &env{srv: srv, reg: prometheus.NewRegistry(), log: &syncBuf{}}
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts.Reg, opts.Log = e.reg, log
	s, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e.s = s
	return e
}

// counter reads a metric's value for the given label values (any metric
// type with a single value).
func (e *env) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), substr)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
