package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

func TestMaxProcs(t *testing.T) {
	for _, c := range []struct {
		env           string
		current, want int
	}{
		{"", 64, 2}, // a big node, no limit: two threads
		{"", 1, 1},  // a CPU limit of one: Go's choice stands
		{"", 2, 2},  //
		{"8", 8, 8}, // GOMAXPROCS set: as set
		{"1", 1, 1}, //
	} {
		if got := maxProcs(c.env, c.current); got != c.want {
			t.Errorf("maxProcs(%q, %d) = %d, want %d", c.env, c.current, got, c.want)
		}
	}
}

// The sidecar's start does not parse the fallback CA bundle (package
// golang.org/x/crypto/x509roots/fallback's init: 3.5 ms and a third of an
// idle sidecar's heap objects, kept): only a Redis with TLS and no caFile
// verifies against public roots, and package redisstore sets them then.
// The test binary links what the sidecar links; run again with the
// runtime's init trace, it names every package whose init did work.
func TestStartParsesNoCABundle(t *testing.T) {
	if os.Getenv("TETHER_TEST_INITTRACE") == "1" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartParsesNoCABundle$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "TETHER_TEST_INITTRACE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("init crypto/x509 @")) {
		t.Fatalf("no init trace of crypto/x509 in the output, so its absence below would prove nothing:\n%s", out)
	}
	if i := bytes.Index(out, []byte("x509roots/fallback")); i >= 0 {
		line := out[bytes.LastIndexByte(out[:i], '\n')+1:]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		t.Fatalf("the fallback CA bundle is parsed at start: %s", line)
	}
}
