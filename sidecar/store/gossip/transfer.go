package gossip

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// State transfer: how a replica that joins, or a side of a healed
// partition, gets the bindings it missed, without a message or a push/pull
// that grows with the number of sessions.
//
// Every replica advertises in its memberlist metadata whether it is
// "synced": it has pulled the ring's state once, or found nobody to pull
// from. When members join (NotifyJoin, debounced into one burst), a replica
// pulls once from ONE of the newly seen members that is synced: a new
// replica pulls from one existing member; the existing members do not pull
// from a replica that is not synced yet (it holds nothing they lack); after
// a partition heals, every replica pulls from one member of the other side.
//
// A pull is a sync request (TCP); the responder streams its unexpired
// entries, tombstones included, as chunks of at most ChunkBytes (TCP,
// SendReliable), at most ChunkRate chunks per second, serving at most two
// pulls at a time (more wait in a queue of 16; beyond, requests are dropped
// and their requester retries elsewhere). An end marker says how many
// chunks were sent; a pull that goes TransferTimeout without a chunk is
// retried with another synced member, at most three tries. Chunks merge
// like any delta, so order, duplicates and overlap do not matter.
//
// Replicas that start together meet before any of them is synced. Each
// hands its state over, unasked, to every member it meets before it has
// pulled: what it holds then (bindings it made in its first moments) is on
// no other replica, and nobody pulls from a replica that is not synced.
// Such a state is small (it holds no pulled state), and later bindings
// travel as deltas. An unsynced replica that sees a member turn synced
// (its metadata changes: NotifyUpdate) pulls from it as from a synced
// newcomer. A replica that declared itself synced by its startup grace
// while it knew members that were not synced yet ("grace-only") pulls once
// from the first of those that turns synced: that member may have pulled
// what neither could see at their meeting (a ring member since gone).
// Once: a grace-only replica's catch-up is spent by its first pull, so a
// ring started together makes one catch-up per grace-only replica, not one
// per member.
//
// A replica restarted in place (kill -9, then the same pod IP and port)
// meets its previous incarnation, still alive in the others' views until
// memberlist declares it dead: that ghost is neither pulled from (nothing
// would answer; the pull would wait TransferTimeout) nor handed state.
//
// A member that rejoins after less than a blip (four gossip intervals or a
// probe interval, whichever is longer), and had been heard from (a message
// or a probe's ack) less than a blip before it was declared gone, was not
// really apart: memberlist marked it dead on a stale rumour and it refuted
// at once. (A partition is declared only after the failed probes and the
// suspicion that follow the last contact, so a heal right after that
// declaration is not mistaken for a blip.) It holds this
// side's state, so it is no pull candidate; otherwise a replica could pull
// from its own side after a heal and miss the other side's bindings. A
// member that flaps while it is a pending candidate (it returned from a
// real absence, then a stale rumour marked it dead before the pull
// decision) stays one: its blip does not undo the absence before it.

const (
	metaVersion   = 1
	metaSynced    = 1
	joinDebounce  = 200 * time.Millisecond
	pullAttempts  = 3
	serveQueue    = 16
	loopInterval  = 100 * time.Millisecond
	updateTimeout = time.Second
)

type transfer struct {
	s     *Store
	start time.Time
	// self is this replica's advertised address, set once memberlist has
	// started; a member there is a previous incarnation of this replica.
	self atomic.Pointer[string]
	kick chan struct{}
	reqs chan syncReq

	mu        sync.Mutex
	synced    bool
	metaStale bool                // synced changed; memberlist must re-announce the metadata
	announced bool                // the local node's metadata says synced (UpdateNode returned)
	burst     map[string]struct{} // synced members seen joining since the last pull decision
	// turned are members seen turning synced since the last pull
	// decision; they are candidates only while this replica lacks state:
	// not synced yet, or grace-only.
	turned   map[string]struct{}
	lastJoin time.Time
	// pulled: this replica has started a pull. Its state may hold the
	// ring's from then on, too much to hand over.
	pulled bool
	// metUnsynced are the members met before this replica was synced that
	// were not synced either. graceOnly: this replica declared itself
	// synced by its startup grace while it knew such members, and has not
	// pulled since; its catch-up pull is still due.
	metUnsynced map[string]struct{}
	graceOnly   bool
	gone        map[string]absence // members that left or were declared dead
	minAbsence  time.Duration      // shorter absences are blips, not partitions
	pull        *pull
}

// absence is when a member left, when it was last heard from before,
// and whether it was a pending pull candidate then.
type absence struct {
	at, heard time.Time
	pending   bool
}

type syncReq struct {
	from     string
	id       uint64
	handover bool // unasked: this replica's state to a member it met unsynced
}

type pull struct {
	id       uint64
	peer     string
	got      uint64
	total    uint64
	deadline time.Time
	tried    map[string]bool
}

func newTransfer(s *Store) *transfer {
	return &transfer{
		s: s, start: time.Now(),
		kick:        make(chan struct{}, 1),
		reqs:        make(chan syncReq, serveQueue),
		burst:       map[string]struct{}{},
		turned:      map[string]struct{}{},
		metUnsynced: map[string]struct{}{},
		gone:        map[string]absence{},
	}
}

func (t *transfer) meta() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := []byte{metaVersion, 0}
	if t.synced {
		m[1] = metaSynced
	}
	return m
}

func (t *transfer) isSynced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.synced
}

// isAnnounced reports whether the local node's metadata says synced: what
// a joining peer decides to pull by.
func (t *transfer) isAnnounced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.announced
}

// ghost reports whether n is at this replica's own address: a previous
// incarnation of this replica.
func (t *transfer) ghost(n *memberlist.Node) bool {
	self := t.self.Load()
	return self != nil && n.Address() == *self
}

func peerSynced(n *memberlist.Node) bool {
	return len(n.Meta) >= 2 && n.Meta[0] == metaVersion && n.Meta[1]&metaSynced != 0
}

// joined is memberlist's NotifyJoin: remember synced newcomers for the
// next pull decision, and hand this replica's state to a newcomer while
// this replica has not pulled.
func (t *transfer) joined(n memberlist.Node) {
	now := time.Now()
	t.mu.Lock()
	gone, wasGone := t.gone[n.Name]
	delete(t.gone, n.Name)
	blip := wasGone && now.Sub(gone.at) < t.minAbsence && gone.at.Sub(gone.heard) < t.minAbsence
	ghost := t.ghost(&n)
	candidate := peerSynced(&n) && (!blip || gone.pending) && !ghost
	if candidate {
		t.burst[n.Name] = struct{}{}
		t.lastJoin = now
	}
	if !t.synced && !peerSynced(&n) {
		t.metUnsynced[n.Name] = struct{}{}
	}
	// Not after a blip: the member held our state a moment ago.
	handover := !t.synced && !t.pulled && !blip && !ghost && t.s.st.count.Load() > 0
	t.mu.Unlock()
	t.s.log.Debug("gossip: member joined", "member", n.Name, "synced", peerSynced(&n), "blip", blip, "ghost", ghost, "handover", handover)
	if candidate {
		t.poke()
	}
	if handover {
		t.enqueue(syncReq{from: n.Name, handover: true})
	}
}

// turnedSynced is memberlist's NotifyUpdate for a member whose metadata
// now says synced and did not before: a pull candidate while this replica
// lacks state (see the package comment above).
func (t *transfer) turnedSynced(n memberlist.Node) {
	t.mu.Lock()
	_, met := t.metUnsynced[n.Name]
	candidate := (!t.synced || (t.graceOnly && met)) && !t.ghost(&n)
	if candidate {
		t.turned[n.Name] = struct{}{}
		t.lastJoin = time.Now()
	}
	t.mu.Unlock()
	t.s.log.Debug("gossip: member turned synced", "member", n.Name, "candidate", candidate)
	if candidate {
		t.poke()
	}
}

// left is memberlist's NotifyLeave (a graceful leave or a death) of a
// member last heard from at heard.
func (t *transfer) left(n memberlist.Node, heard time.Time) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	_, pending := t.burst[n.Name]
	t.gone[n.Name] = absence{at: now, heard: heard, pending: pending}
	delete(t.burst, n.Name)
	delete(t.turned, n.Name)
	// metUnsynced keeps it: a member that flaps is still one met unsynced.
	if len(t.gone) > 4096 { // members that never return
		for name, at := range t.gone {
			if now.Sub(at.at) > time.Hour {
				delete(t.gone, name)
			}
		}
	}
}

func (t *transfer) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// loop makes the pull decisions: after a burst of joins, on a stalled pull,
// and once at startup to declare a lone replica synced.
func (t *transfer) loop() {
	tick := time.NewTicker(loopInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.s.ctx.Done():
			return
		case <-tick.C:
		case <-t.kick:
		}
		t.step(time.Now())
	}
}

func (t *transfer) step(now time.Time) {
	members := t.s.peers()
	t.mu.Lock()
	var req *pull
	switch p := t.pull; {
	case p != nil && now.After(p.deadline):
		p.tried[p.peer] = true
		if len(p.tried) >= pullAttempts {
			t.s.met.transfers.WithLabelValues("gave_up").Inc()
			t.s.log.Warn("gossip: state transfer gave up; bindings will arrive through deltas and refreshes", "tried", len(p.tried))
			t.pull = nil
			t.setSyncedLocked()
			break
		}
		t.s.met.transfers.WithLabelValues("retry").Inc()
		cands := t.syncedMembers(members, p.tried)
		if len(cands) == 0 {
			t.pull = nil
			t.setSyncedLocked()
			break
		}
		p.peer, p.id, p.got, p.total = cands[mrand.IntN(len(cands))], newID(), 0, 0
		p.deadline = now.Add(t.s.opts.TransferTimeout)
		req = p
	case p == nil && len(t.burst)+len(t.turned) > 0 && now.Sub(t.lastJoin) >= joinDebounce && t.s.limitsSynced():
		// Records are judged against the pools' discovery (trust.go):
		// before its first view they would all be refused, so wait for it.
		// Members that turned synced count only while this replica still
		// lacks state: a pull that completed meanwhile brought it.
		lacking := !t.synced || t.graceOnly
		var cands []string
		for _, n := range members {
			_, joined := t.burst[n.Name]
			_, turned := t.turned[n.Name]
			if joined || (turned && lacking) {
				cands = append(cands, n.Name)
			}
		}
		clear(t.burst)
		clear(t.turned)
		if len(cands) > 0 {
			peer := cands[mrand.IntN(len(cands))]
			t.pull = &pull{id: newID(), peer: peer, deadline: now.Add(t.s.opts.TransferTimeout), tried: map[string]bool{}}
			req = t.pull
			t.pulled = true
			if t.graceOnly {
				// The catch-up is spent, whichever member it pulls from.
				t.graceOnly = false
				clear(t.metUnsynced)
				t.s.met.transfers.WithLabelValues("catch_up").Inc()
			}
		}
	}
	if !t.synced && t.pull == nil && len(t.burst)+len(t.turned) == 0 && now.Sub(t.start) >= t.s.opts.StartupGrace {
		t.setSyncedLocked()
		// Members met unsynced may yet pull state this replica lacks.
		t.graceOnly = !t.pulled && len(t.metUnsynced) > 0
		if !t.graceOnly {
			clear(t.metUnsynced)
		}
	}
	var r pull
	if req != nil {
		r = *req
	}
	stale := t.metaStale
	t.metaStale = false
	t.mu.Unlock()

	if req != nil {
		t.s.log.Debug("gossip: pulling state", "from", r.peer)
		if n := t.s.member(r.peer); n != nil {
			msg := encode(&message{Kind: kindSyncReq, From: t.s.name, SyncID: r.id})
			if err := t.s.ml.Load().SendReliable(n, msg); err != nil {
				t.s.log.Debug("gossip: sync request", "to", r.peer, "err", err)
			} else {
				t.s.met.sent("sync_request", 1, len(msg))
			}
		}
	}
	if stale {
		// Re-announce our metadata so that peers pull from us after a heal.
		// UpdateNode sets the local metadata before it waits for the
		// broadcast: a timeout still leaves it announced to every later
		// push-pull.
		if err := t.s.ml.Load().UpdateNode(updateTimeout); err != nil {
			t.s.log.Debug("gossip: update node meta", "err", err)
		}
		t.mu.Lock()
		t.announced = t.synced
		t.mu.Unlock()
	}
}

func (t *transfer) setSyncedLocked() {
	if !t.synced {
		t.synced, t.metaStale = true, true
	}
}

// syncedMembers lists synced members other than this one and skip.
func (t *transfer) syncedMembers(members []*memberlist.Node, skip map[string]bool) []string {
	var out []string
	for _, n := range members {
		if !skip[n.Name] && peerSynced(n) && !t.ghost(n) {
			out = append(out, n.Name)
		}
	}
	return out
}

// chunkReceived counts a chunk of the pull in progress (its records are
// already merged) and completes the pull when all have arrived.
func (t *transfer) chunkReceived(m *message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pull
	if p == nil || p.id != m.SyncID || p.peer != m.From {
		return
	}
	p.got++
	if m.Total > 0 {
		p.total = m.Total
	}
	p.deadline = time.Now().Add(t.s.opts.TransferTimeout)
	if p.total > 0 && p.got >= p.total {
		t.pull = nil
		t.s.met.transfers.WithLabelValues("complete").Inc()
		t.setSyncedLocked()
		t.poke()
	}
}

// requested queues a peer's sync request for serve.
func (t *transfer) requested(from string, id uint64) {
	t.enqueue(syncReq{from: from, id: id})
}

func (t *transfer) enqueue(r syncReq) {
	select {
	case t.reqs <- r:
	default:
		reason := "sync_request"
		if r.handover {
			reason = "handover"
		}
		t.s.met.dropped.WithLabelValues(reason).Inc()
	}
}

// serve streams state to requesters, one at a time per serve goroutine.
func (t *transfer) serve() {
	for {
		select {
		case <-t.s.ctx.Done():
			return
		case r := <-t.reqs:
			t.stream(r)
		}
	}
}

func (t *transfer) stream(r syncReq) {
	s := t.s
	n := s.member(r.from)
	if n == nil {
		return
	}
	pace := time.NewTicker(time.Second / time.Duration(s.opts.ChunkRate))
	defer pace.Stop()
	var sent uint64
	send := func(msg []byte) bool {
		select {
		case <-s.ctx.Done():
			return false
		case <-pace.C:
		}
		if err := s.ml.Load().SendReliable(n, msg); err != nil {
			s.log.Debug("gossip: state transfer aborted", "to", r.from, "err", err)
			return false
		}
		sent++
		s.met.chunks.WithLabelValues("sent").Inc()
		s.met.sent("chunk", 1, len(msg))
		return true
	}
	hdr := &message{Kind: kindChunk, From: s.name, SyncID: r.id}
	p := newPacker(hdr, s.opts.ChunkBytes, send)
	for i := range s.st.shards {
		now := s.now()
		for _, e := range s.st.snapshot(i, now) {
			if !p.add(toRecord(e, now)) {
				return
			}
		}
	}
	if !p.flush() {
		return
	}
	hdr.Total = sent + 1
	if send(encode(hdr)) {
		s.log.Debug("gossip: state streamed", "to", r.from, "chunks", sent+1, "handover", r.handover)
		if r.handover {
			s.met.transfers.WithLabelValues("handover").Inc()
		}
	}
}

func newID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
