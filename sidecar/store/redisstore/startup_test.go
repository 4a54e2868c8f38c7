package redisstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// requireAtStartup: false with Redis down: the store starts at once,
// degraded (every call refused without touching the network, the breaker
// gauge at 1), and once a real redis-server comes up on the address,
// stickiness resumes without a restart.
func TestStartDegradedThenReconnect(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill() // Redis is down when the sidecar starts
	cfg := cfgFor(srv)
	no := false
	cfg.RequireAtStartup = &no
	start := time.Now()
	e := newEnv(t, srv, cfg, Options{ReconnectInterval: 50 * time.Millisecond, StartupTimeout: time.Minute})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a degraded start took %s", d)
	}
	if v := testkit.Metric(t, e.reg, "tether_store_breaker_open", "backend", "redis"); v != 1 {
		t.Fatalf("tether_store_breaker_open = %v while Redis is down, want 1", v)
	}
	if !strings.Contains(e.log.String(), "cannot reach "+srv.Addr) {
		t.Fatalf("the degraded start does not name the address and cause:\n%s", e.log.String())
	}
	if _, err := e.s.Create(ctx, "k", store.Binding{Pod: "a", Gen: 1}, time.Minute); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Create while degraded: %v, want ErrUnavailable", err)
	}

	srv.Restart()
	testkit.Eventually(t, 10*time.Second, "stickiness to resume once Redis is up", func() error {
		if v := testkit.Metric(t, e.reg, "tether_store_breaker_open", "backend", "redis"); v != 0 {
			return fmt.Errorf("breaker gauge %v", v)
		}
		if _, err := e.s.Create(ctx, "k", store.Binding{Pod: "a", Gen: 1}, time.Minute); err != nil {
			return err
		}
		b, ok, err := e.s.Lookup(ctx, "k", time.Minute)
		if err != nil || !ok || b.Pod != "a" {
			return fmt.Errorf("lookup: %+v %v %v", b, ok, err)
		}
		return nil
	})
}

// A refused login is a configuration error, not an outage: it stops the
// sidecar even with requireAtStartup: false.
func TestDegradedStartStillRefusesBadCredentials(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("wrong"), 0o600)
	cfg := cfgFor(srv)
	no := false
	cfg.RequireAtStartup, cfg.PasswordFile = &no, pw
	if _, err := New(ctx, cfg, Options{}); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("New with a wrong password and requireAtStartup: false: %v", err)
	}
}
