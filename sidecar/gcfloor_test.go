package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestSidecarRaisesGOGC runs the sidecar as a process: without GOGC its
// heap goal leaves room for half a second of allocation (package
// gcfloor), so a small heap allocated fast (here by scrapes of its
// /metrics, back to back) runs with a GOGC above 100, which it logs and
// exports; with GOGC set it keeps that and exports nothing.
func TestSidecarRaisesGOGC(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    []string
		logged string
		floor  bool
	}{
		{"floor", nil, `"gcFloor":true`, true},
		{"GOGC set", []string{"GOGC=100"}, `"gcFloor":false`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, log, admin := startSidecar(t, "", c.env...)
			testkit.Eventually(t, 5*time.Second, "the log line "+c.logged, func() bool {
				return strings.Contains(log(), c.logged)
			})
			value := func() string {
				for line := range strings.SplitSeq(scrape(t, "http://"+admin+"/metrics"), "\n") {
					if v, ok := strings.CutPrefix(line, "tether_gc_percent "); ok {
						return v
					}
				}
				return ""
			}
			if !c.floor {
				if v := value(); v != "" {
					t.Fatalf("/metrics exports GOGC (%s) with GOGC set", v)
				}
				return
			}
			// The live heap is a few MiB: once the scrapes allocate
			// faster than Go's rule leaves room for, GOGC between 100
			// and 800 (800 once the runtime's minimum sets the goal).
			testkit.Eventually(t, 20*time.Second, "tether_gc_percent above 100", func() error {
				v := value()
				if p, err := strconv.ParseFloat(v, 64); err != nil || p <= 100 || p > 800 {
					return fmt.Errorf("tether_gc_percent %q", v)
				}
				return nil
			})
		})
	}
}
