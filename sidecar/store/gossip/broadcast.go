package gossip

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// How changes travel. memberlist's own broadcast waits for the next gossip
// tick (200 ms) and reaches GossipNodes (3) members per tick, while the
// next turn of a session may land on another replica 100 ms later. So:
//
//   - a created, rebound or deleted binding is sent at once to every member
//     (one UDP packet each, batched with whatever else is waiting), and also
//     queued for memberlist's gossip as the repair path for lost packets;
//   - refreshes are coalesced: a binding's expiry is announced at most once
//     per quarter TTL, in batches every RefreshInterval, to every member;
//   - a replica that receives a value losing to the one it holds sends its
//     winner back to the sender (read repair), so conflicts heal at first
//     contact even when a delta was lost.

// announce sends a local change (create, rebind, delete) to the ring.
func (s *Store) announce(p pair) {
	msg := encode(&message{Kind: kindDelta, From: s.name, Records: []record{toRecord(p, s.now())}})
	s.queue.QueueBroadcast(&broadcast{name: string(p.k[:]), msg: msg})
	if s.queue.NumQueued() > maxQueued {
		s.queue.Prune(maxQueued)
	}
	select {
	case s.out <- p:
	default:
		s.met.dropped.WithLabelValues("direct_send").Inc()
	}
}

// sendLoop does the direct sends: deltas as soon as they are queued,
// read repairs, and the coalesced refreshes every RefreshInterval.
func (s *Store) sendLoop() {
	tick := time.NewTicker(s.opts.RefreshInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case p := <-s.out:
			batch := []pair{p}
		drain:
			for len(batch) < 1024 {
				select {
				case p := <-s.out:
					batch = append(batch, p)
				default:
					break drain
				}
			}
			s.sendAll(kindDelta, batch)
		case r := <-s.repairs:
			s.sendTo(r.to, "repair", pack(&message{Kind: kindDelta, From: s.name}, r.recs, s.packetLimit))
		case <-tick.C:
			if ps := s.st.takeDirty(s.now()); len(ps) > 0 {
				s.sendAll(kindRefresh, ps)
			}
		}
	}
}

// sendAll sends ps to every other member, packed into packets.
func (s *Store) sendAll(kind byte, ps []pair) {
	now := s.now()
	recs := make([]record, len(ps))
	for i, p := range ps {
		recs[i] = toRecord(p, now)
	}
	s.sendEveryone(kindNames[kind], pack(&message{Kind: kind, From: s.name}, recs, s.packetLimit))
}

// sendEveryone sends msgs to every other member.
func (s *Store) sendEveryone(label string, msgs [][]byte) {
	ml := s.ml.Load()
	for _, n := range s.peers() {
		for _, m := range msgs {
			if err := ml.SendBestEffort(n, m); err != nil {
				s.log.Debug("gossip send", "to", n.Name, "err", err)
				continue
			}
			s.met.sent(label, 1, len(m))
		}
	}
}

// sendTo sends msgs to the member named to, if it is still a member.
func (s *Store) sendTo(to, label string, msgs [][]byte) {
	ml := s.ml.Load()
	n := s.member(to)
	if n == nil {
		return
	}
	for _, m := range msgs {
		if err := ml.SendBestEffort(n, m); err != nil {
			s.log.Debug("gossip send", "to", to, "err", err)
			return
		}
		s.met.sent(label, 1, len(m))
	}
}

// receive handles one message from a peer. It runs on memberlist's packet
// loop (or a stream goroutine): it merges and queues replies, it never
// blocks.
func (s *Store) receive(b []byte) {
	m, err := decode(b)
	if err != nil {
		s.met.decodeErrors.Inc()
		s.log.Debug("gossip: dropped undecodable message", "bytes", len(b), "err", err)
		return
	}
	s.heardFrom(m.From)
	label := kindNames[m.Kind]
	s.met.msgsRecv.WithLabelValues(label).Inc()
	s.met.bytesRecv.WithLabelValues(label).Add(float64(len(b)))
	switch m.Kind {
	case kindSyncReq:
		s.xfer.requested(m.From, m.SyncID)
		return
	case kindWork:
		s.receiveWork(m)
		return
	case kindChunk:
		s.met.chunks.WithLabelValues("received").Inc()
	}
	s.mergeMessage(m)
	if m.Kind == kindChunk {
		s.xfer.chunkReceived(m)
	}
}

// mergeMessage applies m's records (state.apply, by merge) and sends the
// sender back the values of ours that beat its (read repair).
func (s *Store) mergeMessage(m *message) {
	now := s.now()
	hook := s.hook.Load()
	var back []record
	for _, r := range m.Records {
		v, drop, clamped := s.admit(r, now)
		if drop != "" {
			s.met.recordsDropped[drop].Inc()
			continue
		}
		if clamped {
			s.met.recordsClamped.Inc()
		}
		res, win := s.st.apply(r.Key, v, now)
		switch res {
		case applyReplaced:
			s.met.conflicts.WithLabelValues("replaced").Inc()
		case applyRejected:
			s.met.conflicts.WithLabelValues("kept").Inc()
			back = append(back, toRecord(pair{r.Key, win}, now))
		}
		if hook != nil {
			(*hook)(r.Key, res)
		}
	}
	if len(back) == 0 || m.From == "" || m.From == s.name {
		return
	}
	select {
	case s.repairs <- repairSend{to: m.From, recs: back}:
	default:
		s.met.dropped.WithLabelValues("repair").Inc()
	}
}

// sweepLoop honours TTLs on this replica's clock.
func (s *Store) sweepLoop() {
	tick := time.NewTicker(s.opts.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
			s.met.expired.Add(float64(s.st.sweep(s.now())))
		}
	}
}

// broadcast is a delta on memberlist's gossip queue, named by its key so a
// newer delta for the same key replaces an older one still queued.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
func (b *broadcast) Name() string    { return b.name }
