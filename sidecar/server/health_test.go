package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestHealthCheckedStaticBackends: a static backend that fails its health
// checks leaves the selectable set (its sessions rebind on their next
// turn), and comes back after passing them again; one failing at start
// is never selectable.
func TestHealthCheckedStaticBackends(t *testing.T) {
	var healthy [3]atomic.Bool
	var ids, backends []string
	for i := range healthy {
		healthy[i].Store(i != 2) // the third fails from the start
		s := sim.New(sim.Options{ID: fmt.Sprint("hc-", i)})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" && !healthy[i].Load() {
				http.Error(w, "sick", http.StatusServiceUnavailable)
				return
			}
			s.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		ids = append(ids, s.ID())
		backends = append(backends, strings.TrimPrefix(srv.URL, "http://"))
	}
	bs := fmt.Sprintf("%q, %q, %q", backends[0], backends[1], backends[2])
	sc := startSidecar(t, fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: default/m
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends:
      static: [%s]
      healthCheck: {interval: 50ms, timeout: 50ms, unhealthyThreshold: 2, healthyThreshold: 2}
`, bs))
	url := sc.url("default/m", "/v1/chat/completions")
	unhealthy := func(n float64) func() bool {
		return func() bool { return sc.metric(t, "tether_backends_unhealthy", "pool", "default/m") == n }
	}
	if !unhealthy(1)() {
		t.Fatal("the backend failing at start is not counted unhealthy once ready")
	}
	placed := map[string]int{}
	var onFirst string
	for i := 0; i < 30; i++ {
		k := fmt.Sprint("hc-session-", i)
		r := chat(t, url, conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", k) })
		if r.status != 200 {
			t.Fatalf("turn 1: %d", r.status)
		}
		placed[r.backend]++
		if r.backend == ids[0] {
			onFirst = k
		}
	}
	if placed[ids[2]] != 0 || onFirst == "" {
		t.Fatalf("placements %v: the unhealthy backend got sessions, or the first none", placed)
	}

	healthy[0].Store(false)
	testkit.Eventually(t, 10*time.Second, "the first backend unhealthy", unhealthy(2))
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", onFirst) }
	r := chat(t, url, conversation(2), set)
	if r.status != 200 || r.backend != ids[1] {
		t.Fatalf("turn 2 of a session on the unhealthy backend: %d on %s, want %s", r.status, r.backend, ids[1])
	}
	if got := sc.metric(t, "tether_session_rebinds_total", "reason", "unselectable"); got != 1 {
		t.Fatalf("rebinds{unselectable} = %v", got)
	}

	healthy[0].Store(true)
	healthy[2].Store(true)
	testkit.Eventually(t, 10*time.Second, "both backends healthy again", unhealthy(0))
	seen := map[string]bool{}
	for i := 0; i < 60 && len(seen) < 3; i++ {
		seen[chat(t, url, conversation(1), nil).backend] = true
	}
	if len(seen) != 3 {
		t.Fatalf("keyless requests reached %v after every backend recovered", seen)
	}
}
