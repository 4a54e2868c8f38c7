//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/gcfloor"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// The suite's shared state: one environment, a gossip ring and a Redis
// cluster started on first use, and the report every test adds to.
var (
	env    *procs.Env
	report = NewReport()

	ringOnce, redisOnce sync.Once
	ring, redis         *Cluster
	ringErr, redisErr   error
	watching            = make(chan struct{})
)

func TestMain(m *testing.M) {
	bin, err := filepath.Abs(envOr("TETHER_BIN", filepath.Join("..", "..", "bin")))
	if err == nil {
		err = need(filepath.Join(bin, "tether-sidecar"), filepath.Join(bin, "modelsim"))
	}
	if err == nil {
		_, err = exec.LookPath("redis-server")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v (make chaos builds the binaries and installs redis-server)\n", err)
		os.Exit(1)
	}
	if env, err = procs.NewEnv(bin); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	code := m.Run()
	close(watching)
	for _, c := range []*Cluster{ring, redis} {
		if c != nil {
			c.Close()
		}
	}
	env.Close()
	if !report.Empty() {
		if err := writeReport(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: writing the report:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// writeReport writes what the suite measured: make chaos to RESULTS.md
// and the README's chaos block, make soak (CHAOS_REPORT=soak) to SOAK.md
// and its soak block; CHAOS_OUT puts the file there instead and leaves
// the README alone. Part of the suite (go test -run) is no suite's
// report: it is printed only.
func writeReport() error {
	name, file, command := "chaos", "RESULTS.md", "make chaos"
	if os.Getenv("CHAOS_REPORT") == "soak" {
		name, file, command = "soak", "SOAK.md", "make soak"
	}
	if run := flag.Lookup("test.run").Value.String(); name == "chaos" && run != "" {
		fmt.Println(report.Markdown("go test -run " + run))
		return nil
	}
	out, readme := os.Getenv("CHAOS_OUT"), ""
	if out == "" {
		out, readme = ".", filepath.Join("..", "..", "README.md")
	}
	return report.Write(out, file, readme, name, command)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func need(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return err
		}
	}
	return nil
}

// gossipRing is three replicas in a keyed gossip ring over six backends.
func gossipRing(t *testing.T) *Cluster {
	t.Helper()
	ringOnce.Do(func() {
		ring, ringErr = NewCluster(env, Gossip, 6)
		if ringErr == nil {
			ringErr = ring.AddReplicas(3, ReplicaOptions{})
		}
		if ringErr == nil {
			ring.Watch(50*time.Millisecond, watching)
		}
	})
	if ringErr != nil {
		t.Fatal(ringErr)
	}
	settle(t, ring)
	return ring
}

// redisCluster is three replicas sharing a Redis over four backends.
func redisCluster(t *testing.T) *Cluster {
	t.Helper()
	redisOnce.Do(func() {
		redis, redisErr = NewCluster(env, Redis, 4)
		if redisErr == nil {
			redisErr = redis.AddReplicas(3, ReplicaOptions{})
		}
		if redisErr == nil {
			redis.Watch(50*time.Millisecond, watching)
		}
	})
	if redisErr != nil {
		t.Fatal(redisErr)
	}
	settle(t, redis)
	return redis
}

// settle waits until every replica is routable and no process died.
func settle(t *testing.T, c *Cluster) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "every replica ready", func() error {
		for _, r := range c.Replicas {
			if err := r.Process().Exited(); err != nil {
				return err
			}
			if !r.Routable() {
				return fmt.Errorf("%s not routable", r.Name)
			}
		}
		return nil
	})
}

// steady is the load of every fault: two dozen conversations of six
// streamed turns with think times, new conversations as old ones end.
func steady(prefix string) LoadOptions {
	return LoadOptions{Prefix: prefix, Sessions: 24, Turns: 6, MaxTokens: 16,
		ThinkMin: 100 * time.Millisecond, ThinkMax: 400 * time.Millisecond}
}

// warmup is how long the load runs before a fault, so sessions are bound.
const warmup = 3 * time.Second

// debugMoves logs the turns of every session that moved, with their
// access-log lines, when CHAOS_DEBUG is set.
func debugMoves(t *testing.T, c *Cluster, recs []Record, from, to time.Time) {
	if os.Getenv("CHAOS_DEBUG") == "" {
		return
	}
	lines, _ := c.Logs("request")
	byID := map[string]AccessLine{}
	for _, l := range lines {
		byID[l.RequestID] = l
	}
	for _, k := range MovedSessions(recs, from, to) {
		for _, r := range recs {
			if r.Session == k {
				a := byID[r.RequestID]
				t.Logf("%s turn %d via replica-%d at %s on %s %s | %s store_error=%v retried=%v %s", k, r.Turn, r.Replica,
					r.Start.Format("05.000"), r.Backend, r.Err, a.Decision, a.StoreError, a.Retried, a.RetryReason)
			}
		}
	}
}

// accessLine is what the access log says of request id, for a message.
func accessLine(t *testing.T, c *Cluster, id string) string {
	lines, err := c.Logs("request")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.RequestID == id {
			return fmt.Sprintf("replica-%d: decision %s on %s, store_error %v, retried %v %s from %s, status %d, outcome %s %s",
				l.Replica, l.Decision, l.SelectedPod, l.StoreError, l.Retried, l.RetryReason, l.FailedPod, l.Status, l.Outcome, l.Error)
		}
	}
	return "no access-log line"
}

func describe(rs []Record) string {
	var s string
	for i, r := range rs {
		if i == 5 {
			return s + fmt.Sprintf("\n  … %d more", len(rs)-5)
		}
		s += fmt.Sprintf("\n  %s via replica-%d at %s: %s", r.RequestID, r.Replica, r.Start.Format("15:04:05.000"), r.Err)
	}
	return s
}

// Scenario 1: kill -9 one replica and restart it: no turn through the
// other replicas fails, and the restarted replica serves the sessions
// bound before on their backends (the ring's state transfer; Redis).
func TestKillReplica(t *testing.T) {
	for _, store := range []Store{Gossip, Redis} {
		t.Run(string(store), func(t *testing.T) {
			c := gossipRing
			if store == Redis {
				c = redisCluster
			}
			killReplica(t, c(t), store)
		})
	}
}

func killReplica(t *testing.T, c *Cluster, store Store) {
	load := c.StartLoad(steady("kill-" + string(store)))
	time.Sleep(warmup)
	victim := c.Replicas[1]
	kill := time.Now()
	victim.Kill()
	time.Sleep(2 * time.Second)
	restart := time.Now()
	if err := victim.Start(); err != nil {
		load.Stop()
		t.Fatal(err)
	}
	ready := time.Now()
	time.Sleep(5 * time.Second)
	end := time.Now()
	recs := load.Stop()

	window := Between(recs, kill, end)
	var through, others []Record
	for _, f := range Failures(window) {
		if f.Replica == victim.Index && f.Start.Before(restart) {
			through = append(through, f)
		} else {
			others = append(others, f)
		}
	}
	// The restarted replica serves the sessions bound before: one more
	// turn of each (its conversation may have ended meanwhile; the
	// binding outlives it) through the restarted replica lands on the
	// session's backend.
	sorted := slices.Clone(recs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start.Before(sorted[j].Start) })
	last := map[string]Record{}
	for _, r := range sorted {
		if !r.Failed() && r.Start.Before(restart) {
			last[r.Session] = r
		}
	}
	continued, moved, unsticky := 0, 0, 0
	var movers [][2]Record // the session's last turn before, the probe
	var probeFails []Record
	var why []string
	lines := func() map[string]AccessLine {
		ls, err := c.Logs("request")
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]AccessLine{}
		for _, l := range ls {
			byID[l.RequestID] = l
		}
		return byID
	}
	for _, p := range last {
		if continued == 24 {
			break
		}
		rec := load.Turn(context.Background(), victim, p.Session, p.Turn+1, 4)
		if rec.Failed() {
			probeFails = append(probeFails, rec)
			continue
		}
		continued++
		if rec.Backend != p.Backend {
			movers = append(movers, [2]Record{p, rec})
		}
	}
	// A store that did not answer in time degrades a turn to balancing
	// without stickiness, by design (Redis: the store timeout): counted
	// apart, not a failure of the restart. (Access-log lines are written
	// as requests end, just after the client read the end of the stream.)
	testkit.Eventually(t, 5*time.Second, "the probes' access-log lines", func() error {
		byID := lines()
		for _, m := range movers {
			if _, ok := byID[m[1].RequestID]; !ok {
				return fmt.Errorf("no line for %s", m[1].RequestID)
			}
		}
		return nil
	})
	byID := lines()
	for _, m := range movers {
		p, rec := m[0], m[1]
		if byID[rec.RequestID].StoreError {
			unsticky++
			continue
		}
		moved++
		why = append(why, fmt.Sprintf("%s: %s via replica-%d at %s, then %s (%s)", p.Session, p.Backend, p.Replica,
			p.Start.Format("15:04:05.000"), rec.Backend, accessLine(t, c, rec.RequestID)))
	}
	storeErrors := 0
	for _, l := range lines() {
		if l.StoreError && !l.Start().Before(kill) && l.Start().Before(end) {
			storeErrors++
		}
	}
	if len(probeFails) > 0 {
		t.Errorf("%d turns through the restarted replica failed:%s", len(probeFails), describe(probeFails))
	}
	debugMoves(t, c, recs, kill, end)
	report.Fault(Figures{
		Fault: fmt.Sprintf("1. kill -9 a replica and restart it (%s)", store), Sent: len(window), Failed: len(through) + len(others),
		Allowed: len(through), AllowedWhy: "turns through the killed replica: in flight at the kill, or sent before its readiness check failed",
		Moved: Moved(recs, kill, end), Recover: ready.Sub(restart),
		RecoverWhy: "from the restart until the replica was ready with the bindings of the ring (or Redis)",
		Notes: []string{
			fmt.Sprintf("After the restart, one more turn of %d sessions bound before it, sent through the restarted replica: %d left their backend (and %d more went elsewhere because the store did not answer within its timeout).", continued, moved, unsticky),
			fmt.Sprintf("%d turns since the kill were balanced without stickiness because the store did not answer in time (store_error).", storeErrors),
		},
	})
	if len(others) > 0 {
		t.Errorf("%d turns through the other replicas failed:%s", len(others), describe(others))
	}
	if continued == 0 {
		t.Error("no session was bound before the restart: nothing was checked")
	}
	if moved > 0 {
		t.Errorf("%d of %d sessions bound before the restart moved on their turn through the restarted replica:\n  %s", moved, continued, strings.Join(why, "\n  "))
	}
}

// Scenario 2: Redis down for 10 s: no turn fails (the store's timeout
// and breaker degrade to balancing without stickiness), and stickiness
// resumes once Redis is back.
func TestRedisOutage(t *testing.T) {
	c := redisCluster(t)
	start := time.Now()
	load := c.StartLoad(steady("redis"))
	time.Sleep(warmup)
	fallbacks := func() float64 {
		var sum float64
		for _, r := range c.Replicas {
			v, err := testkit.FindMetric(testkit.Scrape(t, r.AdminURL("/metrics")), "tether_store_fallbacks_total", "op", "lookup")
			if err == nil {
				sum += v
			}
		}
		return sum
	}
	down := time.Now()
	c.Redis.Kill()
	time.Sleep(10 * time.Second)
	up := time.Now()
	if err := c.Redis.Start(); err != nil {
		load.Stop()
		t.Fatal(err)
	}
	// Recovered once the replicas stop falling back.
	lastRise, prev := up, fallbacks()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v := fallbacks(); v > prev {
			lastRise, prev = time.Now(), v
		} else if time.Since(lastRise) > 3*time.Second {
			break
		}
	}
	time.Sleep(3 * time.Second)
	end := time.Now()
	recs := load.Stop()

	window := Between(recs, down, end)
	fails := Failures(window)
	// Stickiness resumed: after each session's first turn once Redis was
	// back (which may move it, to its binding from before the outage), no
	// session moves again.
	resumed := lastRise.Add(100 * time.Millisecond)
	// Only the turns since: a session's first one fixes its backend, a
	// later one elsewhere is a move.
	// A turn the store did not answer in time (store_error) is balanced
	// without stickiness by design: left out, and counted.
	var after []Record
	unsticky := 0
	byID := map[string]AccessLine{}
	if lines, err := c.Logs("request"); err == nil {
		for _, l := range lines {
			byID[l.RequestID] = l
		}
	}
	for _, r := range Between(recs, resumed, end) {
		if byID[r.RequestID].StoreError {
			unsticky++
			continue
		}
		after = append(after, r)
	}
	seconds := 0
	counted := map[string]int{}
	for _, r := range after {
		if !r.Failed() {
			if counted[r.Session]++; counted[r.Session] == 2 {
				seconds++
			}
		}
	}
	movedAfter := Moved(after, resumed, end)
	// quantile q of the successful turns' durations started in [from, to).
	quantile := func(q float64, from, to time.Time) time.Duration {
		var ds []time.Duration
		for _, r := range Between(recs, from, to) {
			if !r.Failed() {
				ds = append(ds, r.End.Sub(r.Start))
			}
		}
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(q*float64(len(ds))))]
	}
	med := func(from, to time.Time) time.Duration { return quantile(0.5, from, to) }
	p99 := func(from, to time.Time) time.Duration { return quantile(0.99, from, to) }
	// The cache the sessions kept, before, while and after Redis was
	// down: with the store gone a replica places a session by the hash of
	// its key, as it was placed before, so most turns stay.
	type phase struct {
		name     string
		from, to time.Time
	}
	var kept []string
	var duringStayed, duringLater int
	var duringHit, beforeHit float64
	for _, ph := range []phase{{"before", start, down}, {"during", down, up}, {"after", up, end}} {
		later, stayed, hit := Affinity(recs, ph.from, ph.to)
		share := "no turns"
		if later > 0 {
			share = fmt.Sprintf("%d of %d later turns on their session's backend (%.0f%%), prefix-cache hit rate %s",
				stayed, later, 100*float64(stayed)/float64(later), percent(hit))
		}
		kept = append(kept, ph.name+": "+share)
		if ph.name == "during" {
			duringStayed, duringLater, duringHit = stayed, later, hit
		} else if ph.name == "before" {
			beforeHit = hit
		}
	}
	report.Fault(Figures{
		Fault: "2. Redis killed for 10 s and restarted", Sent: len(window), Failed: len(fails),
		Moved: Moved(recs, down, end), Recover: lastRise.Sub(up),
		RecoverWhy: "from Redis's restart until the last request balanced without stickiness (tether_store_fallbacks_total)",
		Notes: []string{
			fmt.Sprintf("Turns (median / p99) took %s / %s before the outage, %s / %s while Redis was down (store timeout %s, then the breaker), %s / %s after.",
				round(med(down.Add(-warmup), down)), round(p99(down.Add(-warmup), down)), round(med(down, up)), round(p99(down, up)),
				RedisTimeout, round(med(resumed, end)), round(p99(resumed, end))),
			fmt.Sprintf("After each session's first turn with Redis back, %d sessions moved (%d later turns the store did not answer in time were balanced without stickiness).", movedAfter, unsticky),
			"Sessions' later turns (all but a session's first), and the share of their prompt tokens the backends reported cached (usage.prompt_tokens_details.cached_tokens): " +
				strings.Join(kept, "; ") + ".",
		},
		Summary: fmt.Sprintf("while Redis was down, %.0f%% of the sessions' later turns stayed on their session's backend, and the backends' prefix-cache hit rate was %s, %s of the %s before the outage.",
			100*float64(duringStayed)/float64(max(1, duringLater)), percent(duringHit), percent(duringHit/beforeHit), percent(beforeHit)),
	})
	if len(fails) > 0 {
		t.Errorf("%d turns failed while Redis was down or coming back:%s", len(fails), describe(fails))
	}
	if seconds == 0 {
		t.Error("no session had a second turn after Redis came back: stickiness was not checked")
	}
	if movedAfter > 0 {
		t.Errorf("stickiness did not resume: %d sessions moved after their first turn with Redis back", movedAfter)
	}
	if duringLater == 0 || duringHit < 0 {
		t.Errorf("no later turn with a usage report while Redis was down (%d turns): the hit rate was not measured", duringLater)
	}
	// Placed by the hash of their keys, most sessions keep their backend
	// without the store (a random choice among four backends would keep
	// about one in four).
	if 2*duringStayed <= duringLater {
		t.Errorf("while Redis was down only %d of %d later turns stayed on their session's backend", duringStayed, duringLater)
	}
}

// percent renders a share; below 0 is "not reported".
func percent(v float64) string {
	if v < 0 {
		return "not reported"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// Scenario 3: the gossip ring cut in two groups for 10 s, then healed:
// no turn fails, and after the heal every session has one binding, the
// same on every replica.
func TestPartition(t *testing.T) {
	c := gossipRing(t)
	load := c.StartLoad(steady("partition"))
	time.Sleep(warmup)
	cut := time.Now()
	c.Net.Cut([]int{0}, []int{1, 2})
	// Prove the cut: a session bound through replica 0 stays unknown to
	// replica 1.
	probe := fmt.Sprintf("partition-probe-%d", time.Now().UnixNano())
	if rec := load.Turn(context.Background(), c.Replicas[0], probe, 1, 4); rec.Failed() {
		t.Errorf("probe turn through replica 0: %s", rec.Err)
	}
	time.Sleep(time.Second)
	if b, ok := binding(t, c.Replicas[1], probe); ok {
		t.Errorf("replica 1 learned replica 0's binding %v across the cut: the ring was not partitioned", b)
	}
	time.Sleep(time.Until(cut.Add(10 * time.Second)))
	heal := time.Now()
	c.Net.Heal()

	var converged time.Time
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		keys := sessions(load.Records(), cut)
		keys = append(keys, probe)
		if last = agree(t, c, keys); last == nil {
			converged = time.Now()
			break
		}
	}
	time.Sleep(2 * time.Second)
	end := time.Now()
	recs := load.Stop()
	if converged.IsZero() {
		t.Fatalf("the replicas never agreed on every session's binding after the heal: %v", last)
	}
	window := Between(recs, cut, end)
	fails := Failures(window)
	report.Fault(Figures{
		Fault: "3. gossip ring partitioned into {replica-0} and {replica-1, replica-2} for 10 s, then healed", Sent: len(window), Failed: len(fails),
		Moved: Moved(recs, cut, end), Recover: converged.Sub(heal),
		RecoverWhy: fmt.Sprintf("from the heal until every session active since the cut (%d) had one binding, the same on all three replicas", len(sessions(recs, cut))+1),
		Notes:      []string{"Sessions whose turns alternate between the two sides during the cut are bound on each side and move; the heal keeps one binding of each."},
	})
	if len(fails) > 0 {
		t.Errorf("%d turns failed during the partition:%s", len(fails), describe(fails))
	}
}

// sessions are the session keys with a turn started since from.
func sessions(recs []Record, from time.Time) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if !r.Start.Before(from) && !seen[r.Session] {
			seen[r.Session] = true
			out = append(out, r.Session)
		}
	}
	return out
}

type bound struct {
	Backend    string `json:"backend"`
	Generation uint64 `json:"generation"`
}

// binding is a replica's binding of session key (/debug/bindings).
func binding(t *testing.T, r *Replica, key string) (bound, bool) {
	t.Helper()
	resp, err := http.Get(r.AdminURL("/debug/bindings?pool=" + Pool + "&key=" + key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bound
	if resp.StatusCode == http.StatusNotFound {
		return b, false
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b, true
}

// agree checks that every replica holds the same binding of each key.
func agree(t *testing.T, c *Cluster, keys []string) error {
	for _, k := range keys {
		var want bound
		var wantOK bool
		for i, r := range c.Replicas {
			b, ok := binding(t, r, k)
			if i == 0 {
				want, wantOK = b, ok
				continue
			}
			if ok != wantOK || b != want {
				return fmt.Errorf("session %s: replica 0 has %v (%v), replica %d has %v (%v)", k, want, wantOK, i, b, ok)
			}
		}
	}
	return nil
}

// Scenario 5: one backend resets every request, another never answers:
// each replica ejects both after ConsecutiveFailures failures in a row,
// only requests to them before their ejection fail, and their sessions'
// next turns succeed elsewhere.
func TestFaultyBackends(t *testing.T) {
	c := gossipRing(t)
	load := c.StartLoad(steady("faulty"))
	time.Sleep(warmup)
	bad := map[string]string{c.Backends[0].Addr: "reset", c.Backends[1].Addr: "hang"}
	inject := time.Now()
	for _, b := range c.Backends[:2] {
		if err := b.SetFault(bad[b.Addr]); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, b := range c.Backends[:2] {
			b.SetFault("none")
		}
	}()
	var ejectedAll time.Time
	ejections := map[[2]string]time.Time{} // replica, backend → when
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ejectedAll.IsZero(); time.Sleep(200 * time.Millisecond) {
		lines, err := c.Logs("backend ejected")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			k := [2]string{fmt.Sprint(l.Replica), l.Backend}
			if _, isBad := bad[l.Backend]; isBad && l.Time.After(inject) {
				if _, seen := ejections[k]; !seen {
					ejections[k] = l.Time
				}
			}
		}
		if len(ejections) == 2*len(c.Replicas) {
			ejectedAll = time.Now()
		}
	}
	time.Sleep(4 * time.Second)
	end := time.Now()
	recs := load.Stop()
	if ejectedAll.IsZero() {
		t.Fatalf("not every replica ejected both faulty backends: %v", ejections)
	}
	lines, err := c.Logs("request")
	if err != nil {
		t.Fatal(err)
	}
	window := Between(recs, inject, end)
	fails := Failures(window)
	// Per replica and faulty backend: the attempts that failed on it (a
	// request answered by it with an error, or retried away from it).
	failedOn := map[[2]string]int{}
	retried := map[string]int{} // by reason
	twice := 0                  // requests that met both faulty backends
	for _, a := range lines {
		if a.Start().Before(inject) {
			continue
		}
		var pods []string
		if a.Retried {
			pods = strings.Split(a.FailedPod, ",")
			for _, reason := range strings.Split(a.RetryReason, ",") {
				retried[reason]++
			}
			if len(pods) > 1 {
				twice++
			}
		}
		if a.Status != http.StatusOK {
			pods = append(pods, a.SelectedPod)
		}
		for _, pod := range pods {
			if bad[pod] != "" {
				failedOn[[2]string{fmt.Sprint(a.Replica), pod}]++
			}
		}
	}
	notes := []string{}
	for k, when := range ejections {
		notes = append(notes, fmt.Sprintf("replica-%s ejected the %s backend %s after the fault began; %d attempts failed on it there.",
			k[0], bad[k[1]], round(when.Sub(inject)), failedOn[k]))
	}
	sort.Strings(notes)
	notes = append(notes, fmt.Sprintf("Every attempt that failed on a faulty backend before any response byte was retried on another backend: %d reset (empty_response), %d without response headers within the first-byte timeout (timeout); %d requests met both faulty backends and were retried a second time. A retry prefers a backend that is not failing and holds none of the replica's requests before their response headers; none is retried once a response byte reached the client.",
		retried["empty_response"], retried["timeout"], twice))
	report.Fault(Figures{
		Fault: "5. one backend resets every request, another never answers", Sent: len(window), Failed: len(fails),
		Moved: Moved(recs, inject, end), Recover: ejectedAll.Sub(inject),
		RecoverWhy: fmt.Sprintf("until all three replicas had ejected both (first-byte timeout %s)", FirstByteTimeout),
		Notes:      notes,
	})
	for _, f := range fails {
		t.Errorf("turn %s via replica-%d at %s failed: %s (%s)", f.RequestID, f.Replica, f.Start.Format("15:04:05.000"), f.Err, accessLine(t, c, f.RequestID))
	}
	if retried["empty_response"] == 0 || retried["timeout"] == 0 {
		t.Errorf("retries by reason %v: the faults were not exercised", retried)
	}
}

// Scenario 4: a backend killed mid-stream: only its in-flight streams
// fail, and fail at once (no hang); every later turn succeeds.
func TestKillBackend(t *testing.T) {
	c := gossipRing(t)
	victim := c.Backends[2]
	run := faultMidStream(t, c, "killbackend", victim, victim.Kill, 6*time.Second)
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	report.Fault(Figures{
		Fault: "4. a backend killed (SIGKILL) mid-stream", Sent: len(run.window) + len(run.inflight), Failed: len(run.inflight) + len(run.unexplained),
		Allowed: len(run.inflight), AllowedWhy: "the killed backend's streams in flight at the kill",
		Moved: run.moved, Recover: run.lastFail.Sub(run.at),
		RecoverWhy: "from the kill until the last of its in-flight streams ended, cut, for its client",
	})
}

// Scenario 7: a backend frozen mid-stream (SIGSTOP: its connections
// open, nothing sent): its in-flight streams are cut after the stream
// idle timeout, long before it thaws, instead of hanging as long as it
// stays frozen; the turns sent to it meanwhile go elsewhere after the
// first-byte timeout; nothing else fails.
func TestFreezeBackend(t *testing.T) {
	c := gossipRing(t)
	victim := c.Backends[3] // not one an earlier scenario ejected
	defer victim.Thaw()     // should the test end frozen (SIGCONT twice is harmless)
	freeze := func() {
		if err := victim.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	const frozen = 3*StreamIdleTimeout/2 + 5*time.Second
	run := faultMidStream(t, c, "freezebackend", victim, freeze, frozen)
	if err := victim.Thaw(); err != nil {
		t.Errorf("thaw: %v", err)
	}
	report.Fault(Figures{
		Fault: fmt.Sprintf("7. a backend frozen (SIGSTOP) mid-stream for %s", round(frozen)), Sent: len(run.window) + len(run.inflight),
		Failed:  len(run.inflight) + len(run.unexplained),
		Allowed: len(run.inflight), AllowedWhy: "the frozen backend's streams in flight at the freeze, cut by the stream idle timeout",
		Moved: run.moved, Recover: run.lastFail.Sub(run.at),
		RecoverWhy: fmt.Sprintf("from the freeze until the last of its in-flight streams ended, cut, for its client (stream idle timeout %s)", StreamIdleTimeout),
	})
	if late := run.lastFail.Sub(run.at); late > frozen-time.Second {
		t.Errorf("the last in-flight stream was cut %s after the freeze: not before the backend thawed", round(late))
	}
}

// midStreamRun is what faultMidStream saw.
type midStreamRun struct {
	at     time.Time // the fault
	window []Record  // the turns from the fault to the end of the load
	// inflight are the failed turns that were the victim's streams at the
	// fault; unexplained the other failed turns; lastFail the end of the
	// last in-flight one.
	inflight, unexplained []Record
	lastFail              time.Time
	moved                 int
}

// faultMidStream runs the steady load, starts three long streams of
// sessions bound to victim, applies fault a second later, while they
// are in flight, and lets the load run on for hold. Every long stream
// must fail, and only streams in flight on the victim at the fault may.
func faultMidStream(t *testing.T, c *Cluster, prefix string, victim *Backend, fault func(), hold time.Duration) midStreamRun {
	t.Helper()
	load := c.StartLoad(steady(prefix))
	time.Sleep(warmup)
	// Streams certain to be in flight on the victim at the fault: long
	// turns of sessions bound to it.
	var long []string
	for i := 0; len(long) < 3 && i < 200; i++ {
		k := fmt.Sprintf("%s-long-%d", prefix, i)
		if rec := load.Turn(context.Background(), c.Replicas[i%3], k, 1, 2); !rec.Failed() && rec.Backend == victim.ID {
			long = append(long, k)
		}
	}
	if len(long) == 0 {
		t.Fatal("no session was placed on the victim")
	}
	longRecs := make(chan Record, len(long))
	for i, k := range long {
		go func() { longRecs <- load.Turn(context.Background(), c.Replicas[i%3], k, 2, 400) }()
	}
	time.Sleep(time.Second)
	run := midStreamRun{at: time.Now()}
	fault()
	time.Sleep(hold)
	end := time.Now()
	recs := load.Stop()
	for range long {
		recs = append(recs, <-longRecs)
	}

	lines, err := c.Logs("request")
	if err != nil {
		t.Fatal(err)
	}
	pod := map[string]string{}
	for _, l := range lines {
		pod[l.RequestID] = l.SelectedPod
	}
	run.lastFail = run.at
	for _, r := range recs {
		if !r.End.After(run.at) || !r.Failed() {
			continue
		}
		onVictim := r.Backend == victim.ID || pod[r.RequestID] == victim.Addr
		if onVictim && r.Start.Before(run.at) && !strings.HasPrefix(r.Err, "hung") {
			run.inflight = append(run.inflight, r)
			if r.End.After(run.lastFail) {
				run.lastFail = r.End
			}
		} else {
			run.unexplained = append(run.unexplained, r)
		}
	}
	longFailed := 0
	for _, r := range recs {
		if slices.Contains(long, r.Session) && r.Turn == 2 && r.Failed() {
			longFailed++
		}
	}
	run.window = Between(recs, run.at, end)
	run.moved = Moved(recs, run.at, end)
	if longFailed != len(long) {
		t.Errorf("%d of the %d long streams on the victim failed at the fault; the rest finished as if nothing happened", longFailed, len(long))
	}
	if len(run.unexplained) > 0 {
		t.Errorf("%d failed turns were not the victim's in-flight streams:%s", len(run.unexplained), describe(run.unexplained))
	}
	return run
}

// Scenario 6: SIGTERM to a replica during streams: its streams finish,
// its readiness turns false before its listener refuses anything, it
// leaves the ring, and no turn fails.
func TestDrainReplica(t *testing.T) {
	c := gossipRing(t)
	load := c.StartLoad(steady("drain"))
	time.Sleep(warmup)
	r := c.Replicas[2]
	long := make(chan Record, 4)
	for i := range cap(long) {
		go func() {
			long <- load.Turn(context.Background(), r, fmt.Sprintf("drain-long-%d", i), 1, 300)
		}()
	}
	time.Sleep(500 * time.Millisecond)

	// The prober: a refused connection followed by a ready /readyz would
	// be a replica refusing work while it says it is ready.
	stopProbe := make(chan struct{})
	violations := make(chan string, 1)
	var probeWG sync.WaitGroup
	probeWG.Go(func() {
		client := &http.Client{Timeout: time.Second}
		refused := false
		for {
			select {
			case <-stopProbe:
				return
			default:
			}
			if conn, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
				conn.Close()
			} else {
				refused = true
			}
			resp, err := client.Get(r.AdminURL("/readyz"))
			if err == nil {
				resp.Body.Close()
				if refused && resp.StatusCode == http.StatusOK {
					select {
					case violations <- "the pool listener refused a connection while /readyz still answered 200":
					default:
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	})

	// The pod is deleted: its Service stops routing to it, then the
	// kubelet sends SIGTERM.
	r.terminating.Store(true)
	time.Sleep(200 * time.Millisecond)
	term := time.Now()
	if err := r.Terminate(); err != nil {
		t.Fatal(err)
	}
	var left time.Time
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		v, err := testkit.FindMetric(testkit.Scrape(t, c.Replicas[0].AdminURL("/metrics")), "tether_gossip_members")
		if err == nil && v == 2 {
			left = time.Now()
			break
		}
	}
	select {
	case <-r.Process().Done():
	case <-time.After(ShutdownTimeout + 10*time.Second):
		t.Fatal("the replica did not exit after draining")
	}
	exited := time.Now()
	close(stopProbe)
	probeWG.Wait()
	var streams []Record
	for range cap(long) {
		streams = append(streams, <-long)
	}
	time.Sleep(2 * time.Second)
	end := time.Now()
	recs := load.Stop()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}

	window := append(Between(recs, term, end), streams...)
	fails := Failures(window)
	report.Fault(Figures{
		Fault: "6. SIGTERM to a replica during streams", Sent: len(window), Failed: len(fails),
		Moved: Moved(recs, term, end), Recover: exited.Sub(term),
		RecoverWhy: fmt.Sprintf("from SIGTERM until the replica exited, its %d long streams finished", len(streams)),
		Notes:      []string{fmt.Sprintf("The other replicas saw it leave the ring %s after SIGTERM.", round(left.Sub(term)))},
	})
	for _, s := range streams {
		if s.Failed() {
			t.Errorf("a stream in flight through the draining replica failed: %s", s.Err)
		}
	}
	if len(fails) > 0 {
		t.Errorf("%d turns failed:%s", len(fails), describe(fails))
	}
	select {
	case v := <-violations:
		t.Error(v)
	default:
	}
	if left.IsZero() {
		t.Error("the other replicas never saw the drained replica leave the ring")
	}
}

// The load test, reduced: 50,000 distinct sessions through one sidecar
// whose store holds 5,000: no failure, no growth of goroutines or file
// descriptors, the store at its bound. (make soak runs the full one.)
func TestChurn(t *testing.T) {
	ch, err := RunChurn(env, ChurnOptions{Name: "Load (reduced): one replica", Sessions: 50_000, Rate: 2000,
		MaxEntries: 5_000, Replicas: 1, Backends: 3, Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	report.Churn(ch)
	checkFlat(t, ch)
}

// checkFlat fails t when a load run failed requests, grew goroutines or
// file descriptors between its first and last samples, or let the store
// pass its bound. Heap and latency are reported, not judged: on a
// shared machine they move with the neighbours.
func checkFlat(t *testing.T, ch Churn) {
	t.Helper()
	if ch.Failed > 0 {
		t.Errorf("%d of %d requests failed", ch.Failed, ch.Sessions)
	}
	first, last := ch.Samples[0], ch.Samples[len(ch.Samples)-1]
	if last.Goroutines > first.Goroutines*1.2+20 {
		t.Errorf("goroutines grew from %.0f to %.0f", first.Goroutines, last.Goroutines)
	}
	if last.OpenFDs > first.OpenFDs*1.2+20 {
		t.Errorf("open file descriptors grew from %.0f to %.0f", first.OpenFDs, last.OpenFDs)
	}
	// Memory is flat once the store is full: the heap after the last part
	// is not double what it was at the first sample with the store at its
	// bound (a leak of a few hundred bytes a session would double it over
	// the soak's million; the margin absorbs the garbage collector's
	// timing: heap in use counts the garbage not yet collected, which the
	// sidecar's heap floor lets grow up to 32 MiB before a collection,
	// gcfloor.DefaultFloor).
	for _, s := range ch.Samples {
		if s.Bindings >= float64(ch.MaxEntries) {
			if last.HeapBytes > 2*s.HeapBytes+gcfloor.DefaultFloor {
				t.Errorf("heap in use grew from %s (store full, %d sessions) to %s", mib(s.HeapBytes), s.Sessions, mib(last.HeapBytes))
			}
			break
		}
	}
	// The stores hold maxEntries rounded up to a whole number of bindings
	// per shard (64 shards), never more.
	bound := (ch.MaxEntries + 63) / 64 * 64
	for _, s := range ch.Samples {
		if s.Bindings > float64(bound) {
			t.Errorf("%.0f bindings held at %d sessions, over maxEntries %d (%d, rounded up per shard)", s.Bindings, s.Sessions, ch.MaxEntries, bound)
		}
	}
}
