//go:build !race

package testkit

// RaceEnabled: the binary is built with the race detector (race.go).
const RaceEnabled = false
