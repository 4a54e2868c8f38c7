package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"testing/iotest"
	"time"
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
// class's size ends in a buffer of that size (the end is read into its
// last byte, kept aside), and a body longer than it declared is read
// whole.
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

// TestAFullBufferEndsWithoutAnAllocation: the read that finds the end of
// a body filling its buffer exactly (a declared length that is a class's
// size) allocates nothing more than the read of a body one byte shorter,
// whose end lands in its buffer's spare room. A byte of its own for that
// read went to the heap: one allocation more per such body.
func TestAFullBufferEndsWithoutAnAllocation(t *testing.T) {
	// One P: a buffer given back on one P is in a slot of that P's
	// (sync.Pool's private), so with two the pool's hits vary.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const size, runs = 16 << 10, 200
	sent := bytes.Repeat([]byte{'x'}, size)
	mallocs := func(n int) float64 {
		w := httptest.NewRecorder()
		rd := bytes.NewReader(sent[:n]) // the end on a read of its own
		r := httptest.NewRequest("POST", "/", io.NopCloser(rd))
		r.ContentLength = int64(n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			rd.Reset(sent[:n])
			r.Body = io.NopCloser(rd)
			got, err := readBody(w, r, 1<<20, 0)
			if err != nil || len(got) != n {
				t.Fatalf("%d bytes: read %d, err %v", n, len(got), err)
			}
			freeBodyBuffer(got)
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / runs
	}
	mallocs(size) // the pool filled
	full, spare := mallocs(size), mallocs(size-1)
	t.Logf("allocations per body: %.2f filling its buffer, %.2f with room to spare", full, spare)
	if full-spare >= 0.5 {
		t.Errorf("a body filling its buffer: %.2f allocations per read, %.2f for one a byte shorter; want no more", full, spare)
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

// chunkedReader gives data in reads of the sizes sizes cycles through
// (0: a read of nothing, never twice in a row), the end with the last
// bytes or on a read of its own.
type chunkedReader struct {
	data    []byte
	sizes   []byte
	i       int
	empty   bool // the last read gave nothing
	eofLate bool
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)]) * 97
		r.i++
		if n == 0 && r.empty {
			n = 1
		}
		r.empty = n == 0
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	if len(r.data) == 0 && !r.eofLate {
		return n, io.EOF
	}
	return n, nil
}

// FuzzReadBody: whatever the body's length, its declared length (none,
// its own, less, more), the sizes its reads come in and where its end is
// reported, readBody returns it byte for byte, or the limit's error past
// the limit; and the bodies it returned before stay as they came (the
// buffers it outgrows and frees are never a body's).
func FuzzReadBody(f *testing.F) {
	f.Add(uint32(300), int8(0), []byte{1, 0, 255}, false, uint32(1<<20))
	f.Add(uint32(16<<10), int8(0), []byte{}, true, uint32(1<<20))
	f.Add(uint32(512), int8(1), []byte{5}, true, uint32(1<<20))
	f.Add(uint32(70_000), int8(-1), []byte{200, 3}, false, uint32(1<<20))
	f.Add(uint32(40_000), int8(2), []byte{7}, true, uint32(32<<10))
	f.Add(uint32(1024), int8(2), []byte{}, true, uint32(1<<20)) // declares 512, a class's size: the probe finds more
	var kept, want [][]byte
	f.Fuzz(func(t *testing.T, n uint32, declare int8, sizes []byte, eofLate bool, limit uint32) {
		n, limit = n%(1<<20), limit%(2<<20)
		sent := make([]byte, n)
		for i := range sent {
			sent[i] = byte(i*7 + int(n))
		}
		r := httptest.NewRequest("POST", "/", io.NopCloser(&chunkedReader{data: sent, sizes: sizes, eofLate: eofLate}))
		switch declare % 3 {
		case 0:
			r.ContentLength = -1
		case 1, -1:
			r.ContentLength = int64(n)
		case 2, -2:
			r.ContentLength = int64(n) / 2
		}
		got, err := readBody(httptest.NewRecorder(), r, int64(limit), 0)
		if int64(n) > int64(limit) {
			var tooBig *http.MaxBytesError
			if !errors.As(err, &tooBig) {
				t.Fatalf("%d bytes over a limit of %d: err %v", n, limit, err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, sent) {
			t.Fatalf("%d bytes (Content-Length %d): got %d, err %v", n, r.ContentLength, len(got), err)
		}
		kept, want = append(kept, got), append(want, sent)
		if len(kept) > 8 {
			kept, want = kept[1:], want[1:]
		}
		for k := range kept {
			if !bytes.Equal(kept[k], want[k]) {
				t.Fatalf("a body read before changed")
			}
		}
	})
}

// TestAWholeBufferOnlyFromThePool: a declared body is read into a buffer
// of its whole length when a pool has one idle (no growth, no copies),
// and never into one allocated ahead of its bytes: a client announcing
// 1 MiB and sending 1,000 bytes holds the first buffer's 16 KiB when the
// pools are empty.
func TestAWholeBufferOnlyFromThePool(t *testing.T) {
	const announced = 1 << 20
	for { // empty the pool of announced's class
		if _, ok := pooledBodyBuffer(announced); !ok {
			break
		}
	}
	r := httptest.NewRequest("POST", "/", io.NopCloser(io.MultiReader(bytes.NewReader(make([]byte, 1000)), iotest.ErrReader(io.ErrUnexpectedEOF))))
	r.ContentLength = announced
	got, err := readBody(httptest.NewRecorder(), r, 4<<20, 0)
	if err == nil || len(got) != 1000 || cap(got) > firstBodyBuffer {
		t.Errorf("1,000 bytes of an announced %d: %d read into a buffer of %d (err %v); want them in one of at most %d", announced, len(got), cap(got), err, firstBodyBuffer)
	}
	freeBodyBuffer(got)

	sent := bytes.Repeat([]byte{'z'}, 700_000)
	for range 20 { // the race detector's sync.Pool drops a quarter of what it is given
		idle := bodyBuffer(announced)
		freeBodyBuffer(idle)
		first := &firstRead{r: &chunkedReader{data: sent, sizes: []byte{100}}}
		r := httptest.NewRequest("POST", "/", io.NopCloser(first))
		r.ContentLength = int64(len(sent))
		got, err := readBody(httptest.NewRecorder(), r, 4<<20, 0)
		if err != nil || !bytes.Equal(got, sent) {
			t.Fatalf("700,000 bytes: got %d, err %v", len(got), err)
		}
		freeBodyBuffer(got)
		if first.into == &idle[:1][0] {
			return
		}
	}
	t.Error("a declared body of 700,000 bytes was never read into the idle buffer of 1 MiB from its first byte")
}

// firstRead notes where its first read was asked to put its bytes.
type firstRead struct {
	r    io.Reader
	into *byte
}

func (f *firstRead) Read(p []byte) (int, error) {
	if f.into == nil && len(p) > 0 {
		f.into = &p[0]
	}
	return f.r.Read(p)
}

// deadlineRecorder is a ResponseWriter whose connection's read deadline
// http.ResponseController sets: it counts the deadlines set.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	set, cleared int
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		d.cleared++
	} else {
		d.set++
	}
	return nil
}

// TestABodyInManyReadsMovesItsDeadlineOnce: a body read in some 250
// reads (a 256 KiB prompt arriving 1 KiB at a time) sets the read deadline
// once and clears it at the end, not a timer update per read: the
// deadline is moved lazily (coarse.IdleDeadline), and a body that keeps
// arriving stays within it.
func TestABodyInManyReadsMovesItsDeadlineOnce(t *testing.T) {
	sent := bytes.Repeat([]byte{'z'}, 256<<10)
	r := httptest.NewRequest("POST", "/", io.NopCloser(&chunkedReader{data: sent, sizes: []byte{11}})) // 1,067 bytes a read
	w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	got, err := readBody(w, r, 1<<20, 5*time.Second)
	if err != nil || !bytes.Equal(got, sent) {
		t.Fatalf("got %d bytes, err %v; want all %d", len(got), err, len(sent))
	}
	if w.set != 1 || w.cleared != 1 {
		t.Errorf("%d deadlines set and %d cleared for a body read 1,067 bytes at a time; want 1 and 1", w.set, w.cleared)
	}
}
