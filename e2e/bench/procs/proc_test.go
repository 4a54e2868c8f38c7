package procs

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// stderrLines is what a child run with burnEnv=stderr writes to its
// stderr at once: more than a pipe holds, so its write waits for the
// reader's bursts.
func stderrLines() []byte {
	var b bytes.Buffer
	for i := range 8000 {
		fmt.Fprintf(&b, "line %05d of the child's log\n", i)
	}
	return b.Bytes()
}

// TestSlowStderrArrivesWhole: a process whose stderr is a pipe drained
// in bursts (the sidecars' with bench hop -log-reader-pause) has all it
// wrote in its log, in order, once it has ended.
func TestSlowStderrArrivesWhole(t *testing.T) {
	p := startChild(t, "stderr", "stderr", 20*time.Millisecond)
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not end")
	}
	got, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	if want := stderrLines(); !bytes.Equal(got, want) {
		t.Fatalf("the log holds %d bytes, not the %d the child wrote", len(got), len(want))
	}
}
