package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A search planned for its worst case and skipping what it did not need
// leaves the bar's later steps where they belong: the step after the
// skipped ones is measured against the plan without them.
func TestSkipDropsPlannedSteps(t *testing.T) {
	var out bytes.Buffer
	b := &Bar{w: &out}
	b.Plan(4, time.Hour) // a search: at most four probes
	b.Plan(1, time.Hour) // the next part
	b.Start()
	b.Step("probe 1")
	b.Step("probe 2")
	b.Skip(2) // probes 3 and 4 not needed
	b.Step("next part")
	if got, want := b.total, 3*time.Hour; got != want {
		t.Errorf("total after Skip(2) = %v, want %v", got, want)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "[ 67%]") || !strings.HasSuffix(last, "next part") {
		t.Errorf("last line %q: want the third of three steps starting, at 67%%", last)
	}
	b.Skip(5) // more than planned: nothing left to drop, no panic
	b.Finish()
	if !strings.Contains(out.String(), "[100%] done") {
		t.Errorf("no final line in %q", out.String())
	}
}
