//go:build race

package testkit

// RaceEnabled: the binary is built with the race detector, under which
// sync.Pool drops a quarter of what it is given (on purpose, to find code
// that relies on getting it back) and allocation counts differ.
const RaceEnabled = true
