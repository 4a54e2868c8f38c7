package report

import "testing"

// A ratio just under its target never prints as the target itself.
func TestCheckShowsAMissThatRoundsToTheTarget(t *testing.T) {
	for _, c := range []struct {
		v, target float64
		want      string
	}{
		{0.977, 0.98, "0.977 (target ≥ 0.98) ✗ not met"},
		{0.9799, 0.98, "0.9799 (target ≥ 0.98) ✗ not met"},
		{0.964, 0.98, "0.96 (target ≥ 0.98) ✗ not met"},
		{0.98, 0.98, "0.98 (target ≥ 0.98) ✓"},
		{1.007, 0.98, "1.01 (target ≥ 0.98) ✓"},
		{2.98, 3, "2.98 (target ≥ 3.00) ✗ not met"},
		{2.996, 3, "2.996 (target ≥ 3.00) ✗ not met"},
	} {
		if got := check(c.v, c.target); got != c.want {
			t.Errorf("check(%v, %v) = %q, want %q", c.v, c.target, got, c.want)
		}
	}
}
