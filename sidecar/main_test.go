package main

import "testing"

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
