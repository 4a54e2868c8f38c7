//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/cluster"
)

// TestScenario6PD: a prefill/decode pool pins the complete pair; pairs are
// only ever formed inside one pd-group; losing the prefill pod replaces the
// pair (inside one group) on the next turn, and the other pairs stay.
func TestScenario6PD(t *testing.T) {
	e := newEnv(t, "s6")
	group := map[string]string{}
	add := func(name, role, g, ip string) {
		e.addPod(name, ip, map[string]string{"app": "ds", "role": role, "pd-group": g})
		group[name] = g
	}
	add("p-a0", "prefill", "a", "127.0.0.2")
	add("p-a1", "prefill", "a", "127.0.0.3")
	add("d-a0", "decode", "a", "127.0.0.4")
	add("p-b0", "prefill", "b", "127.0.0.5")
	add("d-b0", "decode", "b", "127.0.0.6")
	// A prefill pod outside every group must never be paired.
	e.addPod("p-nogroup", "127.0.0.7", map[string]string{"app": "ds", "role": "prefill"})

	backends := fmt.Sprintf(`    prefill: {selector: "app=ds,role=prefill", port: %d}
    decode: {selector: "app=ds,role=decode", port: %d}
    groupLabel: pd-group`, e.port, e.port)
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, backends)
	r.waitSelectable("prefill", 3)
	r.waitSelectable("decode", 2)

	type pair struct{ prefill, decode string }
	// turn sends a turn and returns the pair that served it, checking it
	// against the access log and the group rule.
	turn := func(s string) (pair, string) {
		t.Helper()
		decode := r.turn(s)
		a := r.lastAccess(s)
		p := pair{strings.TrimPrefix(a.PrefillPod, e.ns+"/"), decode}
		if a.SelectedPod != e.ns+"/"+decode {
			t.Fatalf("session %s: access log selected_pod %q, answered by %s", s, a.SelectedPod, decode)
		}
		if p.prefill == "" || group[p.prefill] != group[p.decode] {
			t.Fatalf("session %s: pair %+v crosses groups (prefill group %q, decode group %q)", s, p, group[p.prefill], group[p.decode])
		}
		return p, a.Decision
	}

	pairs := map[string]pair{}
	for i := 0; i < 12; i++ {
		s := fmt.Sprintf("s6-%d", i)
		pairs[s], _ = turn(s)
		for j := 0; j < 2; j++ {
			if p, _ := turn(s); p != pairs[s] {
				t.Fatalf("session %s moved from %+v to %+v", s, pairs[s], p)
			}
		}
		if b, ok := r.binding(s); !ok || !strings.Contains(b.Prefill, "/"+pairs[s].prefill+"/") {
			t.Fatalf("session %s binding %+v does not record prefill pod %s", s, b, pairs[s].prefill)
		}
	}

	victim := pairs["s6-0"].prefill
	e.sims[victim].Kill()
	if err := e.c.DeletePod(e.ctx(), e.pods[victim]); err != nil {
		t.Fatal(err)
	}
	r.waitSelectable("prefill", 2)

	moved := 0
	for s, old := range pairs {
		p, decision := turn(s)
		switch {
		case old.prefill == victim:
			if p.prefill == victim || decision != "rebind" {
				t.Fatalf("session %s lost prefill %s: got pair %+v, decision %q", s, victim, p, decision)
			}
			moved++
		case p != old:
			t.Fatalf("session %s with an intact pair moved from %+v to %+v", s, old, p)
		}
		pairs[s] = p
	}
	t.Logf("%d sessions re-paired after losing %s", moved, victim)
	for s, want := range pairs {
		if p, _ := turn(s); p != want {
			t.Fatalf("session %s did not stay on its new pair %+v: %+v", s, want, p)
		}
	}
}

// TestScenario6PDHeader: the decode pod receives the prefill pod's
// host:port in x-prefiller-host-port (the header llm-d's routing sidecar
// reads). The decode "pod" here is a recorder in the test process.
func TestScenario6PDHeader(t *testing.T) {
	e := newEnv(t, "s6h")
	e.addPod("p-0", "127.0.0.2", map[string]string{"app": "ds", "role": "prefill", "pd-group": "a"})

	got := make(chan string, 16)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", e.port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("x-prefiller-host-port"):
		default:
		}
		w.Header().Set("X-Modelsim-Id", "d-0")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	pod, err := e.c.StartPod(e.ctx(), cluster.PodSpec{Namespace: e.ns, Name: "d-0",
		Labels: map[string]string{"app": "ds", "role": "decode", "pd-group": "a"}, Port: int32(e.port)}, "127.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	e.pods["d-0"] = pod

	backends := fmt.Sprintf(`    prefill: {selector: "app=ds,role=prefill", port: %d}
    decode: {selector: "app=ds,role=decode", port: %d}
    groupLabel: pd-group`, e.port, e.port)
	r := e.startRouter("router-0", "127.0.1.1", memoryStore, backends)
	r.waitSelectable("decode", 1)
	r.waitSelectable("prefill", 1)

	if id := r.turn("s6h-0"); id != "d-0" {
		t.Fatalf("answered by %q", id)
	}
	if h, want := <-got, fmt.Sprintf("127.0.0.2:%d", e.port); h != want {
		t.Fatalf("x-prefiller-host-port = %q, want the prefill pod's %q", h, want)
	}
	if a := r.lastAccess("s6h-0"); a.PrefillPod != e.ns+"/p-0" || a.SelectedPod != e.ns+"/d-0" {
		t.Fatalf("access log %+v", a)
	}
}
