package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
)

func benchStore(b *testing.B, c *tripCounter) (*Store, *redistest.Server) {
	b.Helper()
	srv := redistest.Start(b)
	opts := Options{}
	if c != nil {
		opts = c.options()
	}
	cfg := &config.RedisStore{Address: srv.Addr, Timeout: config.Duration{Duration: time.Second}, KeyPrefix: "tether"}
	s, err := New(ctx, cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, srv
}

// BenchmarkLookupRefresh is the sticky hot path: one lookup-and-refresh of
// a live binding against a real redis-server on loopback. It reports the
// round trips (socket writes) per lookup, which must be 1.
func BenchmarkLookupRefresh(b *testing.B) {
	var c tripCounter
	s, _ := benchStore(b, &c)
	key := session.StoreKey("pool", "conversation")
	if _, err := s.Create(ctx, key, binding("pod-a", "", 0), time.Minute); err != nil {
		b.Fatal(err)
	}
	s.Lookup(ctx, key, time.Minute)
	c.reset()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := s.Lookup(ctx, key, 5*time.Minute); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric(float64(c.writes.Load())/float64(b.N), "roundtrips/op")
}

// BenchmarkLookupRefreshParallel: many requests at once on one store
// (connection pool), distinct sessions.
func BenchmarkLookupRefreshParallel(b *testing.B) {
	s, _ := benchStore(b, nil)
	const sessions = 1024
	keys := make([]string, sessions)
	for i := range keys {
		keys[i] = session.StoreKey("pool", fmt.Sprint("conv-", i))
		if _, err := s.Create(ctx, keys[i], binding("pod-a", "", 0), time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := keys[next.Add(1)%sessions]
			if _, _, err := s.Lookup(ctx, k, 5*time.Minute); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCreate commits a new session's binding (Lua create-if-absent).
func BenchmarkCreate(b *testing.B) {
	var c tripCounter
	s, _ := benchStore(b, &c)
	s.Create(ctx, "warm", binding("p", "", 0), time.Minute)
	c.reset()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if _, err := s.Create(ctx, fmt.Sprint("new-", i), binding("pod-a", "", 0), time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.writes.Load())/float64(b.N), "roundtrips/op")
}

// BenchmarkLookupBreakerOpen is what a request pays for the store while
// Redis is down and the breaker is open: no network at all.
func BenchmarkLookupBreakerOpen(b *testing.B) {
	s, srv := benchStore(b, nil)
	srv.Kill()
	for range 10 {
		s.Lookup(ctx, "k", time.Minute)
	}
	if !s.br.isOpen() {
		b.Fatal("breaker not open")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Lookup(ctx, "k", time.Minute); err == nil {
			b.Fatal("no error")
		}
	}
}
