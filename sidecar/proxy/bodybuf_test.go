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
// ones are read (readBody never frees the buffer it returns).
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

// TestBodyClass: a body of n bytes takes the smallest class that holds it.
func TestBodyClass(t *testing.T) {
	for n, want := range map[int]int{
		0: 0, 1: 0, 512: 0, 513: 1, 16 << 10: 5, 16<<10 + 1: 6, 256 << 10: 9,
		256<<10 + 1: 10, 16 << 20: 15, 16<<20 + 1: -1,
	} {
		if got := bodyClass(n); got != want {
			t.Errorf("bodyClass(%d) = %d, want %d", n, got, want)
		}
		if c := bodyClass(n); c >= 0 && (classSize(c) < n || c > 0 && classSize(c-1) >= n) {
			t.Errorf("bodyClass(%d) = %d, of %d bytes: not the smallest that holds it", n, c, classSize(c))
		}
	}
}

// TestADeclaredBodyFillsItsBuffer: a body whose Content-Length is a
// class's size ends in a buffer of that size (the end is read into a
// byte of its own), and a body longer than it declared is read whole.
func TestADeclaredBodyFillsItsBuffer(t *testing.T) {
	for _, n := range []int{512, 16 << 10, 64 << 10, 256 << 10} {
		sent := bytes.Repeat([]byte{'x'}, n)
		r := httptest.NewRequest("POST", "/", io.NopCloser(bytes.NewReader(sent))) // the end on a read of its own
		r.ContentLength = int64(n)
		got, err := readBody(httptest.NewRecorder(), r, 1<<20, 0)
		if err != nil || !bytes.Equal(got, sent) || cap(got) != n {
			t.Errorf("%d bytes: got %d in a buffer of %d, err %v; want them in one of %d", n, len(got), cap(got), err, n)
		}
	}
	sent := bytes.Repeat([]byte{'y'}, 20<<10)
	r := httptest.NewRequest("POST", "/", io.NopCloser(bytes.NewReader(sent)))
	r.ContentLength = 16 << 10
	if got, err := readBody(httptest.NewRecorder(), r, 1<<20, 0); err != nil || !bytes.Equal(got, sent) {
		t.Errorf("a body longer than declared: got %d bytes, err %v; want all %d", len(got), err, len(sent))
	}
}

// TestABodyLentToATransportIsNotFreed: an exchange gives its body's
// buffer back for later bodies, unless a transport that may read it
// after its round trip had it (exchange.bodyLent).
func TestABodyLentToATransportIsNotFreed(t *testing.T) {
	const n = 64 << 10
	reused := func(lent bool) bool {
		for range 20 { // the race detector's sync.Pool drops a quarter of what it is given
			x := &exchange{reqBytes: bodyBuffer(n)[:n], bodyLent: lent}
			p := &x.reqBytes[0]
			x.freeBody()
			b := bodyBuffer(n)
			if &b[:1][0] == p {
				return true
			}
			freeBodyBuffer(b)
		}
		return false
	}
	if reused(true) {
		t.Error("a body lent to a transport was lent again")
	}
	if !reused(false) {
		t.Error("a body's buffer never came back after its exchange")
	}
}
