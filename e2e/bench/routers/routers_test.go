package routers

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends answer with their own name.
func backends(t *testing.T, n int) []string {
	var addrs []string
	for i := range n {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "b%d", i) }))
		t.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	return addrs
}

func start(t *testing.T, policy string, bs []string, replicas int) *Group {
	g, err := Start(policy, bs, replicas)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func get(t *testing.T, url, session string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Session-ID", session)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestRoundRobinSpreadsEvenly(t *testing.T) {
	g := start(t, RoundRobin, backends(t, 3), 1)
	count := map[string]int{}
	for range 30 {
		count[get(t, g.URLs()[0], "same")]++
	}
	if len(count) != 3 || count["b0"] != 10 || count["b1"] != 10 {
		t.Errorf("30 requests spread %v, want 10 each", count)
	}
}

// Consistent hashing and the oracle keep a session on one backend whichever
// replica it reaches; round robin does not. 100 sessions, not fewer: the
// ring is built from the backends' random ports, and with 40 sessions
// about 2 rings in 10,000 left two backends without one (it failed a run).
func TestStickyPoliciesAgreeAcrossReplicas(t *testing.T) {
	bs := backends(t, 4)
	for _, policy := range []string{ConsistentHash, Oracle} {
		g := start(t, policy, bs, 3)
		used := map[string]bool{}
		for s := range 100 {
			session := fmt.Sprint("s-", s)
			first := get(t, g.URLs()[s%3], session)
			used[first] = true
			for r := range 3 {
				if got := get(t, g.URLs()[r], session); got != first {
					t.Fatalf("%s: session %s on %s, then %s through replica %d", policy, session, first, got, r)
				}
			}
		}
		if len(used) < 3 {
			t.Errorf("%s: 100 sessions used only %d of 4 backends", policy, len(used))
		}
	}
}

func TestUnknownPolicy(t *testing.T) {
	if _, err := Start("random", []string{"127.0.0.1:1"}, 1); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
