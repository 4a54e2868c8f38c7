//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Scenarios 1, 2 and 8: several router replicas, each with its sidecar,
// share bindings through the gossip ring or Redis, so a session stays on
// its backend whichever replica takes its next turn.

var routerLabels = map[string]string{"app": "router"}

// fleet is the router Deployment: replicas by pod name.
type fleet struct {
	e        *env
	store    func(ip string) string // the store block for a replica on ip
	replicas map[string]*router
	order    []string // live replicas, oldest first
	next     int
}

// gossipFleet: replicas find each other through the API (pods labelled
// app=router), each binding its own 127.0.1.x on one shared port.
func gossipFleet(e *env) *fleet {
	port := cluster.FreePort(e.t, "127.0.1.1")
	key := gossipKeyFile(e.t)
	return &fleet{e: e, replicas: map[string]*router{}, store: func(ip string) string {
		return fmt.Sprintf("store:\n  backend: gossip\n  gossip: {bind: \"%s:%d\", discovery: kubernetes, peerSelector: \"app=router\", secretKeyFile: %q}", ip, port, key)
	}}
}

// redisFleet: replicas share one real redis-server.
func redisFleet(e *env) *fleet {
	rs := redistest.Start(e.t)
	return &fleet{e: e, replicas: map[string]*router{}, store: func(string) string {
		return fmt.Sprintf("store:\n  backend: redis\n  redis: {address: %q}", rs.Addr)
	}}
}

// scaleUp adds n replicas: for each, the router pod is created and reported
// running (its IP is what gossip peers join), then its sidecar is started
// and waited for (/readyz: discovery and store synced).
func (f *fleet) scaleUp(n int) {
	f.e.t.Helper()
	for i := 0; i < n; i++ {
		f.next++
		name, ip := fmt.Sprintf("router-%d", f.next), fmt.Sprintf("127.0.1.%d", f.next)
		if _, err := f.e.c.StartPod(f.e.ctx(), cluster.PodSpec{Namespace: f.e.ns, Name: name, Labels: routerLabels, Port: 8080}, ip); err != nil {
			f.e.t.Fatal(err)
		}
		f.replicas[name] = f.e.startRouter(name, ip, f.store(ip), kubeBackends("app=ds", f.e.port))
		f.order = append(f.order, name)
	}
}

// scaleDown removes the n oldest replicas as a Deployment rollout would:
// the pod is deleted (peers stop seeing it) and its sidecar gets SIGTERM.
func (f *fleet) scaleDown(n int) {
	f.e.t.Helper()
	for i := 0; i < n; i++ {
		name := f.order[0]
		f.order = f.order[1:]
		pod, err := f.e.c.Client().CoreV1().Pods(f.e.ns).Get(f.e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			f.e.t.Fatal(err)
		}
		if err := f.e.c.DeletePod(f.e.ctx(), pod); err != nil {
			f.e.t.Fatal(err)
		}
		f.replicas[name].Stop()
		delete(f.replicas, name)
	}
}

func (f *fleet) live() []*router {
	rs := make([]*router, len(f.order))
	for i, n := range f.order {
		rs[i] = f.replicas[n]
	}
	return rs
}

// waitMembers waits until every gossip replica counts n members.
func (f *fleet) waitMembers(n int) {
	f.e.t.Helper()
	for _, r := range f.live() {
		testkit.Eventually(f.e.t, time.Minute, fmt.Sprintf("%s to see %d gossip members", r.Spec.Name, n), func() error {
			if v := r.metric("tether_gossip_members"); v != float64(n) {
				return fmt.Errorf("tether_gossip_members = %v", v)
			}
			return nil
		})
	}
}

// waitAgree waits until every live replica holds session's binding to pod.
func (f *fleet) waitAgree(session, pod string) {
	f.e.t.Helper()
	want := podID(f.e.podOf(pod))
	for _, r := range f.live() {
		testkit.Eventually(f.e.t, 30*time.Second, fmt.Sprintf("%s to learn session %s → %s", r.Spec.Name, session, pod), func() error {
			b, ok := r.binding(session)
			if !ok || b.Backend != want {
				return fmt.Errorf("binding %+v (found %v)", b, ok)
			}
			return nil
		})
	}
}

// spread sends one turn of every session to every live replica, rotating
// where each session starts, and fails if any turn leaves its home.
func (f *fleet) spread(home map[string]string, why string) {
	f.e.t.Helper()
	rs := f.live()
	i := 0
	for s, want := range home {
		for j := range rs {
			r := rs[(i+j)%len(rs)]
			if got := r.turn(s); got != want {
				f.e.t.Fatalf("%s: session %s went to %s through %s, want %s", why, s, got, r.Spec.Name, want)
			}
		}
		i++
	}
}

// TestScenario1Gossip: three replicas with the gossip store find their
// peers through the API and share bindings: a session bound by one
// replica is served on the same pod by the others.
func TestScenario1Gossip(t *testing.T) {
	e := backendsEnv(t, "s1")
	f := gossipFleet(e)
	f.scaleUp(3)
	f.waitMembers(3)
	home := f.bind(12)
	f.spread(home, "turns across replicas")

	// Agent timing: the next turn follows at once on another replica,
	// racing the broadcast of the new binding. Placement by the session
	// key (rendezvous hashing) makes both replicas propose the same pod
	// whether or not the binding has arrived, so every follow-up stays.
	rs := f.live()
	rapid := map[string]string{}
	for i := 0; i < 12; i++ {
		s := fmt.Sprintf("s1-rapid-%d", i)
		first := rs[i%3].turn(s)
		if next := rs[(i+1)%3].turn(s); next != first {
			t.Fatalf("session %s: first turn on %s through %s, the immediate follow-up on %s through %s",
				s, first, rs[i%3].Spec.Name, next, rs[(i+1)%3].Spec.Name)
		}
		rapid[s] = f.converged(s)
	}
	f.spread(rapid, "rapid sessions after convergence")
}

// converged waits until every live replica holds the same binding for
// session and returns its pod name.
func (f *fleet) converged(session string) string {
	f.e.t.Helper()
	var pod string
	testkit.Eventually(f.e.t, 30*time.Second, "replicas to agree on session "+session, func() error {
		var ids []string
		for _, r := range f.live() {
			b, ok := r.binding(session)
			if !ok {
				return fmt.Errorf("%s has no binding", r.Spec.Name)
			}
			ids = append(ids, b.Backend)
		}
		for _, id := range ids[1:] {
			if id != ids[0] {
				return fmt.Errorf("bindings differ: %v", ids)
			}
		}
		parts := strings.Split(ids[0], "/") // namespace/name/uid
		pod = parts[1]
		return nil
	})
	return pod
}

// TestScenario2Redis: the same with a real redis-server. Redis is
// consistent at once, so the next turn may follow on another replica
// immediately.
func TestScenario2Redis(t *testing.T) {
	e := backendsEnv(t, "s2")
	f := redisFleet(e)
	f.scaleUp(3)
	home := map[string]string{}
	rs := f.live()
	for i := 0; i < 12; i++ {
		s := fmt.Sprintf("s2-%d", i)
		home[s] = rs[i%3].turn(s)
		// No wait: the very next turns go to the two other replicas.
		for j := 1; j < 3; j++ {
			if got := rs[(i+j)%3].turn(s); got != home[s] {
				t.Fatalf("session %s bound to %s on %s, next turn on %s went to %s", s, home[s], rs[i%3].Spec.Name, rs[(i+j)%3].Spec.Name, got)
			}
		}
		if b, ok := rs[0].binding(s); !ok || b.Backend != podID(e.podOf(home[s])) {
			t.Fatalf("Redis binding of %s = %+v, want %s", s, b, podID(e.podOf(home[s])))
		}
	}
	f.spread(home, "turns across replicas")
}

// TestScenario8Scale: scale the routers from 3 to 5 replicas mid-run (the
// new ones learn the existing bindings before they report ready), then
// from 5 to 2: no session moves at any step.
func TestScenario8Scale(t *testing.T) {
	for _, store := range []string{"gossip", "redis"} {
		t.Run(store, func(t *testing.T) {
			e := backendsEnv(t, "s8-"+store)
			f := map[string]func(*env) *fleet{"gossip": gossipFleet, "redis": redisFleet}[store](e)
			gossip := store == "gossip"
			f.scaleUp(3)
			if gossip {
				f.waitMembers(3)
			}
			home := f.bind(15)
			f.spread(home, "3 replicas")

			f.scaleUp(2)
			// The new replicas are ready, so they serve: their first turns
			// must already find every session's binding.
			for _, r := range f.live()[3:] {
				for s, want := range home {
					if got := r.turn(s); got != want {
						t.Fatalf("new replica %s sent session %s to %s, want %s", r.Spec.Name, s, got, want)
					}
				}
			}
			if gossip {
				f.waitMembers(5)
			}
			f.spread(home, "5 replicas")

			f.scaleDown(3)
			if gossip {
				f.waitMembers(2)
			}
			f.spread(home, "2 replicas")
		})
	}
}

// backendsEnv is an env with three model-server pods.
func backendsEnv(t *testing.T, ns string) *env {
	e := newEnv(t, ns)
	for i := 0; i < 3; i++ {
		e.addPod(fmt.Sprintf("ds-%d", i), fmt.Sprintf("127.0.0.%d", 2+i), dsLabels)
	}
	return e
}

// bind gives n sessions their first turn, each on another replica, and
// waits until every replica holds every binding.
func (f *fleet) bind(n int) map[string]string {
	f.e.t.Helper()
	rs := f.live()
	home := map[string]string{}
	for i := 0; i < n; i++ {
		s := fmt.Sprintf("%s-%d", f.e.ns, i)
		home[s] = rs[i%len(rs)].turn(s)
	}
	for s, p := range home {
		f.waitAgree(s, p)
	}
	return home
}
