package bufpool

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// A reader or writer given back carries nothing to its next borrower:
// not the bytes it still buffered, not the source or sink it was lent
// over. Lent counts those out.
func TestLentBuffersStartClean(t *testing.T) {
	base := Lent()
	br := Reader(strings.NewReader("first connection's bytes"))
	head := make([]byte, 5)
	if _, err := io.ReadFull(br, head); err != nil || string(head) != "first" {
		t.Fatalf("read %q, %v", head, err)
	}
	var sink bytes.Buffer
	bw := Writer(&sink)
	bw.WriteString("never flushed")
	if n := Lent() - base; n != 2 {
		t.Errorf("%d lent, want 2", n)
	}
	PutReader(br) // still buffering the rest of the first source
	PutWriter(bw) // still holding unflushed bytes
	if n := Lent() - base; n != 0 {
		t.Errorf("%d lent after both came back, want 0", n)
	}

	for range 4 { // sync.Pool may hand back the same ones, or new ones
		br = Reader(strings.NewReader("second"))
		if b, err := io.ReadAll(br); err != nil || string(b) != "second" {
			t.Fatalf("a reader lent again read %q, %v; want only its own source's bytes", b, err)
		}
		var out bytes.Buffer
		bw = Writer(&out)
		bw.WriteString("mine")
		bw.Flush()
		if out.String() != "mine" || sink.Len() != 0 {
			t.Fatalf("a writer lent again wrote %q (and %q to the first sink); want only its own bytes", out.String(), sink.String())
		}
		PutReader(br)
		PutWriter(bw)
	}
	if n := Lent() - base; n != 0 {
		t.Errorf("%d lent at the end, want 0", n)
	}
}
