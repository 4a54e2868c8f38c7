package report

import (
	"slices"
	"testing"
)

func TestTicks125(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (ticks125{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got, want := labels(0.8, 30), []string{"1", "2", "5", "10", "20"}; !slices.Equal(got, want) {
		t.Errorf("0.8–30: %v, want %v", got, want)
	}
	if got, want := labels(0.5, 20000), []string{"1", "10", "100", "1000", "10000"}; !slices.Equal(got, want) {
		t.Errorf("0.5–20000: %v, want %v", got, want)
	}
	if got := (ticks125{}).Ticks(0, 10); got != nil {
		t.Errorf("a range from 0 has ticks %v on a log scale", got)
	}
}
