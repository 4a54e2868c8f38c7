package gossip

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// fakeLimits stands in for the server's view of its pools: one pool with
// a TTL and a fixed set of backends.
type fakeLimits struct {
	ttl      time.Duration
	backends map[string]bool
	synced   atomic.Bool
}

func newFakeLimits(ttl time.Duration, backends ...string) *fakeLimits {
	l := &fakeLimits{ttl: ttl, backends: map[string]bool{}}
	for _, b := range backends {
		l.backends[b] = true
	}
	l.synced.Store(true)
	return l
}

func (l *fakeLimits) BindingTTL(pod, prefill string) (time.Duration, bool) {
	if !l.backends[pod] || (prefill != "" && !l.backends[prefill]) {
		return 0, false
	}
	return l.ttl, true
}

func (l *fakeLimits) Synced() bool { return l.synced.Load() }

func withLimits(l Limits) nodeOpt { return func(_ *config.GossipStore, o *Options) { o.Limits = l } }

func withMaxEntries(n int) nodeOpt {
	return func(c *config.GossipStore, _ *Options) { c.MaxEntries = n }
}

// memberlistUserMsg is memberlist's message type of a delegate's user
// message (its messageType userMsg): the first byte of an unencrypted
// packet that memberlist hands to NotifyMsg.
const memberlistUserMsg = 8

// forge sends payload to addr as an attacker on the pod network would: one
// UDP packet framed as a memberlist user message, from a socket that never
// joined the ring.
func forge(t *testing.T, addr string, payload []byte) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(append([]byte{memberlistUserMsg}, payload...)); err != nil {
		t.Fatal(err)
	}
}

func delta(recs ...record) []byte {
	return encode(&message{Kind: kindDelta, From: "attacker", Records: recs})
}

// The attack of issue 10 against a ring that runs without a key: one
// spoofed UDP message (no join) tried to re-point a live session with a
// generation of 2^63-1 and an expiry 40 days out. The generation is
// refused, a backend no pool lists is refused, and what an insecure ring
// does take (anyone who reaches it may write: that is what the key is for)
// lives no longer than the pool's TTL.
func TestForgedPacketOnInsecureRing(t *testing.T) {
	const poolTTL = 5 * time.Minute
	s := startNode(t, newTestNet(), "victim", nil, withLimits(newFakeLimits(poolTTL, "pod-a", "pod-b")))
	if _, err := s.Create(ctx, skey(1), store.Binding{Pod: "pod-a", Gen: 1}, poolTTL); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	sendUntil := func(what string, payload []byte, done func() bool) {
		t.Helper()
		// UDP may drop a packet; resending the same record is idempotent.
		testkit.Eventually(t, 10*time.Second, what, func() error {
			forge(t, s.selfAddr, payload)
			time.Sleep(20 * time.Millisecond)
			if !done() {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	dropped := func(reason string) func() bool {
		return func() bool { return testutil.ToFloat64(s.met.recordsDropped[reason]) > 0 }
	}

	steal := record{Key: keyOf(skey(1)), Gen: 1<<63 - 1, Created: now, TTL: maxTTL, Pod: "pod-b"}
	sendUntil("the forged generation to be refused", delta(steal), dropped(dropGeneration))
	steal.Gen, steal.Pod = 2, "attacker/pod/uid"
	sendUntil("the unknown backend to be refused", delta(steal), dropped(dropUnknownBackend))
	b, ok, _ := s.Peek(ctx, skey(1))
	if !ok || b.Pod != "pod-a" || b.Gen != 1 {
		t.Fatalf("the forged records re-pointed the session: %+v (live %v)", b, ok)
	}

	long := record{Key: keyOf(skey(2)), Gen: 1, Created: now, TTL: maxTTL, Pod: "pod-b"}
	sendUntil("the long-expiry record to arrive", delta(long), func() bool { _, ok, _ := s.Peek(ctx, skey(2)); return ok })
	b, _, _ = s.Peek(ctx, skey(2))
	if limit := time.Now().Add(poolTTL); b.ExpiresAt.After(limit) {
		t.Fatalf("a record from the wire expires at %s, after now + the pool's TTL (%s)", b.ExpiresAt, limit)
	}
	if testutil.ToFloat64(s.met.recordsClamped) == 0 {
		t.Fatal("tether_gossip_records_clamped_total did not count the clamp")
	}
}

// With a key (the default), the same forged packet never reaches the
// store: memberlist refuses what it cannot decrypt and authenticate, a
// sync request as much as a delta.
func TestForgedPacketOnKeyedRing(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testkit.SyncBuffer
	withLog := func(_ *config.GossipStore, o *Options) {
		o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s := startNode(t, newTestNet(), "victim", nil, withKey(keyFile), withLog,
		withLimits(newFakeLimits(time.Minute, "pod-a", "pod-b")))
	var merged atomic.Int64
	hook := func(key, applyResult) { merged.Add(1) }
	s.hook.Store(&hook)
	if _, err := s.Create(ctx, skey(1), store.Binding{Pod: "pod-a", Gen: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	steal := delta(record{Key: keyOf(skey(1)), Gen: 2, Created: 1, TTL: 60_000, Pod: "pod-b"})
	pull := encode(&message{Kind: kindSyncReq, From: "attacker", SyncID: 1})
	testkit.Eventually(t, 10*time.Second, "memberlist to refuse both unencrypted packets", func() error {
		forge(t, s.selfAddr, steal)
		forge(t, s.selfAddr, pull)
		time.Sleep(20 * time.Millisecond)
		if n := logs.Count("Decrypt packet failed"); n < 2 {
			return fmt.Errorf("%d refusals logged", n)
		}
		return nil
	})
	if b, ok, _ := s.Peek(ctx, skey(1)); !ok || b.Pod != "pod-a" || b.Gen != 1 {
		t.Fatalf("an unkeyed packet re-pointed the session: %+v (live %v)", b, ok)
	}
	if n := merged.Load(); n != 0 {
		t.Fatalf("%d records of unkeyed packets reached the store", n)
	}
	if n := testutil.ToFloat64(s.met.msgsRecv.WithLabelValues("delta")) + testutil.ToFloat64(s.met.msgsRecv.WithLabelValues("sync_request")); n != 0 {
		t.Fatalf("%v unkeyed messages were decoded", n)
	}
}

// A flood of records with long expiries (issue 10: 3,000 forged records
// evicted 11 of 20 real bindings, because eviction dropped the entry that
// expired first) no longer pushes out the sessions this replica serves:
// eviction takes records it never served first, and their expiries are
// clamped to the pool's TTL anyway. The flood goes through the path every
// packet takes after memberlist (NotifyMsg), as from a key holder.
func TestForgedFloodKeepsServedSessions(t *testing.T) {
	const poolTTL = 5 * time.Minute
	s := startNode(t, newTestNet(), "victim", nil, withMaxEntries(100),
		withLimits(newFakeLimits(poolTTL, "pod-a", "pod-b")))
	const real = 20
	for i := range real {
		if _, err := s.Create(ctx, skey(i), store.Binding{Pod: "pod-a", Gen: 1}, poolTTL); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixMilli()
	const forged = 3000
	var batch []record
	for i := range forged {
		batch = append(batch, record{Key: keyOf(fmt.Sprint("forged-", i)), Gen: 1, Created: now, TTL: maxTTL, Pod: "pod-b"})
		if len(batch) == 20 {
			s.receive(delta(batch...))
			batch = batch[:0]
		}
	}
	if n := testutil.ToFloat64(s.met.recordsClamped); n != forged {
		t.Fatalf("%v of %d long expiries clamped", n, forged)
	}
	if ev := s.st.evicted.Load(); ev < forged-100 {
		t.Fatalf("only %d evictions: the store is not under pressure", ev)
	}
	lost := 0
	for i := range real {
		if b, ok, _ := s.Peek(ctx, skey(i)); !ok || b.Pod != "pod-a" {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("the flood evicted %d of %d bindings this replica created", lost, real)
	}
}

// Until the pools' discovery has its first view a replica cannot tell a
// foreign backend from one it has not heard of yet: it refuses records
// (counted) and pulls no state, then pulls once discovery is synced and
// ends up with everything it refused.
func TestUnsyncedDiscoveryDefersTransfer(t *testing.T) {
	tn := newTestNet()
	lim := newFakeLimits(time.Minute, "pod-a")
	lim.synced.Store(false)
	n0 := startNode(t, tn, "n0", nil)
	if _, err := n0.Create(ctx, skey(1), store.Binding{Pod: "pod-a", Gen: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, []*Store{n0})
	n1 := startNode(t, tn, "n1", []string{n0.selfAddr}, withLimits(lim))
	waitMembers(t, []*Store{n0, n1}, 2, 10*time.Second)
	if _, err := n0.Create(ctx, skey(2), store.Binding{Pod: "pod-a", Gen: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the delta to be refused before discovery is synced", func() error {
		if testutil.ToFloat64(n1.met.recordsDropped[dropNotSynced]) == 0 {
			return fmt.Errorf("not refused yet")
		}
		return nil
	})
	time.Sleep(2 * n1.opts.StartupGrace)
	if n1.Synced() || n1.Len() != 0 {
		t.Fatalf("before discovery synced: synced %v, %d bindings", n1.Synced(), n1.Len())
	}
	lim.synced.Store(true)
	testkit.Eventually(t, 10*time.Second, "the state transfer after discovery synced", func() error {
		if !n1.Synced() || n1.Len() != 2 {
			return fmt.Errorf("synced %v, %d bindings", n1.Synced(), n1.Len())
		}
		return nil
	})
}

func TestAdmit(t *testing.T) {
	s := &Store{opts: Options{Limits: newFakeLimits(time.Minute, "a", "p"), TombstoneGrace: 30 * time.Second}}
	const now = 1_000_000
	for _, c := range []struct {
		name    string
		r       record
		drop    string
		expires int64
		clamped bool
	}{
		{"within limits", record{Gen: 3, TTL: 1000, Pod: "a"}, "", now + 1000, false},
		{"long expiry", record{Gen: 3, TTL: maxTTL, Pod: "a"}, "", now + 60_000, true},
		{"long tombstone", record{Gen: 3, TTL: maxTTL, Pod: "a", Tomb: true}, "", now + 150_000, true},
		{"pair", record{Gen: 1, TTL: 1000, Pod: "a", Prefill: "p"}, "", now + 1000, false},
		{"max generation", record{Gen: store.MaxGeneration, TTL: 1000, Pod: "a"}, "", now + 1000, false},
		{"generation", record{Gen: store.MaxGeneration + 1, TTL: 1000, Pod: "a"}, dropGeneration, 0, false},
		{"unknown pod", record{Gen: 1, TTL: 1000, Pod: "x"}, dropUnknownBackend, 0, false},
		{"unknown prefill", record{Gen: 1, TTL: 1000, Pod: "a", Prefill: "x"}, dropUnknownBackend, 0, false},
	} {
		v, drop, clamped := s.admit(c.r, now)
		if drop != c.drop || clamped != c.clamped || (drop == "" && v.Expires != c.expires) {
			t.Errorf("%s: drop %q clamped %v expires %d; want %q %v %d", c.name, drop, clamped, v.Expires, c.drop, c.clamped, c.expires)
		}
	}
	s.opts.Limits.(*fakeLimits).synced.Store(false)
	if _, drop, _ := s.admit(record{Gen: 1, TTL: 1000, Pod: "a"}, now); drop != dropNotSynced {
		t.Errorf("before discovery synced: drop %q", drop)
	}
}

func TestNextGenerationSaturates(t *testing.T) {
	st := newState(10, 0)
	st.create(k(1), value{Gen: store.MaxGeneration, Pod: "a"}, 0, 1000)
	v, _ := st.lookup(k(1), 0, 0, false)
	if _, ok := st.compareAndDelete(k(1), v.Gen, "a", "", 0, 0); !ok {
		t.Fatal("delete failed")
	}
	got, ok := st.create(k(1), value{Gen: 1, Pod: "b"}, 1, 1000)
	if !ok || got.Gen != store.MaxGeneration {
		t.Fatalf("create over a tombstone of the maximum generation: gen %d (ok %v), want %d", got.Gen, ok, uint64(store.MaxGeneration))
	}
}
