//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Black-box tests of tether-sidecar as a process, with no control plane:
// static backends (modelsim processes) and the shared stores, driven only
// through the data port, /debug/bindings and /metrics, as an operator
// would see them. None of them calls cluster.Start.

// staticSims starts n modelsim processes on free ports of 127.0.0.1 and
// returns the pool's backends block listing them.
func staticSims(t *testing.T, n int) (backends string, sims []*cluster.Modelsim) {
	t.Helper()
	addrs := make([]string, n)
	for i := range n {
		sims = append(sims, cluster.StartModelsim(t, cluster.FreeAddr(t, "127.0.0.1"), fmt.Sprintf("sim-%d", i)))
		addrs[i] = fmt.Sprintf("%q", sims[i].Addr)
	}
	return "    static: [" + strings.Join(addrs, ", ") + "]", sims
}

// startStaticRouter starts a sidecar with static backends and the given
// store block without waiting for it to be ready (gossip replicas that
// join each other statically come up together).
func startStaticRouter(t *testing.T, name, storeYAML, backends string) *router {
	t.Helper()
	listen, admin := cluster.FreeAddr(t, "127.0.0.1"), cluster.FreeAddr(t, "127.0.0.1")
	sc := cluster.StartSidecarNoWait(t, cluster.SidecarSpec{
		Name: name, Namespace: "blackbox", IP: "127.0.0.1", Admin: admin,
		Config: sidecarConfig(listen, admin, storeYAML, backends),
	})
	return &router{Sidecar: sc, t: t, listen: listen, admin: admin}
}

func waitReady(t *testing.T, rs ...*router) {
	t.Helper()
	for _, r := range rs {
		if err := r.WaitReady(time.Minute); err != nil {
			t.Fatalf("sidecar %s: %v\n%s", r.Spec.Name, err, r.Tail(40))
		}
	}
}

// handOver binds sessions through a and checks that b serves each on the
// same backend. within > 0 is the deadline, from the moment the bind
// turn was sent, by which b must show the binding on /debug/bindings.
func handOver(t *testing.T, a, b *router, sessions int, within time.Duration) {
	t.Helper()
	var worst time.Duration
	for i := range sessions {
		s := fmt.Sprintf("bb-%d-%d", i, time.Now().UnixNano())
		sent := time.Now()
		home := a.turn(s)
		want, ok := a.binding(s)
		if !ok {
			t.Fatalf("session %s: no binding on %s after its turn", s, a.Spec.Name)
		}
		var seen time.Duration
		for {
			got, ok := b.binding(s)
			seen = time.Since(sent)
			if ok && got.Backend == want.Backend {
				break
			}
			if ok && got.Backend != want.Backend {
				t.Fatalf("session %s: %s holds %s, %s holds %s", s, a.Spec.Name, want.Backend, b.Spec.Name, got.Backend)
			}
			if within > 0 && seen > within {
				t.Fatalf("session %s: %s did not learn the binding made through %s within %v of the bind", s, b.Spec.Name, a.Spec.Name, within)
			}
			if seen > 30*time.Second {
				t.Fatalf("session %s: %s never learned the binding made through %s", s, b.Spec.Name, a.Spec.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		worst = max(worst, seen)
		for range 3 {
			if got := b.turn(s); got != home {
				t.Fatalf("session %s: bound to %s through %s, served by %s through %s", s, home, a.Spec.Name, got, b.Spec.Name)
			}
		}
		// And back: the other replica's turns kept it where it was.
		if got := a.turn(s); got != home {
			t.Fatalf("session %s: moved from %s to %s", s, home, got)
		}
	}
	t.Logf("%d sessions bound through %s were served on the same backend through %s; slowest hand-over %v after the bind turn was sent",
		sessions, a.Spec.Name, b.Spec.Name, worst.Round(time.Millisecond))
}

// TestBlackboxGossip: two sidecar processes with the gossip store, joined
// statically to each other's gossip port and sharing a secret key file. A
// session bound through one is known to the other within a second and is
// served by the same backend there.
func TestBlackboxGossip(t *testing.T) {
	backends, _ := staticSims(t, 3)
	keyFile := gossipKeyFile(t)
	ga, gb := cluster.FreeAddr(t, "127.0.0.1"), cluster.FreeAddr(t, "127.0.0.1")
	store := func(bind, join string) string {
		return fmt.Sprintf("store:\n  backend: gossip\n  gossip: {bind: %q, join: [%q], secretKeyFile: %q}", bind, join, keyFile)
	}
	a := startStaticRouter(t, "replica-a", store(ga, gb), backends)
	b := startStaticRouter(t, "replica-b", store(gb, ga), backends)
	waitReady(t, a, b)
	for _, r := range []*router{a, b} {
		testkit.Eventually(t, 30*time.Second, r.Spec.Name+" to count 2 gossip members", func() error {
			if v := r.metric("tether_gossip_members"); v != 2 {
				return fmt.Errorf("tether_gossip_members = %v", v)
			}
			return nil
		})
		if v := r.metric("tether_gossip_insecure"); v != 0 {
			t.Errorf("%s: tether_gossip_insecure = %v with a key", r.Spec.Name, v)
		}
	}
	handOver(t, a, b, 6, time.Second)
	handOver(t, b, a, 6, time.Second)
}

// gossipKeyFile writes a random 32-byte gossip key, base64, as
// `openssl rand -base64 32` does, and returns its path.
func gossipKeyFile(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBlackboxRedis: two sidecar processes sharing a real redis-server. A
// session bound through one is served by the same backend through the
// other, from its very next turn.
func TestBlackboxRedis(t *testing.T) {
	backends, _ := staticSims(t, 3)
	rs := redistest.Start(t)
	store := fmt.Sprintf("store:\n  backend: redis\n  redis: {address: %q}", rs.Addr)
	a := startStaticRouter(t, "replica-a", store, backends)
	b := startStaticRouter(t, "replica-b", store, backends)
	waitReady(t, a, b)
	handOver(t, a, b, 6, 0)
	handOver(t, b, a, 6, 0)
}

// TestBlackboxStartupErrors: a sidecar that cannot work exits non-zero
// before it listens, and says what is wrong and where.
func TestBlackboxStartupErrors(t *testing.T) {
	closed := cluster.FreeAddr(t, "127.0.0.1") // nothing listens here
	for _, tc := range []struct {
		name, config, want string
	}{{
		name: "invalid config",
		config: `listen: LISTEN
admin: ADMIN
pools:
- name: chat
  sessionSticky: {sources: []}
  backends: {static: ["127.0.0.1:1"]}
`,
		want: "pools[0].sessionSticky.sources: at least one source is required",
	}, {
		name: "redis unreachable",
		config: `listen: LISTEN
admin: ADMIN
store:
  backend: redis
  redis: {address: "` + closed + `"}
pools:
- name: chat
  sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
  backends: {static: ["127.0.0.1:1"]}
`,
		want: "store.redis: cannot reach " + closed + ":",
	}, {
		name: "gossip without a key",
		config: `listen: LISTEN
admin: ADMIN
store:
  backend: gossip
  gossip: {bind: "127.0.0.1:0"}
pools:
- name: chat
  sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
  backends: {static: ["127.0.0.1:1"]}
`,
		want: "store.gossip.secretKeyFile: required: gossip is encrypted and authenticated with a shared key",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			listen, admin := cluster.FreeAddr(t, "127.0.0.1"), cluster.FreeAddr(t, "127.0.0.1")
			cfg := strings.NewReplacer("LISTEN", listen, "ADMIN", admin).Replace(tc.config)
			sc := cluster.StartSidecarNoWait(t, cluster.SidecarSpec{Name: "bad", Namespace: "blackbox", IP: "127.0.0.1", Admin: admin, Config: cfg})
			// Knock on both ports until the process ends: neither may ever answer.
			answered := ""
			deadline := time.After(time.Minute)
		wait:
			for {
				select {
				case <-sc.Done():
					break wait
				case <-deadline:
					t.Fatalf("sidecar still running a minute after start with a broken config:\n%s", sc.Tail(20))
				case <-time.After(5 * time.Millisecond):
				}
				for _, addr := range []string{listen, admin} {
					if c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond); err == nil {
						c.Close()
						answered = addr
					}
				}
			}
			if sc.Err() == nil {
				t.Fatalf("sidecar exited 0, want non-zero:\n%s", sc.Output())
			}
			out := sc.Output()
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not name the problem %q:\n%s", tc.want, out)
			}
			if answered != "" || strings.Contains(out, "tether-sidecar serving") {
				t.Fatalf("sidecar listened (%s answered) before exiting:\n%s", answered, out)
			}
			t.Logf("%s: %v: %s", tc.name, sc.Err(), strings.TrimSpace(out))
		})
	}
}

// TestBlackboxPreStopSleep: the preStop hook the injector gives a
// plain-container sidecar (the image has no shell) sleeps and exits 0,
// reading no config and binding nothing.
func TestBlackboxPreStopSleep(t *testing.T) {
	start := time.Now()
	out, err := exec.Command(cluster.Binary(t, "tether-sidecar"), "--sleep", "1s").CombinedOutput()
	if err != nil {
		t.Fatalf("tether-sidecar --sleep 1s: %v\n%s", err, out)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("returned after %v, before its sleep was over", d)
	}
	if len(out) != 0 {
		t.Fatalf("printed %q", out)
	}
}
