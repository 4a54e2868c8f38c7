package sysmon

import (
	"slices"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, c := range []struct {
		in, want []string
		changed  bool
	}{
		{[]string{"HOME=/"}, []string{"HOME=/", "GODEBUG=" + GODEBUG}, true},
		{[]string{"GODEBUG="}, []string{"GODEBUG=" + GODEBUG}, true},
		{[]string{"GODEBUG=gctrace=1", "A=b"}, []string{"GODEBUG=gctrace=1," + GODEBUG, "A=b"}, true},
		// Set by the user, in any position: left as it is.
		{[]string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{[]string{"GODEBUG=gctrace=1,schedtrace=1000"}, []string{"GODEBUG=gctrace=1,schedtrace=1000"}, false},
		// Not a setting of GODEBUG's.
		{[]string{"XGODEBUG=schedtrace=0"}, []string{"XGODEBUG=schedtrace=0", "GODEBUG=" + GODEBUG}, true},
	} {
		in := slices.Clone(c.in)
		got, changed := Env(in)
		if !slices.Equal(got, c.want) || changed != c.changed {
			t.Errorf("Env(%q) = %q, %v; want %q, %v", c.in, got, changed, c.want, c.changed)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("Env(%q) changed its argument to %q", c.in, in)
		}
	}
}
