package sim

import (
	"context"
	"sync"
	"time"
)

// timing holds the per-token costs, which tests change at run time. A change
// wakes every wait in progress, which re-measures itself with the new cost,
// so making a slow backend fast takes effect at once.
type timing struct {
	mu      sync.Mutex
	prefill time.Duration
	decode  time.Duration
	changed chan struct{} // closed and replaced on every change
}

func newTiming(prefill, decode time.Duration) *timing {
	return &timing{prefill: prefill, decode: decode, changed: make(chan struct{})}
}

func (t *timing) get() (prefill, decode time.Duration, changed <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prefill, t.decode, t.changed
}

func (t *timing) set(prefill, decode time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prefill, t.decode = max(prefill, 0), max(decode, 0)
	close(t.changed)
	t.changed = make(chan struct{})
}

// sleep waits until n tokens' worth of time (per picks prefill or decode)
// has passed since start, or the context ends.
func (t *timing) sleep(ctx context.Context, start time.Time, n int, per func(prefill, decode time.Duration) time.Duration) error {
	for {
		p, d, changed := t.get()
		left := time.Until(start.Add(time.Duration(n) * per(p, d)))
		if left <= 0 {
			return ctx.Err()
		}
		timer := time.NewTimer(left)
		select {
		case <-timer.C:
			return ctx.Err()
		case <-changed:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

func prefillCost(p, _ time.Duration) time.Duration { return p }
func decodeCost(_, d time.Duration) time.Duration  { return d }
