package workload

import (
	"reflect"
	"testing"
)

func TestGenerateIsDeterministicAndSkewed(t *testing.T) {
	a, b := Generate(Defaults), Generate(Defaults)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different workloads")
	}
	t.Log(Summary(a, Defaults))
	short, long := 0, 0
	for _, c := range a {
		switch n := len(c.Turns); {
		case n <= int(Defaults.TurnsMedian):
			short++
		case n >= 3*int(Defaults.TurnsMedian):
			long++
		}
		if len(c.Turns) < 1 || len(c.Turns) > Defaults.TurnsMax || c.Start < 0 || c.Start > Defaults.Ramp {
			t.Fatalf("conversation %s: %d turns, start %v", c.ID, len(c.Turns), c.Start)
		}
	}
	if short < len(a)/3 || long == 0 || long > short {
		t.Errorf("%d short and %d long conversations of %d: not skewed (many short, a few long)", short, long, len(a))
	}
}
