package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
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
	log *testkit.SyncBuffer
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
	e := &env{srv: srv, reg: prometheus.NewRegistry(), log: &testkit.SyncBuffer{}}
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
