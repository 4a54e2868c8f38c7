package gossip

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func syncedNode(name string) memberlist.Node {
	return memberlist.Node{Name: name, Meta: []byte{metaVersion, metaSynced}}
}

func newTestTransfer() *transfer {
	t := newTransfer(&Store{log: slog.New(slog.DiscardHandler), st: newState(16, 0)})
	t.synced = true
	t.minAbsence = time.Hour // every rejoin in these tests is within it
	return t
}

func candidate(t *transfer, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.burst[name]
	return ok
}

// A member back from a real absence is a pull candidate; a blip is not.
func TestRejoinAfterBlipIsNoCandidate(t *testing.T) {
	x := newTestTransfer()
	n := syncedNode("b")
	x.left(n, time.Now())
	x.joined(n)
	if candidate(x, "b") {
		t.Fatal("a member back after a blip is a pull candidate; it holds this side's state")
	}
}

// A partition is declared dead only after failed probes and a suspicion
// timeout: a heal right after that declaration is no blip, for the member
// was last heard from long before it.
func TestHealRightAfterLateDeclarationIsCandidate(t *testing.T) {
	x := newTestTransfer()
	x.minAbsence = time.Second
	n := syncedNode("b")
	x.left(n, time.Now().Add(-2*time.Second))
	x.joined(n)
	if !candidate(x, "b") {
		t.Fatal("a member silent for 2s before it was declared gone, back at once, is no pull candidate")
	}
}

// After a heal, a stale rumour may mark a returned member dead and it
// refutes at once, before the pull decision: the flap must not cancel the
// pull that its return from the partition made due.
func TestFlapOfPendingCandidateKeepsIt(t *testing.T) {
	x := newTestTransfer()
	x.minAbsence = 0 // the partition: its absence was long
	n := syncedNode("b")
	x.left(n, time.Now())
	x.joined(n)
	if !candidate(x, "b") {
		t.Fatal("a member back from a partition is no pull candidate")
	}
	x.minAbsence = time.Hour // the flap that follows is a blip
	x.left(n, time.Now())
	if candidate(x, "b") {
		t.Fatal("a dead member is still a pull candidate")
	}
	x.joined(n)
	if !candidate(x, "b") {
		t.Fatal("a flap right after the heal cancelled the pull from the other side")
	}
	// Once decided (burst cleared by step), a later blip is a blip again.
	x.mu.Lock()
	clear(x.burst)
	x.mu.Unlock()
	x.left(n, time.Now())
	x.joined(n)
	if candidate(x, "b") {
		t.Fatal("a blip long after the heal made a pull candidate")
	}
}
