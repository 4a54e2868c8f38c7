package redisstore

import (
	"testing"
	"testing/synctest"
	"time"
)

// The breaker's tests run in a synctest bubble: time.Sleep moves the
// fake clock the breaker reads, exactly and at once.

func testBreaker(n int) *breaker { return newBreaker(n, time.Second, 30*time.Second, nil) }

func TestBreakerOpensAfterThresholdConsecutiveFailures(t *testing.T) {
	synctest.Test(t, testBreakerOpensAfterThresholdConsecutiveFailures)
}

func testBreakerOpensAfterThresholdConsecutiveFailures(t *testing.T) {
	b := testBreaker(3)
	for i := range 2 {
		if !b.allow() {
			t.Fatalf("call %d refused before the threshold", i)
		}
		b.done(failure)
	}
	// A success in between resets the count: failures must be consecutive.
	b.allow()
	b.done(success)
	for range 2 {
		b.allow()
		b.done(failure)
	}
	if !b.allow() {
		t.Fatal("refused after 2 consecutive failures, threshold 3")
	}
	b.done(failure)
	if b.allow() {
		t.Fatal("allowed after 3 consecutive failures")
	}
	if !b.isOpen() {
		t.Fatal("isOpen false")
	}
}

func TestBreakerHalfOpenLetsOneProbe(t *testing.T) { synctest.Test(t, testBreakerHalfOpenLetsOneProbe) }

func testBreakerHalfOpenLetsOneProbe(t *testing.T) {
	b := testBreaker(1)
	b.allow()
	b.done(failure)

	time.Sleep(999 * time.Millisecond)
	if b.allow() {
		t.Fatal("allowed before the backoff passed")
	}
	time.Sleep(time.Millisecond)
	if !b.allow() {
		t.Fatal("probe refused after the backoff")
	}
	if b.allow() {
		t.Fatal("second call allowed while the probe is in flight")
	}
	b.done(success)
	if b.isOpen() {
		t.Fatal("still open after a successful probe")
	}
	for range 10 {
		if !b.allow() {
			t.Fatal("closed breaker refused a call")
		}
		b.done(success)
	}
}

func TestBreakerBackoffDoublesToMaxAndResets(t *testing.T) {
	synctest.Test(t, testBreakerBackoffDoublesToMaxAndResets)
}

func testBreakerBackoffDoublesToMaxAndResets(t *testing.T) {
	b := testBreaker(1)
	b.allow()
	b.done(failure)

	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, w := range want {
		w *= time.Second
		if b.backoff != w {
			t.Fatalf("opening %d: backoff %s, want %s", i, b.backoff, w)
		}
		time.Sleep(w - time.Nanosecond)
		if b.allow() {
			t.Fatalf("opening %d: allowed before %s", i, w)
		}
		time.Sleep(time.Nanosecond)
		if !b.allow() {
			t.Fatalf("opening %d: probe refused at %s", i, w)
		}
		b.done(failure)
	}
	time.Sleep(30 * time.Second)
	b.allow()
	b.done(success)
	b.allow()
	b.done(failure)
	if b.backoff != time.Second {
		t.Fatalf("backoff after close and reopen %s, want 1s", b.backoff)
	}
}

func TestBreakerNeutralProbeReleasesHalfOpen(t *testing.T) {
	synctest.Test(t, testBreakerNeutralProbeReleasesHalfOpen)
}

func testBreakerNeutralProbeReleasesHalfOpen(t *testing.T) {
	b := testBreaker(1)
	b.allow()
	b.done(failure)
	time.Sleep(time.Second)
	if !b.allow() {
		t.Fatal("probe refused")
	}
	b.done(neutral) // the caller cancelled: nothing learned
	if !b.allow() {
		t.Fatal("next probe refused after a neutral outcome")
	}
	b.done(success)
	if b.isOpen() {
		t.Fatal("open after a successful probe")
	}
}

func TestBreakerNeutralDoesNotCountWhileClosed(t *testing.T) {
	synctest.Test(t, testBreakerNeutralDoesNotCountWhileClosed)
}

func testBreakerNeutralDoesNotCountWhileClosed(t *testing.T) {
	b := testBreaker(2)
	for range 10 {
		b.allow()
		b.done(neutral)
	}
	b.allow()
	b.done(failure)
	if b.isOpen() {
		t.Fatal("neutral outcomes counted as failures")
	}
}

func TestBreakerLateOutcomes(t *testing.T) { synctest.Test(t, testBreakerLateOutcomes) }

func testBreakerLateOutcomes(t *testing.T) {
	b := testBreaker(2)
	// Two calls in flight while closed; both fail, then a third in-flight
	// call fails late while the breaker is already open.
	b.allow()
	b.allow()
	b.allow()
	b.done(failure)
	b.done(failure)
	openUntil := b.openUntil
	time.Sleep(500 * time.Millisecond)
	b.done(failure)
	if b.openUntil != openUntil {
		t.Fatal("a late failure extended the opening")
	}
	// A late success proves Redis answers: close at once.
	b.done(success)
	if b.isOpen() {
		t.Fatal("late success did not close")
	}
}

func TestBreakerOnChange(t *testing.T) { synctest.Test(t, testBreakerOnChange) }

func testBreakerOnChange(t *testing.T) {
	var events []bool
	b := newBreaker(1, time.Second, 30*time.Second, func(open bool, _ time.Duration) { events = append(events, open) })
	b.allow()
	b.done(failure) // open
	time.Sleep(time.Second)
	b.allow()
	b.done(failure) // reopen: no event, still open
	time.Sleep(2 * time.Second)
	b.allow()
	b.done(success) // close
	b.allow()
	b.done(success) // no event
	if len(events) != 2 || events[0] != true || events[1] != false {
		t.Fatalf("events %v, want [true false]", events)
	}
}
