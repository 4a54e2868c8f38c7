package gossip

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"
)

// Work shared over the ring, for the work bound of hashed placement
// (balance.WithWorkBound: a backend sent more recent request bytes than
// (1+ε) × the mean is passed over for a new session).
//
// Each replica counts only the requests it forwards, and replicas whose
// counts differ may propose different backends for one new session.
// Redis settles that at the first create, before the request is sent; a
// ring only once the binding has gone round, and a next turn reaching
// another replica before then would go where that replica's own count
// points. So a ring shares its counts in a form every replica reads
// alike:
//
//   - at the same instants on every replica, the multiples of
//     WorkInterval since the Unix epoch (the epochs), each replica sends
//     every member its counts as of that instant, labelled with it;
//   - the view placement reads is the sum, over the members (this replica
//     included), of their reports of one epoch: the latest one that every
//     report has had WorkGrace to arrive for. A member whose report of it
//     is missing counts with its previous one (up to workStaleEpochs
//     back), by the same rule on every replica.
//
// Between two switches every replica reads the same sum, so they agree on
// the work bound as they do on the hash. They may part for the moments
// around a switch that clock skew covers (NTP keeps it to milliseconds),
// where a report was lost, and for a replica's first epochs in the ring.
// The view is up to WorkInterval + WorkGrace old; work halves every 30 s.

// Defaults of Options.WorkInterval and Options.WorkGrace.
const (
	DefaultWorkInterval = time.Second
	DefaultWorkGrace    = 250 * time.Millisecond
)

const (
	workEpochsKept  = 3    // reports held per member
	workStaleEpochs = 2    // how many epochs older than the view a member's last report may be and still count
	maxWorkBackends = 4096 // backends of one member's report
)

// WorkSource adds, with add, this replica's recent work (request bytes)
// per backend as of at.
type WorkSource = func(at time.Time, add func(id string, bytes float64))

type workReport struct {
	epoch int64
	bytes map[string]float64
}

// ShareWork adds src to what this replica reports to the ring every
// WorkInterval (each pool's balancer is one source).
func (s *Store) ShareWork(src WorkSource) {
	s.workMu.Lock()
	s.workSources = append(s.workSources, src)
	s.workMu.Unlock()
}

// Work sets w[i] to the ring's recent work on backend ids[i]: the view
// described above, the same on every replica.
func (s *Store) Work(ids []string, w []float64) {
	clear(w)
	s.workMu.Lock()
	defer s.workMu.Unlock()
	s.eachViewReport(s.now(), func(r *workReport) {
		for i, id := range ids {
			w[i] += r.bytes[id]
		}
	})
}

// workView is the view's reporters and its total, for the metrics.
func (s *Store) workView() (reporters int, total float64) {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	s.eachViewReport(s.now(), func(r *workReport) {
		reporters++
		for _, b := range r.bytes {
			total += b
		}
	})
	return reporters, total
}

// eachViewReport calls f with each member's report that counts in the
// view at nowMs. s.workMu is held.
func (s *Store) eachViewReport(nowMs int64, f func(*workReport)) {
	k := s.workEpoch(nowMs - s.opts.WorkGrace.Milliseconds())
	for _, reps := range s.workReports {
		for i := len(reps) - 1; i >= 0; i-- {
			if r := &reps[i]; r.epoch <= k {
				if r.epoch >= k-workStaleEpochs {
					f(r)
				}
				break
			}
		}
	}
}

// workEpoch is the epoch under way at unix ms t.
func (s *Store) workEpoch(t int64) int64 {
	return int64(math.Floor(float64(t) / float64(s.opts.WorkInterval.Milliseconds())))
}

// workLoop reports this replica's work at every epoch.
func (s *Store) workLoop() {
	interval := s.opts.WorkInterval.Milliseconds()
	for {
		now := s.now()
		next := s.workEpoch(now) + 1
		t := time.NewTimer(time.Duration(next*interval-now) * time.Millisecond)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.reportWork(next)
	}
}

// reportWork takes this replica's counts as of epoch's instant, keeps
// them as its own report and sends them to every member.
func (s *Store) reportWork(epoch int64) {
	at := time.UnixMilli(epoch * s.opts.WorkInterval.Milliseconds())
	bytes := map[string]float64{}
	s.workMu.Lock()
	sources := slices.Clone(s.workSources)
	s.workMu.Unlock()
	for _, src := range sources {
		src(at, func(id string, b float64) {
			if _, ok := bytes[id]; ok || len(bytes) < maxWorkBackends {
				bytes[id] += b
			}
		})
	}
	s.workMu.Lock()
	s.keepWork(s.name, epoch, bytes)
	s.workMu.Unlock()
	if len(bytes) == 0 {
		// Nothing to say, and an idle replica sends nothing. Its peers
		// count its last report for workStaleEpochs more, while its own
		// view has it at zero: a difference of a byte or so per backend
		// (WorkAt leaves out backends under one byte).
		return
	}
	m := &message{Kind: kindWork, From: s.name, Epoch: uint64(epoch)}
	var msgs [][]byte
	p := newPacker(m, s.packetLimit, func(b []byte) bool { msgs = append(msgs, b); return true })
	for _, id := range slices.Sorted(maps.Keys(bytes)) {
		e := workEntry{ID: id, Bytes: uint64(math.Round(bytes[id]))}
		p.addWith(func(b []byte) []byte { return appendWork(b, e) })
	}
	p.flush()
	s.sendEveryone(kindNames[kindWork], msgs)
}

// receiveWork keeps a member's report (one message of it: a report of
// many backends comes in several). A report of an epoch out of use, or
// from a replica that is not a member, is dropped; so is a backend no
// pool here lists.
func (s *Store) receiveWork(m *message) {
	now := s.now()
	cur, epoch := s.workEpoch(now), int64(m.Epoch)
	if m.Epoch > math.MaxInt64 || epoch < cur-workEpochsKept || epoch > cur+1 || s.member(m.From) == nil {
		s.met.recordsDropped[dropWorkReport].Inc()
		return
	}
	bytes := make(map[string]float64, len(m.Work))
	for _, w := range m.Work {
		if l := s.opts.Limits; l != nil {
			if !l.Synced() {
				s.met.recordsDropped[dropNotSynced].Inc()
				continue
			}
			if _, ok := l.BindingTTL(w.ID, ""); !ok {
				s.met.recordsDropped[dropUnknownBackend].Inc()
				continue
			}
		}
		bytes[w.ID] += float64(w.Bytes)
	}
	s.workMu.Lock()
	s.keepWork(m.From, epoch, bytes)
	s.workMu.Unlock()
}

// keepWork adds bytes to member's report of epoch, keeping its newest
// workEpochsKept reports. s.workMu is held.
func (s *Store) keepWork(member string, epoch int64, bytes map[string]float64) {
	reps := s.workReports[member]
	i := slices.IndexFunc(reps, func(r workReport) bool { return r.epoch == epoch })
	if i < 0 {
		reps = append(reps, workReport{epoch: epoch, bytes: map[string]float64{}})
		slices.SortFunc(reps, func(a, b workReport) int { return cmp.Compare(a.epoch, b.epoch) })
		if len(reps) > workEpochsKept {
			reps = slices.Delete(reps, 0, len(reps)-workEpochsKept)
		}
		s.workReports[member] = reps
		if i = slices.IndexFunc(reps, func(r workReport) bool { return r.epoch == epoch }); i < 0 {
			return // older than every report kept
		}
	}
	r := reps[i].bytes
	for id, b := range bytes {
		if _, ok := r[id]; ok || len(r) < maxWorkBackends {
			r[id] += b
		}
	}
}

// forgetWork drops a member's reports once it has left the ring.
func (s *Store) forgetWork(member string) {
	s.workMu.Lock()
	delete(s.workReports, member)
	s.workMu.Unlock()
}
