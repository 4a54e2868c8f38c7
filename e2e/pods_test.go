//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Scenarios 3, 4, 5 and 7: backends that come and go under one sidecar
// (memory store). The sidecar runs with the "router" service account,
// which may only get/list/watch pods: discovery needs nothing more.

const memoryStore = "store: {backend: memory}"

var dsLabels = map[string]string{"app": "ds"}

// threePods starts ds-0..ds-2 on 127.0.0.2..4 and a router that sees them.
func threePods(t *testing.T, ns string) (*env, *router) {
	e := newEnv(t, ns)
	for i := 0; i < 3; i++ {
		e.addPod(fmt.Sprintf("ds-%d", i), fmt.Sprintf("127.0.0.%d", 2+i), dsLabels)
	}
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, kubeBackends("app=ds", e.port))
	r.waitSelectable("backend", 3)
	return e, r
}

// bindSessions gives each of n sessions a first turn and checks that two
// more turns stay where the first went; it returns session → pod name.
func bindSessions(t *testing.T, r *router, prefix string, n int) map[string]string {
	t.Helper()
	home := map[string]string{}
	for i := 0; i < n; i++ {
		s := fmt.Sprintf("%s-%d", prefix, i)
		home[s] = r.turn(s)
		for j := 0; j < 2; j++ {
			if got := r.turn(s); got != home[s] {
				t.Fatalf("session %s moved from %s to %s with every pod ready", s, home[s], got)
			}
		}
	}
	return home
}

// sessionOn finds (binding more sessions if needed) a session bound to pod.
func sessionOn(t *testing.T, r *router, home map[string]string, prefix, pod string) string {
	t.Helper()
	for s, p := range home {
		if p == pod {
			return s
		}
	}
	for i := 0; i < 100; i++ {
		s := fmt.Sprintf("%s-extra-%d", prefix, i)
		if home[s] = r.turn(s); home[s] == pod {
			return s
		}
	}
	t.Fatalf("no session was ever bound to %s in 100 tries", pod)
	return ""
}

// checkStay sends turns to every session and fails if any is not at want[s].
func checkStay(t *testing.T, r *router, want map[string]string, why string) {
	t.Helper()
	for s, p := range want {
		if got := r.turn(s); got != p {
			t.Fatalf("%s: session %s went to %s, want %s", why, s, got, p)
		}
	}
}

// TestScenario3NotReady: the bound pod goes NotReady → the next turn of its
// sessions lands elsewhere with no failed request and stays there; the
// other sessions do not move; when the pod is Ready again (its containers
// ran all along: a readiness blip), sessions that moved do not move back,
// and an idle session that had no turn in between keeps its pin: the
// server still holds its cache, as Kthena keeps such pins.
func TestScenario3NotReady(t *testing.T) {
	e, r := threePods(t, "s3")
	home := bindSessions(t, r, "s3", 9)
	victim := home["s3-0"]
	idle := sessionOn(t, r, home, "s3-idle", victim) // gets no turn while the victim is not ready
	idleBinding, _ := r.binding(idle)

	if _, err := e.c.SetNotReady(e.ctx(), e.pods[victim]); err != nil {
		t.Fatal(err)
	}
	r.waitSelectable("backend", 2)

	after := map[string]string{}
	for s, p := range home {
		if s == idle {
			continue
		}
		got := r.turn(s)
		switch {
		case p == victim && got == victim:
			t.Fatalf("session %s stayed on %s after it went NotReady", s, victim)
		case p == victim:
			if a := r.lastAccess(s); a.Decision != "rebind" || a.SelectedPod != e.ns+"/"+got {
				t.Fatalf("moved session %s: access log %+v, want decision rebind to %s", s, a, got)
			}
		case got != p:
			t.Fatalf("session %s on a ready pod moved from %s to %s", s, p, got)
		}
		after[s] = got
	}
	checkStay(t, r, after, "after the rebind")

	// The Ready condition's lastTransitionTime has one-second precision:
	// let the idle session's binding be clearly older than the pod's next
	// ready period, as it is in any real blip, so that dating a pod's run
	// from its Ready transition would drop the pin.
	time.Sleep(1100 * time.Millisecond)
	pod, err := e.c.MakeReady(e.ctx(), e.pods[victim], e.pods[victim].Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	e.pods[victim] = pod
	r.waitSelectable("backend", 3)
	checkStay(t, r, after, "after the pod came back")

	if got := r.turn(idle); got != victim {
		t.Fatalf("idle session went to %s after %s's readiness blip, want it kept there", got, victim)
	}
	if a := r.lastAccess(idle); a.Decision != "hit" {
		t.Fatalf("idle session after a readiness blip: decision %q, want hit", a.Decision)
	}
	if b, _ := r.binding(idle); b.Generation != idleBinding.Generation || b.Backend != idleBinding.Backend {
		t.Fatalf("idle session's binding changed over a readiness blip: before %+v, now %+v", idleBinding, b)
	}
}

// TestScenario3Restarted: the bound pod's serving container restarts in
// place (same pod and UID, restartCount up, a new startedAt), which means
// a cold cache → the sessions bound before the restart are rebound on
// their next turn; a binding made after it is kept.
func TestScenario3Restarted(t *testing.T) {
	e, r := threePods(t, "s3r")
	home := bindSessions(t, r, "s3r", 9)
	victim := home["s3r-0"]
	probe := sessionOn(t, r, home, "s3r-probe", victim)
	idle := sessionOn(t, r, home, "s3r-idle", victim)
	for idle == probe {
		delete(home, idle)
		idle = sessionOn(t, r, home, "s3r-idle2", victim)
	}
	idleBinding, _ := r.binding(idle)

	// startedAt has one-second precision, truncated: let the bindings be
	// older than the restart's second.
	time.Sleep(1100 * time.Millisecond)
	pod, err := e.c.RestartContainers(e.ctx(), e.pods[victim])
	if err != nil {
		t.Fatal(err)
	}
	if cs := pod.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 1 {
		t.Fatalf("container statuses after the restart: %+v", cs)
	}
	e.pods[victim] = pod

	// The pod stayed Ready, so nothing in the selectable count says when
	// discovery has seen the restart: the probe session's turns hit until
	// it has, then one rebinds.
	testkit.Eventually(t, 30*time.Second, "a session bound before the restart to be rebound", func() error {
		r.turn(probe)
		if a := r.lastAccess(probe); a.Decision != "rebind" {
			return fmt.Errorf("decision %q", a.Decision)
		}
		return nil
	})
	// Discovery has seen the restart: the idle session's first turn rebinds.
	r.turn(idle)
	if a := r.lastAccess(idle); a.Decision != "rebind" {
		t.Fatalf("idle session bound before the restart: decision %q, want rebind", a.Decision)
	}
	b, _ := r.binding(idle)
	if b.Generation <= idleBinding.Generation {
		t.Fatalf("idle session's binding survived the restart: before %+v, now %+v", idleBinding, b)
	}
	// The new binding is newer than the restart: it is kept.
	got := r.turn(idle)
	if a := r.lastAccess(idle); a.Decision != "hit" {
		t.Fatalf("turn after the rebind went to %s with decision %q, want hit", got, a.Decision)
	}
}

// TestScenario4Deleted: the bound pod is deleted and its server killed at
// once, the way a node drain ends a pod → the next turn (sent without
// waiting for discovery) still succeeds elsewhere, by the connection-failure
// retry if discovery has not caught up, and the sessions stay there.
func TestScenario4Deleted(t *testing.T) {
	e, r := threePods(t, "s4")
	home := bindSessions(t, r, "s4", 9)
	victim := home["s4-0"]

	e.sims[victim].Kill()
	if err := e.c.DeletePod(e.ctx(), e.pods[victim]); err != nil {
		t.Fatal(err)
	}
	after := map[string]string{}
	for s, p := range home {
		got := r.turn(s)
		if p == victim && got == victim {
			t.Fatalf("session %s answered by deleted %s", s, victim)
		}
		if p != victim && got != p {
			t.Fatalf("session %s on a live pod moved from %s to %s", s, p, got)
		}
		after[s] = got
	}
	retried := 0
	for _, a := range r.AccessLogs() {
		if a.Retried {
			retried++
		}
	}
	t.Logf("%d turns were retried after a refused connection (discovery had not caught up yet)", retried)
	r.waitSelectable("backend", 2)
	checkStay(t, r, after, "after the deletion")
}

// TestScenario4Crashed: the bound pod's server dies before anything in the
// API says so (the kubelet has not noticed yet) → the turn that finds the
// connection refused is retried on a new binding, no request fails, and
// the sessions stay on their new pods.
func TestScenario4Crashed(t *testing.T) {
	e, r := threePods(t, "s4c")
	home := bindSessions(t, r, "s4c", 9)
	victim := home["s4c-0"]
	e.sims[victim].Kill()

	// The first turn to hit the dead server is retried; it also marks the
	// backend failed, so later sessions of that pod rebind without trying it.
	after := map[string]string{}
	retried := 0
	for s, p := range home {
		got := r.turn(s)
		switch {
		case p == victim:
			a := r.lastAccess(s)
			if got == victim || a.Decision != "rebind" || a.SelectedPod != e.ns+"/"+got {
				t.Fatalf("session %s on crashed %s: answered by %s, access log %+v; want a rebind elsewhere", s, victim, got, a)
			}
			if a.Retried {
				retried++
			}
		case got != p:
			t.Fatalf("session %s on a live pod moved from %s to %s", s, p, got)
		}
		after[s] = got
	}
	if retried != 1 {
		t.Fatalf("%d turns were retried, want exactly the first one to reach the dead server", retried)
	}
	checkStay(t, r, after, "after the retry")
}

// TestScenario4Terminating: a pod that a kubelet still runs (nodeName set)
// is deleted → it is terminating while its server still answers; discovery
// drops it at the deletion timestamp, not when it is finally gone.
func TestScenario4Terminating(t *testing.T) {
	e := newEnv(t, "s4t")
	for i := 0; i < 2; i++ {
		name, ip := fmt.Sprintf("ds-%d", i), fmt.Sprintf("127.0.0.%d", 2+i)
		e.startSim(name, ip)
		p, err := e.c.CreatePod(e.ctx(), cluster.PodSpec{Namespace: e.ns, Name: name, Labels: dsLabels, Port: int32(e.port), NodeName: "node-1"})
		if err != nil {
			t.Fatal(err)
		}
		if e.pods[name], err = e.c.MakeReady(e.ctx(), p, ip); err != nil {
			t.Fatal(err)
		}
	}
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, kubeBackends("app=ds", e.port))
	r.waitSelectable("backend", 2)
	home := bindSessions(t, r, "s4t", 6)
	victim := home["s4t-0"]

	// A graceful delete: the pod stays, terminating, until a kubelet confirms.
	if err := e.c.Client().CoreV1().Pods(e.ns).Delete(e.ctx(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitSelectable("backend", 1)
	after := map[string]string{}
	for s := range home {
		if after[s] = r.turn(s); after[s] == victim {
			t.Fatalf("session %s still on terminating %s", s, victim)
		}
	}
	if err := e.c.DeletePod(e.ctx(), e.pods[victim]); err != nil {
		t.Fatal(err)
	}
	checkStay(t, r, after, "after the pod was gone")
}

// TestScenario5Added: a pod is added → new sessions reach it, existing
// sessions stay where they are.
func TestScenario5Added(t *testing.T) {
	e := newEnv(t, "s5")
	e.addPod("ds-0", "127.0.0.2", dsLabels)
	e.addPod("ds-1", "127.0.0.3", dsLabels)
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, kubeBackends("app=ds", e.port))
	r.waitSelectable("backend", 2)
	home := bindSessions(t, r, "s5-old", 8)

	e.addPod("ds-2", "127.0.0.4", dsLabels)
	r.waitSelectable("backend", 3)
	checkStay(t, r, home, "after a pod was added")

	// Sequential first turns see no load anywhere, so the balancer's
	// two random choices tie and either wins: the new pod's chance to be
	// missed by 40 new sessions is (2/3)^40, about 1e-7.
	reached := 0
	fresh := map[string]string{}
	for i := 0; i < 40; i++ {
		s := fmt.Sprintf("s5-new-%d", i)
		if fresh[s] = r.turn(s); fresh[s] == "ds-2" {
			reached++
		}
	}
	if reached == 0 {
		t.Fatal("no new session reached the added pod ds-2")
	}
	t.Logf("%d of 40 new sessions went to the added pod", reached)
	checkStay(t, r, fresh, "new sessions")
	checkStay(t, r, home, "old sessions, at the end")
}

// TestScenario7Recreated: a StatefulSet-style pod recreated under the same
// name (new UID, same address, cold cache) is a new backend: the sessions
// bound to its previous life are rebound, never served as hits.
func TestScenario7Recreated(t *testing.T) {
	e := newEnv(t, "s7")
	e.addPod("ds-0", "127.0.0.2", dsLabels)
	e.addPod("ds-1", "127.0.0.3", dsLabels)
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, kubeBackends("app=ds", e.port))
	r.waitSelectable("backend", 2)
	home := bindSessions(t, r, "s7", 4)
	s := sessionOn(t, r, home, "s7", "ds-0")
	old := e.pods["ds-0"]
	if b, ok := r.binding(s); !ok || b.Backend != podID(old) {
		t.Fatalf("binding of %s = %+v, want backend %s", s, b, podID(old))
	}

	// The StatefulSet controller's part: the pod is deleted and created
	// again under its name; its server restarts with a cold cache.
	e.sims["ds-0"].Kill()
	if err := e.c.DeletePod(e.ctx(), old); err != nil {
		t.Fatal(err)
	}
	r.waitSelectable("backend", 1)
	e.addPod("ds-0", "127.0.0.2", dsLabels)
	if e.pods["ds-0"].UID == old.UID {
		t.Fatal("recreated pod kept its UID")
	}
	r.waitSelectable("backend", 2)

	got := r.turn(s)
	if a := r.lastAccess(s); a.Decision != "rebind" {
		t.Fatalf("first turn after the recreation: decision %q (to %s), want rebind", a.Decision, got)
	}
	b, _ := r.binding(s)
	if b.Backend == podID(old) {
		t.Fatalf("session still bound to the previous life of ds-0: %+v", b)
	}
	if want := podID(e.podOf(got)); b.Backend != want {
		t.Fatalf("binding %+v, want backend %s", b, want)
	}
	checkStay(t, r, map[string]string{s: got}, "after the rebind")
}
