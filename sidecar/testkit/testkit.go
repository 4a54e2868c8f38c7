// Package testkit is what tether's tests share: waiting for a condition
// with a deadline (Eventually), capturing what a running part writes
// (SyncBuffer), reading metrics from a registry or a /metrics endpoint
// (Metric, Scrape), a settable clock for tests whose time cannot run in
// a testing/synctest bubble (Clock), a TCP connection over loopback
// (LoopbackPair), and the goroutines leak checks let live (LongLived).
// Unit tests of pure time logic use synctest instead. Only tests and test
// harnesses (e2e/cluster, redistest) import this package; it is not
// internal because the injector's and the e2e tests use it too.
package testkit

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// Condition is what Eventually polls: a predicate, or a check whose error
// says what is still wrong.
type Condition interface {
	func() bool | func() error
}

// pollInterval is how often Eventually checks: short enough to add little
// to a test, long enough not to busy a shared machine.
const pollInterval = 10 * time.Millisecond

// Eventually polls cond until it holds (true, or a nil error), failing t
// when within has passed, with what it waited for and, for an error
// condition, the last error.
func Eventually[C Condition](t testing.TB, within time.Duration, what string, cond C) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() bool:
			if !c() {
				return errNotYet
			}
			return nil
		case func() error:
			return c()
		}
		panic("unreachable")
	}
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if errors.Is(err, errNotYet) {
				t.Fatalf("timed out after %s waiting for %s", within, what)
			}
			t.Fatalf("timed out after %s waiting for %s: %v", within, what, err)
		}
		time.Sleep(pollInterval)
	}
}

var errNotYet = errors.New("not yet")

// Closed is a condition that holds once ch is closed (or has a value).
func Closed[T any](ch <-chan T) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// Clock is a settable time source for code that takes a now function, in
// tests that cannot run in a synctest bubble (real sockets, informers). It
// is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock forward by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
