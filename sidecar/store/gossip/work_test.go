package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// withWork shortens the work epochs so a test sees several in a second.
func withWork(interval, grace time.Duration) nodeOpt {
	return func(_ *configGossip, o *Options) { o.WorkInterval, o.WorkGrace = interval, grace }
}

var workIDs = []string{"sim-0", "sim-1", "sim-2", "sim-3"}

// changingWork is node i's source: its counts differ from epoch to
// epoch and from node to node, so views that mixed reports of two
// epochs, or read a report the moment it arrived, would differ.
func changingWork(i int) WorkSource {
	return func(at time.Time, add func(string, float64)) {
		e := int(at.UnixMilli())
		add("sim-0", float64(1000*(i+1)+e%997))
		add(workIDs[1+i%3], float64(100+e%89))
	}
}

// TestWorkViewIsTheSameOnEveryReplica: three real members, each reporting
// counts that change every epoch. Sampled every few milliseconds for
// several epochs, right after each epoch's reports arrive included, the
// three views are the same whenever they are read at once (away from the
// moment the view switches epochs), and they hold every member's work.
func TestWorkViewIsTheSameOnEveryReplica(t *testing.T) {
	const interval, grace = 400 * time.Millisecond, 200 * time.Millisecond
	nodes := startCluster(t, newTestNet(), 3, withWork(interval, grace))
	for i, s := range nodes {
		s.ShareWork(changingWork(i))
	}
	view := func(s *Store) []float64 {
		w := make([]float64, len(workIDs))
		s.Work(workIDs, w)
		return w
	}
	testkit.Eventually(t, 5*time.Second, "every node to count three reporters", func() error {
		for _, s := range nodes {
			if n, _ := s.workView(); n != 3 {
				return fmt.Errorf("%s counts %d reporters", s.name, n)
			}
		}
		return nil
	})
	samples, views := 0, map[string]bool{}
	for end := time.Now().Add(6 * interval); time.Now().Before(end); time.Sleep(7 * time.Millisecond) {
		// The view switches at each epoch plus grace: a read on either
		// side of it may differ.
		since := (time.Now().UnixMilli() - grace.Milliseconds()) % interval.Milliseconds()
		if since < 15 || since > interval.Milliseconds()-15 {
			continue
		}
		w0, w1, w2 := view(nodes[0]), view(nodes[1]), view(nodes[2])
		if !slices.Equal(w0, w1) || !slices.Equal(w0, w2) {
			t.Fatalf("views read at once differ: %v, %v, %v", w0, w1, w2)
		}
		// sim-0 holds 1000, 2000 and 3000 plus under 997 from each member.
		if w0[0] < 6000 || w0[0] > 6000+3*997 {
			t.Fatalf("the view's sim-0 is %v, not the three members' sum", w0[0])
		}
		samples++
		views[fmt.Sprint(w0)] = true
	}
	if samples < 100 || len(views) < 4 {
		t.Fatalf("%d samples of %d distinct views; want many samples over several epochs", samples, len(views))
	}

	// A member that leaves stops counting.
	_ = nodes[2].Close()
	testkit.Eventually(t, 10*time.Second, "the others to drop the leaver's work", func() error {
		for _, s := range nodes[:2] {
			if n, _ := s.workView(); n != 2 {
				return fmt.Errorf("%s counts %d reporters", s.name, n)
			}
		}
		return nil
	})
}

// TestWorkReportsOutOfUseAreDropped: a report from a replica that is not
// a member, or of an epoch no view will read, is dropped and counted.
func TestWorkReportsOutOfUseAreDropped(t *testing.T) {
	nodes := startCluster(t, newTestNet(), 2, withWork(time.Second, 250*time.Millisecond))
	s, peer := nodes[0], nodes[1].name
	cur := uint64(s.workEpoch(s.now()))
	dropped := s.met.recordsDropped[dropWorkReport]
	for _, m := range []*message{
		{Kind: kindWork, From: "stranger", Epoch: cur, Work: []workEntry{{"sim-0", 1 << 30}}},
		{Kind: kindWork, From: peer, Epoch: cur - workEpochsKept - 1, Work: []workEntry{{"sim-0", 1 << 30}}},
		{Kind: kindWork, From: peer, Epoch: cur + 2, Work: []workEntry{{"sim-0", 1 << 30}}},
	} {
		before := testutil.ToFloat64(dropped)
		s.receive(encode(m))
		if got := testutil.ToFloat64(dropped) - before; got != 1 {
			t.Fatalf("report from %s of epoch %d (now %d): dropped %v times, want 1", m.From, m.Epoch, cur, got)
		}
	}
	s.workMu.Lock()
	defer s.workMu.Unlock()
	for member, reps := range s.workReports {
		for _, r := range reps {
			if r.bytes["sim-0"] >= 1<<30 {
				t.Fatalf("a dropped report was kept: %s's of epoch %d", member, r.epoch)
			}
		}
	}
}
