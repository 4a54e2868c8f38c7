package proxy

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"
)

// TestBodiesGrowThroughOutgrownBuffers: bodies read one after another,
// of declared and unknown lengths, each grow through the buffers the one
// before outgrew, and every body read stays as it came while the later
// ones are read (a body is never lent again).
func TestBodiesGrowThroughOutgrownBuffers(t *testing.T) {
	var kept [][]byte // what readBody returned
	var want [][]byte // what was sent
	for i, n := range []int{300 << 10, 200 << 10, 16 << 10, 70 << 10, 1 << 20, 5 << 10} {
		for _, declared := range []bool{true, false} {
			sent := make([]byte, n)
			for j := range sent {
				sent[j] = byte(i*31 + j*7)
			}
			r := httptest.NewRequest("POST", "/v1/chat/completions", io.NopCloser(bytes.NewReader(sent)))
			r.ContentLength = -1
			if declared {
				r.ContentLength = int64(n)
			}
			got, err := readBody(httptest.NewRecorder(), r, 4<<20, 0)
			if err != nil {
				t.Fatalf("%d bytes (declared %v): %v", n, declared, err)
			}
			kept, want = append(kept, got), append(want, sent)
			for k := range kept {
				if !bytes.Equal(kept[k], want[k]) {
					t.Fatalf("after reading %d bytes (declared %v): body %d of %d changed", n, declared, k+1, len(kept))
				}
			}
		}
	}
}

// TestBodyClass: only the sizes readBody grows through have a pool.
func TestBodyClass(t *testing.T) {
	for n, want := range map[int]int{
		16 << 10: 0, 32 << 10: 1, 256 << 10: 4, 16 << 20: 10,
		32 << 20: -1, 8 << 10: -1, 256<<10 + 1: -1, 24 << 10: -1, 0: -1,
	} {
		if got := bodyClass(n); got != want {
			t.Errorf("bodyClass(%d) = %d, want %d", n, got, want)
		}
	}
}
