package gossip

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
)

func sampleRecords(n int) []record {
	out := make([]record, n)
	for i := range out {
		out[i] = record{
			Key: keyOf(strings.Repeat("ab", 15) + string(rune('a'+i%6)) + "0"), Gen: uint64(i), Created: 1_760_000_000_000 + int64(i),
			TTL: 300_000, Tomb: i%3 == 0, Pod: "llama-decode-7f9c8d-x2k4p", Prefill: map[bool]string{true: "llama-prefill-0"}[i%2 == 0],
		}
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	for _, m := range []*message{
		{Kind: kindDelta, From: "router-0-ab12", Records: sampleRecords(3)},
		{Kind: kindRefresh, From: "r", Records: sampleRecords(1)},
		{Kind: kindSyncReq, From: "r", SyncID: 1 << 60},
		{Kind: kindChunk, From: "r", SyncID: 7, Records: sampleRecords(2)},
		{Kind: kindChunk, From: "r", SyncID: 7, Total: 12},
		{Kind: kindWork, From: "r", Epoch: 1_764_000_000, Work: []workEntry{{"llama-decode-7f9c8d-x2k4p", 19_000}, {"sim-1", 0}}},
		{Kind: kindWork, From: "r", Epoch: 1},
	} {
		got, err := decode(encode(m))
		if err != nil {
			t.Fatalf("decode(%+v): %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestPackBounds(t *testing.T) {
	recs := sampleRecords(500)
	const limit = 1200
	msgs := pack(&message{Kind: kindDelta, From: "node"}, recs, limit)
	var n int
	for _, b := range msgs {
		if len(b) > limit {
			t.Fatalf("message of %d bytes exceeds %d", len(b), limit)
		}
		m, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		n += len(m.Records)
	}
	if n != len(recs) || len(msgs) < 2 {
		t.Fatalf("%d records in %d messages, want %d in several", n, len(msgs), len(recs))
	}
	t.Logf("%d records in %d packets of <= %d bytes (%.1f per packet)", n, len(msgs), limit, float64(n)/float64(len(msgs)))
}

func TestDecodeRejects(t *testing.T) {
	good := encode(&message{Kind: kindDelta, From: "n", Records: sampleRecords(1)})
	cases := map[string][]byte{
		"empty":                nil,
		"version":              append([]byte{9}, good[1:]...),
		"kind":                 append([]byte{wireVersion, 77}, good[2:]...),
		"truncated":            good[:len(good)-1],
		"trailing junk":        append(bytes.Clone(good), 0xff),
		"long name":            append([]byte{wireVersion, kindDelta, 0xff, 0xff, 0x03}, make([]byte, 70000)...),
		"work without backend": encode(&message{Kind: kindWork, From: "n", Epoch: 1, Work: []workEntry{{"", 5}}}),
		"work truncated":       encode(&message{Kind: kindWork, From: "n", Epoch: 1, Work: []workEntry{{"sim-0", 1 << 20}}})[:12],
		"work of too many":     encode(&message{Kind: kindWork, From: "n", Epoch: 1, Work: slices.Repeat([]workEntry{{"s", 1}}, maxWorkEntries+1)}),
	}
	for name, b := range cases {
		if _, err := decode(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// FuzzDecode: a peer may send anything. decode never panics, whatever it
// accepts is within the wire's bounds and re-encodes to something it
// decodes to the same message, and no record it yields is merged beyond
// this replica's limits: never a generation above the maximum, a backend
// no pool lists, or an expiry past now plus the pool's TTL.
func FuzzDecode(f *testing.F) {
	limits := newFakeLimits(time.Minute, "llama-decode-7f9c8d-x2k4p", "llama-prefill-0")
	s := &Store{opts: Options{Limits: limits, TombstoneGrace: 30 * time.Second}}
	f.Add(encode(&message{Kind: kindDelta, From: "n", Records: sampleRecords(2)}))
	f.Add(encode(&message{Kind: kindChunk, From: "n", SyncID: 3, Total: 2}))
	f.Add(encode(&message{Kind: kindSyncReq, From: "n", SyncID: 3}))
	f.Add([]byte{wireVersion, kindRefresh, 0})
	f.Add(encode(&message{Kind: kindWork, From: "n", Epoch: 9, Work: []workEntry{{"sim-0", 1 << 40}, {"llama-prefill-0", 3}}}))
	huge := sampleRecords(2)
	huge[0].Gen, huge[1].TTL = 1<<63, maxTTL
	f.Add(encode(&message{Kind: kindDelta, From: "n", Records: huge}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			return
		}
		if len(m.From) > maxNameLen {
			t.Fatalf("node name of %d bytes", len(m.From))
		}
		if len(m.Work) > maxWorkEntries || m.Kind != kindWork && (m.Epoch != 0 || m.Work != nil) {
			t.Fatalf("work out of the wire's bounds: kind %d, epoch %d, %d entries", m.Kind, m.Epoch, len(m.Work))
		}
		for _, w := range m.Work {
			if w.ID == "" || len(w.ID) > maxIDLen {
				t.Fatalf("work entry out of the wire's bounds: %+v", w)
			}
		}
		const now = 1_000_000
		for _, r := range m.Records {
			if len(r.Pod) > maxIDLen || len(r.Prefill) > maxIDLen || r.Pod == "" || r.TTL <= 0 || r.TTL > maxTTL {
				t.Fatalf("record out of the wire's bounds: %+v", r)
			}
			v, drop, _ := s.admit(r, now)
			if drop != "" {
				continue
			}
			limit := int64(60_000)
			if r.Tomb {
				limit = 2*limit + 30_000
			}
			if v.Gen > store.MaxGeneration || !limits.backends[v.Pod] || (v.Prefill != "" && !limits.backends[v.Prefill]) || v.Expires > now+limit {
				t.Fatalf("admitted beyond the limits: %+v from %+v", v, r)
			}
		}
		m2, err := decode(encode(m))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message: %+v vs %+v", m, m2)
		}
	})
}
