package bootstrap

import "testing"

func TestCentralDropsEachTail(t *testing.T) {
	figs := make([]float64, 100)
	for i := range figs {
		figs[i] = float64(100 - i) // unsorted: Central sorts
	}
	lo, hi := Central(figs, 0.9)
	if lo != 6 || hi != 96 {
		t.Fatalf("90%% of 1..100 = %v–%v, want 6–96 (five figures out at each end)", lo, hi)
	}
	if lo, hi := Central([]float64{3}, 0.9); lo != 3 || hi != 3 {
		t.Fatalf("one figure: %v–%v, want 3–3", lo, hi)
	}
}

func TestRandIsSeededByTheParts(t *testing.T) {
	a, b, c := Rand(10), Rand(10), Rand(11)
	x, y, z := a.Uint64(), b.Uint64(), c.Uint64()
	if x != y {
		t.Fatal("two sources for the same parts drew differently")
	}
	if x == z {
		t.Fatal("sources for different parts drew the same")
	}
}

func TestFormat(t *testing.T) {
	if got := Format(0.934, 2.5861, true); got != "0.93–2.59" {
		t.Errorf("Format = %q, want 0.93–2.59", got)
	}
	if got := Format(0, 0, false); got != "—" {
		t.Errorf("no interval: %q, want a dash", got)
	}
}
