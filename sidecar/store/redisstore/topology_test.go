package redisstore

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// A real Sentinel in front of a master and a replica: the store finds the
// master through the Sentinel, and after the master dies and the Sentinel
// promotes the replica, it writes to the new master by itself.
func TestSentinelFailover(t *testing.T) {
	// Full sync at once (the default waits 5s for more replicas).
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", itoa(master.Port))
	testkit.Eventually(t, 10*time.Second, "replica in sync", func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	testkit.Eventually(t, 15*time.Second, "sentinel knows the replica", func() bool {
		r, err := sentinel.Do("SENTINEL", "replicas", "mymaster")
		return err == nil && strings.Contains(r, itoa(replica.Port))
	})

	cfg := &config.RedisStore{
		Addresses:  []string{sentinel.Addr},
		MasterName: "mymaster",
		Timeout:    config.Duration{Duration: 200 * time.Millisecond},
		KeyPrefix:  "tether",
	}
	e := newEnv(t, master, cfg, Options{BreakerMinBackoff: 50 * time.Millisecond, BreakerMaxBackoff: 200 * time.Millisecond})
	if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	if pod, err := master.Do("HGET", "tether:k", "pod"); pod != "p" || err != nil {
		t.Fatalf("binding not on the master: %q %v", pod, err)
	}

	// Replication is asynchronous: a write acknowledged just before the
	// master dies can be lost with it. Wait for the replica, so the test
	// checks the store, not that Redis property.
	testkit.Eventually(t, 10*time.Second, "binding replicated", func() bool {
		pod, _ := replica.Do("HGET", "tether:k", "pod")
		return pod == "p"
	})
	master.Kill()
	testkit.Eventually(t, 30*time.Second, "the store writes to the promoted replica", func() bool {
		_, err := e.s.Create(ctx, "k2", binding("q", "", 0), time.Minute)
		return err == nil
	})
	if pod, err := replica.Do("HGET", "tether:k2", "pod"); pod != "q" || err != nil {
		t.Fatalf("binding not on the new master: %q %v", pod, err)
	}
	// Written before the failover, replicated, still there.
	if b, ok, err := e.s.Lookup(ctx, "k", time.Minute); !ok || err != nil || b.Pod != "p" {
		t.Fatalf("Lookup of a pre-failover binding: %+v %v %v", b, ok, err)
	}
}

func TestCluster(t *testing.T) {
	node := redistest.StartCluster(t)
	cfg := &config.RedisStore{
		Addresses: []string{node.Addr},
		Timeout:   config.Duration{Duration: 200 * time.Millisecond},
		KeyPrefix: "tether",
	}
	e := newEnv(t, node, cfg, Options{})
	if _, err := e.s.Create(ctx, "k", binding("p", "f", 1), time.Minute); err != nil {
		t.Fatal(err)
	}
	if b, ok, err := e.s.Lookup(ctx, "k", time.Minute); !ok || err != nil || b.PrefillPod != "f" || b.Gen != 1 {
		t.Fatalf("Lookup on Cluster: %+v %v %v", b, ok, err)
	}
	if b, ok, err := e.s.Peek(ctx, "k"); !ok || err != nil || b.ExpiresAt.IsZero() {
		t.Fatalf("Peek on Cluster: %+v %v %v", b, ok, err)
	}
	if ok, err := e.s.CompareAndDelete(ctx, "k", binding("p", "f", 1)); !ok || err != nil {
		t.Fatalf("CompareAndDelete on Cluster: %v %v", ok, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
