package redisstore

import (
	"sync"
	"time"
)

// breaker keeps a dead Redis from adding its timeout to every request.
// After threshold consecutive failures it opens for a backoff; while open,
// calls are refused without touching the network. When the backoff has
// passed it lets exactly one call through (half-open): success closes it,
// failure reopens it with the backoff doubled up to max.
//
// The probe is an ordinary caller's operation rather than a background
// pinger: no goroutine to stop, and the breaker closes on real traffic.
type breaker struct {
	threshold  int
	minBackoff time.Duration
	maxBackoff time.Duration
	// onChange is called with the new state, outside the lock, each time the
	// breaker opens or closes (for the gauge and the log).
	onChange func(open bool, backoff time.Duration)

	mu        sync.Mutex
	state     breakerState
	failures  int           // consecutive, while closed
	backoff   time.Duration // of the current or last opening
	openUntil time.Time
	probing   bool // half-open: the one probe is in flight
}

type breakerState int

const (
	closed breakerState = iota
	open
	halfOpen
)

// outcome is what a call that the breaker let through reports back.
type outcome int

const (
	success outcome = iota // Redis answered
	failure                // Redis did not answer (network error, timeout, not serving)
	neutral                // says nothing about Redis (the caller gave up first)
)

func newBreaker(threshold int, minBackoff, maxBackoff time.Duration, onChange func(bool, time.Duration)) *breaker {
	if onChange == nil {
		onChange = func(bool, time.Duration) {}
	}
	return &breaker{threshold: threshold, minBackoff: minBackoff, maxBackoff: maxBackoff, onChange: onChange}
}

// allow reports whether a call may go to Redis. Every call it allowed must
// be followed by exactly one done, or a half-open breaker would wait for
// its probe forever.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case closed:
		return true
	case open:
		if time.Now().Before(b.openUntil) {
			return false
		}
		b.state = halfOpen
		b.probing = true
		return true
	default: // halfOpen
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

func (b *breaker) done(o outcome) {
	b.mu.Lock()
	var changed, nowOpen bool
	var backoff time.Duration
	switch o {
	case success:
		changed = b.state != closed
		b.state, b.failures, b.probing, b.backoff = closed, 0, false, 0
	case failure:
		switch b.state {
		case closed:
			b.failures++
			if b.failures >= b.threshold {
				b.trip(b.minBackoff)
				changed, nowOpen, backoff = true, true, b.backoff
			}
		case halfOpen:
			if b.probing {
				b.trip(min(2*b.backoff, b.maxBackoff))
				backoff = b.backoff
			}
		case open:
			// A call let through before the breaker opened failed late:
			// the breaker already knows.
		}
	case neutral:
		if b.state == halfOpen && b.probing {
			// The probe learned nothing: let the next call probe.
			b.probing = false
		}
	}
	b.mu.Unlock()
	if changed {
		b.onChange(nowOpen, backoff)
	}
}

// trip opens the breaker for d; the lock is held.
func (b *breaker) trip(d time.Duration) {
	b.state = open
	b.probing = false
	b.failures = 0
	b.backoff = max(d, b.minBackoff)
	b.openUntil = time.Now().Add(b.backoff)
}

// hold opens the breaker until a success closes it, without probes:
// something else (a store that started degraded) finds out when the
// backend answers. It does not call onChange.
func (b *breaker) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.probing, b.failures = open, false, 0
	b.backoff = b.minBackoff
	b.openUntil = time.Unix(1<<62, 0)
}

// isOpen reports whether calls are being refused or probed.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != closed
}
