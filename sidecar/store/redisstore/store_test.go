package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

var ctx = context.Background()

func binding(pod, prefill string, gen uint64) store.Binding {
	return store.Binding{Pod: pod, PrefillPod: prefill, Gen: gen, Created: time.Now()}
}

func TestCreateLookupPeek(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	key := session.StoreKey("pool", "conv-1")

	if _, ok, err := e.s.Lookup(ctx, key, time.Minute); ok || err != nil {
		t.Fatalf("Lookup of a new key: ok=%v err=%v", ok, err)
	}
	if _, ok, err := e.s.Peek(ctx, key); ok || err != nil {
		t.Fatalf("Peek of a new key: ok=%v err=%v", ok, err)
	}
	// Lookup of a missing key must not leave anything behind.
	if n, _ := e.srv.Do("DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after a missed Lookup", n)
	}

	want := binding("decode-1", "prefill-1", 3)
	got, err := e.s.Create(ctx, key, want, time.Minute)
	if err != nil || !got.SameTarget(want) || !got.Created.Equal(want.Created) {
		t.Fatalf("Create = %+v, %v; want %+v", got, err, want)
	}
	if d := time.Until(got.ExpiresAt); d <= 50*time.Second || d > time.Minute {
		t.Errorf("Create ExpiresAt in %s, want about 1m", d)
	}

	got, ok, err := e.s.Lookup(ctx, key, 2*time.Minute)
	if err != nil || !ok || !got.SameTarget(want) || !got.Created.Equal(want.Created) {
		t.Fatalf("Lookup = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if d := time.Until(got.ExpiresAt); d <= 110*time.Second || d > 2*time.Minute {
		t.Errorf("Lookup ExpiresAt in %s, want about 2m", d)
	}

	got, ok, err = e.s.Peek(ctx, key)
	if err != nil || !ok || !got.SameTarget(want) {
		t.Fatalf("Peek = %+v, %v, %v", got, ok, err)
	}
	if d := time.Until(got.ExpiresAt); d <= 110*time.Second || d > 2*time.Minute {
		t.Errorf("Peek ExpiresAt in %s, want the remaining ~2m", d)
	}
}

func TestCreateFillsZeroCreated(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	before := time.Now()
	got, err := e.s.Create(ctx, "k", store.Binding{Pod: "p"}, time.Minute)
	if err != nil || got.Created.Before(before) || got.Created.After(time.Now()) {
		t.Fatalf("Create = %+v, %v: Created not set to now", got, err)
	}
	l, _, _ := e.s.Lookup(ctx, "k", time.Minute)
	if !l.Created.Equal(got.Created) {
		t.Fatalf("Lookup Created %v, Create returned %v", l.Created, got.Created)
	}
}

func TestLookupRefreshesTTL(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	if _, err := e.s.Create(ctx, "k", binding("p", "", 0), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Let the TTL run down (without sleeping), then look up.
	if _, err := e.srv.Do("PEXPIRE", "tether:k", "500"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.s.Lookup(ctx, "k", 10*time.Second); !ok || err != nil {
		t.Fatalf("Lookup: %v %v", ok, err)
	}
	p := pttl(t, e.srv, "tether:k")
	if p <= 9000 || p > 10000 {
		t.Fatalf("PTTL after Lookup %dms, want it slid back to ~10000", p)
	}
	// Peek does not refresh.
	e.srv.Do("PEXPIRE", "tether:k", "5000")
	e.s.Peek(ctx, "k")
	if p := pttl(t, e.srv, "tether:k"); p > 5000 {
		t.Fatalf("PTTL after Peek %dms: Peek refreshed", p)
	}
}

func pttl(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	s, err := srv.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(s)
	return n
}

func TestExpiry(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.s.Peek(ctx, "k"); !ok {
		t.Fatal("binding gone at once")
	}
	testkit.Eventually(t, 5*time.Second, "binding with a 1s TTL expires", func() bool {
		_, ok, err := e.s.Peek(ctx, "k")
		return !ok && err == nil
	})
	// An expired binding can be created anew.
	got, err := e.s.Create(ctx, "k", binding("q", "", 1), time.Minute)
	if err != nil || got.Pod != "q" {
		t.Fatalf("Create after expiry = %+v, %v", got, err)
	}
}

// Two replicas (two Store instances, two connection pools) race on each
// of many new sessions: both must end with the same binding, the one that
// is in Redis.
func TestCreateRaceConverges(t *testing.T) {
	srv := redistest.Start(t)
	a := newEnv(t, srv, nil, Options{})
	b := newEnv(t, srv, nil, Options{})
	for round := range 200 {
		key := session.StoreKey("pool", fmt.Sprint("race-", round))
		var got [2]store.Binding
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range []*Store{a.s, b.s} {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.Create(ctx, key, binding(fmt.Sprint("pod-", i), "", 0), time.Minute)
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v %v", round, errs[0], errs[1])
		}
		if !got[0].SameTarget(got[1]) || !got[0].Created.Equal(got[1].Created) {
			t.Fatalf("round %d: replicas disagree: %+v vs %+v", round, got[0], got[1])
		}
		pod, _ := srv.Do("HGET", "tether:"+key, "pod")
		if pod != got[0].Pod {
			t.Fatalf("round %d: Redis holds %q, replicas use %q", round, pod, got[0].Pod)
		}
	}
}

func TestCreateReturnsExistingWinner(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	first := binding("p1", "f1", 2)
	if _, err := e.s.Create(ctx, "k", first, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.Create(ctx, "k", binding("p2", "", 3), time.Hour)
	if err != nil || !got.SameTarget(first) || !got.Created.Equal(first.Created) {
		t.Fatalf("second Create = %+v, %v; want the first %+v", got, err, first)
	}
	if d := time.Until(got.ExpiresAt); d > time.Minute || d < 50*time.Second {
		t.Errorf("winner ExpiresAt in %s, want the winner's own ~1m", d)
	}
	if p := pttl(t, e.srv, "tether:k"); p > 60000 {
		t.Errorf("losing Create changed the TTL to %dms", p)
	}
}

func TestCompareAndDelete(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	cur := binding("p", "f", 4)
	if _, err := e.s.Create(ctx, "k", cur, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []store.Binding{
		{Pod: "p", PrefillPod: "f", Gen: 3},     // older generation
		{Pod: "other", PrefillPod: "f", Gen: 4}, // another pod
		{Pod: "p", PrefillPod: "g", Gen: 4},     // another prefill pod
		{Pod: "p", PrefillPod: "", Gen: 4},      // no prefill pod
	} {
		if ok, err := e.s.CompareAndDelete(ctx, "k", stale); ok || err != nil {
			t.Fatalf("CompareAndDelete(%+v) = %v, %v: deleted a newer binding", stale, ok, err)
		}
	}
	if _, ok, _ := e.s.Peek(ctx, "k"); !ok {
		t.Fatal("binding gone after stale deletes")
	}
	// Created and ExpiresAt are not part of the identity.
	if ok, err := e.s.CompareAndDelete(ctx, "k", store.Binding{Pod: "p", PrefillPod: "f", Gen: 4}); !ok || err != nil {
		t.Fatalf("CompareAndDelete(current) = %v, %v", ok, err)
	}
	if _, ok, _ := e.s.Peek(ctx, "k"); ok {
		t.Fatal("binding still there")
	}
	if ok, err := e.s.CompareAndDelete(ctx, "k", cur); ok || err != nil {
		t.Fatalf("CompareAndDelete of a missing key = %v, %v", ok, err)
	}
}

// Operators inspect bindings with redis-cli as they did with Kthena, and a
// binding Kthena wrote (pod and prefillPod only) reads as generation 0.
func TestKthenaFields(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{})
	b := binding("decode-7", "prefill-3", 2)
	if _, err := e.s.Create(ctx, "k", b, time.Minute); err != nil {
		t.Fatal(err)
	}
	all, err := e.srv.Do("HGETALL", "tether:k")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	f := strings.Split(all, "\n")
	for i := 0; i+1 < len(f); i += 2 {
		got[f[i]] = f[i+1]
	}
	want := map[string]string{
		"pod": "decode-7", "prefillPod": "prefill-3", "gen": "2",
		"created": strconv.FormatInt(b.Created.UnixNano(), 10),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("HGETALL = %v, want %v", got, want)
	}

	if _, err := e.srv.Do("HSET", "tether:kthena", "pod", "d", "prefillPod", "p"); err != nil {
		t.Fatal(err)
	}
	l, ok, err := e.s.Lookup(ctx, "kthena", time.Minute)
	if err != nil || !ok || l.Pod != "d" || l.PrefillPod != "p" || l.Gen != 0 || !l.Created.IsZero() {
		t.Fatalf("Lookup of a Kthena hash = %+v, %v, %v", l, ok, err)
	}
	if p := pttl(t, e.srv, "tether:kthena"); p <= 0 {
		t.Fatalf("Lookup did not set a TTL on a persistent hash: %d", p)
	}
	if ok, err := e.s.CompareAndDelete(ctx, "kthena", store.Binding{Pod: "d", PrefillPod: "p"}); !ok || err != nil {
		t.Fatalf("CompareAndDelete of a Kthena hash = %v, %v", ok, err)
	}
}

// The store adds nothing that identifies a user: the Redis key is the
// prefix and the caller's (already hashed) key, the values are backend
// names and numbers.
func TestKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	cfg := cfgFor(srv)
	cfg.KeyPrefix = "team-a"
	e := newEnv(t, srv, cfg, Options{})
	const raw = "user@example.com"
	key := session.StoreKey("pool", raw)
	if _, err := e.s.Create(ctx, key, binding("pod-a", "", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.s.Lookup(ctx, key, time.Minute)
	keys, err := srv.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	if keys != "team-a:"+key {
		t.Fatalf("KEYS * = %q, want only %q", keys, "team-a:"+key)
	}
	vals, _ := srv.Do("HVALS", "team-a:"+key)
	for _, v := range strings.Split(vals, "\n") {
		if strings.Contains(v, raw) || strings.Contains(v, "pool") {
			t.Fatalf("value %q carries the session or pool", v)
		}
	}
	if strings.Contains(vals, raw) || strings.Contains(keys, raw) {
		t.Fatal("raw session key stored")
	}
}

// Redis dies: operations fail at once with errors (never hang), the
// breaker opens and answers without the network, Redis returns and
// stickiness resumes by itself.
func TestFailOpenAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, srv, nil, Options{BreakerThreshold: 3, BreakerMinBackoff: 50 * time.Millisecond, BreakerMaxBackoff: 200 * time.Millisecond, LogInterval: time.Hour})
	if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Kill()

	// The first failures reach the network; then the breaker answers.
	for i := range 3 {
		_, _, err := e.s.Lookup(ctx, "k", time.Minute)
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("call %d with Redis down: %v; want a network error wrapping ErrUnavailable", i, err)
		}
	}
	for _, call := range []func() error{
		func() error { _, _, err := e.s.Lookup(ctx, "k", time.Minute); return err },
		func() error { _, err := e.s.Create(ctx, "k", binding("q", "", 0), time.Minute); return err },
		func() error { _, err := e.s.CompareAndDelete(ctx, "k", binding("p", "", 0)); return err },
		func() error { _, _, err := e.s.Peek(ctx, "k"); return err },
	} {
		if err := call(); !errors.Is(err, ErrBreakerOpen) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("with the breaker open: %v; want ErrBreakerOpen", err)
		}
	}
	if v := testkit.Metric(t, e.reg, "tether_store_breaker_open", "backend", "redis"); v != 1 {
		t.Fatalf("tether_store_breaker_open = %v, want 1", v)
	}
	if v := testkit.Metric(t, e.reg, "tether_store_errors_total", "backend", "redis", "op", "lookup"); v != 4 {
		t.Fatalf("lookup errors = %v, want 4", v)
	}
	if v := testkit.Metric(t, e.reg, "tether_store_errors_total", "backend", "redis", "op", "create"); v != 1 {
		t.Fatalf("create errors = %v, want 1", v)
	}

	srv.Restart() // same port, empty dataset
	testkit.Eventually(t, 10*time.Second, "the store answers again after Redis returns", func() bool {
		_, err := e.s.Create(ctx, "k2", binding("p", "", 0), time.Minute)
		return err == nil
	})
	if _, ok, err := e.s.Lookup(ctx, "k2", time.Minute); !ok || err != nil {
		t.Fatalf("Lookup after recovery: %v %v", ok, err)
	}
	if v := testkit.Metric(t, e.reg, "tether_store_breaker_open", "backend", "redis"); v != 0 {
		t.Fatalf("tether_store_breaker_open = %v after recovery", v)
	}
	// Many errors, one error line (LogInterval is an hour here), plus the
	// breaker's open and close lines.
	if n := e.log.Count("redis store error"); n != 1 {
		t.Errorf("%d error log lines, want 1 (rate-limited):\n%s", n, e.log)
	}
	if e.log.Count("redis breaker open") != 1 || e.log.Count("redis breaker closed") != 1 {
		t.Errorf("breaker transitions not logged once each:\n%s", e.log)
	}
}

// A hung Redis (the process stopped: connections accepted, nothing
// answered) costs each call its timeout, never more, and an error.
func TestHungRedisTimesOut(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, srv, nil, Options{BreakerThreshold: 1000})
	if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	_, _, err := e.s.Lookup(ctx, "k", time.Minute)
	srv.Resume()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Lookup on a hung Redis: %v; want ErrUnavailable", err)
	}
	testkit.Eventually(t, 5*time.Second, "Lookup works after Redis resumes", func() bool {
		_, ok, err := e.s.Lookup(ctx, "k", time.Minute)
		return ok && err == nil
	})
}

// A caller that gives up says nothing about Redis: it must not open the
// breaker.
func TestCallerCancelIsNotARedisFailure(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{BreakerThreshold: 1})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for range 5 {
		if _, _, err := e.s.Lookup(cctx, "k", time.Minute); err == nil {
			t.Fatal("Lookup with a cancelled context succeeded")
		}
	}
	if _, _, err := e.s.Lookup(ctx, "k", time.Minute); err != nil {
		t.Fatalf("after cancelled calls: %v (breaker opened?)", err)
	}
}

// A reply error (someone wrote another type at our key) proves Redis is
// up: counted, returned, but the breaker stays closed.
func TestReplyErrorKeepsBreakerClosed(t *testing.T) {
	e := newEnv(t, redistest.Start(t), nil, Options{BreakerThreshold: 1})
	e.srv.Do("SET", "tether:str", "x")
	for range 3 {
		_, _, err := e.s.Lookup(ctx, "str", time.Minute)
		if err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Lookup of a string key: %v; want WRONGTYPE, not unavailability", err)
		}
	}
	if e.s.br.isOpen() {
		t.Fatal("breaker opened on reply errors")
	}
}

func TestStartupUnreachable(t *testing.T) {
	port := freePortFor(t)
	cfg := cfgFor(&redistest.Server{Addr: "127.0.0.1:" + port})
	_, err := New(ctx, cfg, Options{StartupTimeout: 300 * time.Millisecond})
	want := "store.redis: cannot reach 127.0.0.1:" + port + ": connection refused"
	if err == nil || err.Error() != want {
		t.Fatalf("New on a closed port: %v\nwant %s", err, want)
	}
}

func TestStartupAuth(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, user, password, want string
	}{
		{"wrong password", "", "wrong\n", `store.redis: authentication failed for user "default": WRONGPASS`},
		{"unknown user", "alice", "s3cret\n", `store.redis: authentication failed for user "alice": WRONGPASS`},
		{"no password", "", "", `store.redis: authentication failed for user "default": NOAUTH`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfgFor(srv)
			cfg.Username = tc.user
			if tc.password != "" {
				cfg.PasswordFile = write(tc.name, tc.password)
			}
			_, err := New(ctx, cfg, Options{StartupTimeout: 300 * time.Millisecond})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("New: %v\nwant prefix %s", err, tc.want)
			}
		})
	}
	t.Run("password file", func(t *testing.T) {
		cfg := cfgFor(srv)
		cfg.PasswordFile = write("ok", "s3cret\n") // trailing newline as kubectl leaves it
		e := newEnv(t, srv, cfg, Options{})
		if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing password file", func(t *testing.T) {
		cfg := cfgFor(srv)
		cfg.PasswordFile = filepath.Join(dir, "nope")
		_, err := New(ctx, cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), "passwordFile") {
			t.Fatalf("New: %v", err)
		}
	})
}

// Startup waits for a Redis that comes up a moment after the sidecar.
func TestStartupWaitsForRedis(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	done := make(chan error, 1)
	go func() {
		s, err := New(ctx, cfgFor(srv), Options{StartupTimeout: 20 * time.Second})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let New fail a few times first
	srv.Restart()
	if err := <-done; err != nil {
		t.Fatalf("New while Redis starts: %v", err)
	}
}

func TestNoGoroutinesAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newEnv(t, srv, nil, Options{BreakerThreshold: 1000})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			k := fmt.Sprint(i)
			e.s.Create(ctx, k, binding("p", "", 0), time.Minute)
			e.s.Lookup(ctx, k, time.Minute)
		})
	}
	wg.Wait()
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func freePortFor(t *testing.T) string {
	s := redistest.Start(t)
	s.Kill()
	return strconv.Itoa(s.Port)
}

func TestMetricsSharedRegistry(t *testing.T) {
	srv := redistest.Start(t)
	a := newEnv(t, srv, nil, Options{})
	// A second store on the same registry reuses the collectors.
	s, err := New(ctx, cfgFor(srv), Options{Reg: a.reg})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if v := testkit.Metric(t, a.reg, "tether_store_errors_total", "op", "peek"); v != 0 {
		t.Fatalf("errors = %v", v)
	}
}
