package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

// The wire format of tether's gossip messages (memberlist user messages).
// Hand-rolled varints rather than msgpack: a record is ~30 bytes plus the
// backend names, so a 1,200-byte packet carries ~20 bindings, and the
// decoder is small enough to fuzz exhaustively. Peers may send garbage
// (a wrong version mid-rollout, a bug, an attacker without the key when
// encryption is off): decode rejects, it never panics.
//
//	message := version(1) kind(1) from:str [syncID:uvarint [total:uvarint]] record*
//	         | version(1) kindWork from:str epoch:uvarint work*
//	record  := key(16) gen:uvarint created:varint ttl:uvarint flags(1) pod:str prefill:str
//	work    := backend:str bytes:uvarint
//	str     := len:uvarint bytes
//
// syncID is present for kindSyncReq and kindChunk, total for kindChunk.
// kindWork carries a replica's recent work per backend (work.go); a
// replica of a release before it drops the message as undecodable
// (tether_gossip_decode_errors_total) and goes on.
// ttl is the milliseconds the value has left on the sender's clock: each
// replica turns it into an expiry on its own clock, so clock skew between
// replicas does not shorten or stretch TTLs.

const wireVersion = 1

// Message kinds.
const (
	kindDelta   byte = 1 // created, rebound and deleted bindings; read repairs
	kindRefresh byte = 2 // coalesced expiry extensions of live bindings
	kindSyncReq byte = 3 // "stream me your state"
	kindChunk   byte = 4 // one bounded piece of a state transfer
	kindWork    byte = 5 // a replica's recent work per backend, as of an epoch
)

// Bounds a decoder enforces: the shape of a message. What a record may say
// (its expiry, generation and backends) is judged against this replica's
// own pools after decoding (trust.go).
const (
	maxNameLen = 512                // memberlist node names (a pod name and a suffix)
	maxIDLen   = discovery.MaxIDLen // backend IDs: no pool has a longer one
	maxTTL     = 40 * 86400_000     // 40 days in ms: far beyond any sane binding TTL
	recordMin  = 16 + 1 + 1 + 1 + 1 + 1 + 1
	// recordMax is the largest record: every varint at full length and
	// both backend IDs at maxIDLen. Packets are sized so one always fits.
	recordMax = 16 + 10 + 10 + 10 + 1 + 2*(2+maxIDLen)
	// maxWorkEntries bounds the backends of one kindWork message (a
	// packet holds a few dozen of real length).
	maxWorkEntries = 1024
)

var kindNames = map[byte]string{
	kindDelta: "delta", kindRefresh: "refresh", kindSyncReq: "sync_request", kindChunk: "chunk", kindWork: "work",
}

type message struct {
	Kind    byte
	From    string // sender's memberlist node name, for replies
	SyncID  uint64
	Total   uint64 // kindChunk: on the transfer's end marker, how many chunks it sent (marker included); else 0
	Records []record
	Epoch   uint64      // kindWork
	Work    []workEntry // kindWork
}

// workEntry is one backend's recent work in a kindWork message: request
// bytes, decayed to the epoch's instant.
type workEntry struct {
	ID    string
	Bytes uint64
}

type record struct {
	Key     key
	Gen     uint64
	Created int64
	TTL     int64 // ms left; > 0 on the wire
	Tomb    bool
	Pod     string
	Prefill string
}

func toRecord(p pair, now int64) record {
	return record{
		Key: p.k, Gen: p.v.Gen, Created: p.v.Created, TTL: min(max(p.v.Expires-now, 1), maxTTL),
		Tomb: p.v.Tomb, Pod: p.v.Pod, Prefill: p.v.Prefill,
	}
}

func (r record) value(now int64) value {
	return value{Gen: r.Gen, Created: r.Created, Pod: r.Pod, Prefill: r.Prefill, Tomb: r.Tomb, Expires: now + r.TTL}
}

func appendHeader(b []byte, m *message) []byte {
	b = append(b, wireVersion, m.Kind)
	b = appendString(b, m.From)
	switch m.Kind {
	case kindSyncReq:
		b = binary.AppendUvarint(b, m.SyncID)
	case kindChunk:
		b = binary.AppendUvarint(b, m.SyncID)
		b = binary.AppendUvarint(b, m.Total)
	case kindWork:
		b = binary.AppendUvarint(b, m.Epoch)
	}
	return b
}

func appendWork(b []byte, w workEntry) []byte {
	return binary.AppendUvarint(appendString(b, w.ID), w.Bytes)
}

func appendRecord(b []byte, r record) []byte {
	b = append(b, r.Key[:]...)
	b = binary.AppendUvarint(b, r.Gen)
	b = binary.AppendVarint(b, r.Created)
	b = binary.AppendUvarint(b, uint64(r.TTL))
	var flags byte
	if r.Tomb {
		flags = 1
	}
	b = append(b, flags)
	b = appendString(b, r.Pod)
	return appendString(b, r.Prefill)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encode returns m as one message (for small messages and tests).
func encode(m *message) []byte {
	b := appendHeader(nil, m)
	for _, r := range m.Records {
		b = appendRecord(b, r)
	}
	for _, w := range m.Work {
		b = appendWork(b, w)
	}
	return b
}

// packer appends records to messages with one header and hands each
// message to emit once the next record would take it past limit; a record
// never straddles two messages. A record bigger than limit on its own
// (recordMax with a long header) still goes out, alone.
type packer struct {
	hdr   []byte
	limit int
	cur   []byte
	emit  func([]byte) bool
}

func newPacker(m *message, limit int, emit func([]byte) bool) *packer {
	hdr := appendHeader(nil, m)
	return &packer{hdr: hdr, limit: limit, emit: emit}
}

// add appends r; it returns false once emit has refused a message.
func (p *packer) add(r record) bool {
	return p.addWith(func(b []byte) []byte { return appendRecord(b, r) })
}

// addWith appends what app appends (one record or work entry).
func (p *packer) addWith(app func([]byte) []byte) bool {
	if p.cur == nil {
		p.cur = append(make([]byte, 0, p.limit), p.hdr...)
	}
	n := len(p.cur)
	p.cur = app(p.cur)
	if len(p.cur) <= p.limit || n == len(p.hdr) {
		return true
	}
	msg := p.cur[:n:n]
	p.cur = append(append(make([]byte, 0, p.limit), p.hdr...), p.cur[n:]...)
	return p.emit(msg)
}

// flush emits the message being filled, if it holds a record.
func (p *packer) flush() bool {
	if len(p.cur) <= len(p.hdr) {
		return true
	}
	msg := p.cur
	p.cur = nil
	return p.emit(msg)
}

// pack splits recs into messages of at most limit bytes with m's header.
func pack(m *message, recs []record, limit int) [][]byte {
	var out [][]byte
	p := newPacker(m, limit, func(b []byte) bool { out = append(out, b); return true })
	for _, r := range recs {
		p.add(r)
	}
	p.flush()
	return out
}

var errShort = errors.New("truncated")

// decode parses one message. Strings are copied out of b, which memberlist
// may reuse after NotifyMsg returns.
func decode(b []byte) (*message, error) {
	d := decoder{b: b}
	if v := d.byte(); v != wireVersion {
		if d.err != nil {
			return nil, d.err
		}
		return nil, fmt.Errorf("unsupported version %d", v)
	}
	m := &message{Kind: d.byte()}
	m.From = d.string(maxNameLen)
	switch m.Kind {
	case kindDelta, kindRefresh:
	case kindSyncReq:
		m.SyncID = d.uvarint()
	case kindChunk:
		m.SyncID, m.Total = d.uvarint(), d.uvarint()
	case kindWork:
		m.Epoch = d.uvarint()
		for d.err == nil && len(d.b) > 0 {
			if len(m.Work) == maxWorkEntries {
				return nil, fmt.Errorf("work message of over %d backends", maxWorkEntries)
			}
			w := workEntry{ID: d.string(maxIDLen), Bytes: d.uvarint()}
			if d.err == nil && w.ID == "" {
				d.fail(errors.New("work entry without backend"))
			}
			m.Work = append(m.Work, w)
		}
		if d.err != nil {
			return nil, d.err
		}
		return m, nil
	default:
		if d.err == nil {
			return nil, fmt.Errorf("unknown kind %d", m.Kind)
		}
	}
	if d.err == nil && m.Kind == kindSyncReq && len(d.b) > 0 {
		return nil, errors.New("trailing bytes after sync request")
	}
	if d.err == nil && len(d.b) > 0 {
		m.Records = make([]record, 0, min(len(d.b)/recordMin, 64))
	}
	for d.err == nil && len(d.b) > 0 {
		m.Records = append(m.Records, d.record())
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad uvarint"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad varint"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(limit uint64) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > limit {
		d.fail(fmt.Errorf("name of %d bytes exceeds %d", n, limit))
		return ""
	}
	if uint64(len(d.b)) < n {
		d.fail(errShort)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) record() record {
	var r record
	if len(d.b) < len(r.Key) {
		d.fail(errShort)
		return r
	}
	copy(r.Key[:], d.b)
	d.b = d.b[len(r.Key):]
	r.Gen = d.uvarint()
	r.Created = d.varint()
	ttl := d.uvarint()
	if d.err == nil && (ttl == 0 || ttl > maxTTL) {
		d.fail(fmt.Errorf("ttl %d ms out of range", ttl))
	}
	r.TTL = int64(ttl)
	switch f := d.byte(); {
	case d.err != nil:
	case f > 1:
		d.fail(fmt.Errorf("unknown flags %#x", f))
	default:
		r.Tomb = f == 1
	}
	r.Pod = d.string(maxIDLen)
	r.Prefill = d.string(maxIDLen)
	if d.err == nil && r.Pod == "" {
		d.fail(errors.New("record without pod"))
	}
	return r
}
