package affinity

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fleet's listener j hands requests to policy i's modelsim j by
// header, and load scrapes by path.
func TestFleetRoutesByStack(t *testing.T) {
	f, err := startFleet(Backends{N: 2, MaxRunning: 4, CacheBlocks: 64}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	post := func(addr, tag string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a b c"}]}`))
		req.Header.Set(StackHeader, tag)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(f.addrs[1], "2"); code != http.StatusOK {
		t.Fatalf("stack 2, backend 1: status %d", code)
	}
	for i := range 3 {
		for j := range 2 {
			want := int64(0)
			if i == 2 && j == 1 {
				want = 1
			}
			if got := f.sims[i][j].Stats().Requests; got != want {
				t.Errorf("sims[%d][%d] served %d requests, want %d", i, j, got, want)
			}
		}
	}
	for _, tag := range []string{"", "3", "-1", "x"} {
		if code := post(f.addrs[0], tag); code != http.StatusNotFound {
			t.Errorf("stack %q: status %d, want 404", tag, code)
		}
	}
	resp, err := c.Get("http://" + f.addrs[0] + "/stack/1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "vllm:num_requests_waiting") {
		t.Fatalf("scrape of stack 1: status %d, body %.200q", resp.StatusCode, body)
	}
}

func TestSelect(t *testing.T) {
	ps, err := Select("oracle, hard")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Key != "hard" || ps[1].Key != "oracle" {
		t.Fatalf("Select: %+v, want hard then oracle (the benchmark's order)", ps)
	}
	if _, err := Select("hard,soft"); err == nil || !strings.Contains(err.Error(), "soft") {
		t.Fatalf("unknown key: err %v", err)
	}
}

// Every tether policy of the benchmark is a configuration the sidecar
// accepts (the bench would fail at its start otherwise).
func TestPoliciesParse(t *testing.T) {
	for _, p := range Policies {
		if p.RoundRobin {
			continue
		}
		if _, err := config.Parse([]byte(sidecarConfig([]string{"127.0.0.1:1"}, "{backend: memory}", p.Affinity, 0))); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

func TestSanity(t *testing.T) {
	ok := &Result{Policy: Policies[1], Requests: 100, BackendCached: 10, BackendPrompt: 100,
		RunBackendPrompt: 1000, RunBackendCached: 400, SidecarPrompt: 1000, SidecarCached: 400, Wired: true}
	if err := Sanity([]*Result{ok}); err != nil {
		t.Fatalf("a working run: %v", err)
	}
	apart := *ok
	apart.SidecarCached = 500
	failing := *ok
	failing.Errors, failing.FirstErr = 50, "status 502"
	cold := *ok
	cold.BackendCached = 0
	for name, r := range map[string]*Result{"apart": &apart, "failing": &failing, "no hit": &cold} {
		if err := Sanity([]*Result{r}); err == nil {
			t.Errorf("%s: Sanity passed", name)
		}
	}
}

// The batch tenant holds backend 0's lane once per tick while a job runs,
// ramping up to its share, and starts a job every BatchEvery until the
// end: the schedule is computed, so a late sleep delays a hold but never
// adds or drops one.
func TestBatchSchedule(t *testing.T) {
	var holds []time.Duration
	d := &driver{w: Workload{BatchEvery: 200 * time.Millisecond, BatchFor: 100 * time.Millisecond, BatchShare: 0.5},
		occupy: func(h time.Duration) { holds = append(holds, h) }}
	start := time.Now()
	d.batch(start, start.Add(350*time.Millisecond))
	// Jobs at 0 and 200ms, two ticks each; the ramp's first two steps
	// (50ms and 100ms of its 1s): 5% and 10% of the share of a tick.
	ramp := []time.Duration{1250 * time.Microsecond, 2500 * time.Microsecond}
	if want := append(slices.Clone(ramp), ramp...); !slices.Equal(holds, want) {
		t.Fatalf("holds %v, want %v", holds, want)
	}
	full := &driver{w: Workload{BatchEvery: time.Hour, BatchFor: 2 * batchRamp, BatchShare: 0.5}}
	var last time.Duration
	full.occupy = func(h time.Duration) { last = h }
	full.batch(time.Now().Add(-2*batchRamp), time.Now()) // every tick is already due: no sleeping
	if want := batchTick / 2; last != want {
		t.Fatalf("hold after the ramp %v, want %v (half a tick)", last, want)
	}
}
