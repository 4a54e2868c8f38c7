package sim

import (
	"container/list"
	"context"
	"sync"
)

// admission lets at most max requests run; the others wait in FIFO order.
// A waiter whose context ends leaves the queue, and a slot granted to a
// waiter that gave up at the same moment is passed on, so the counts stay
// exact under cancellation.
type admission struct {
	mu      sync.Mutex
	max     int
	running int
	waiters list.List // of chan struct{}, closed when granted a slot
}

// acquire waits for a running slot. On error (the context ended) the caller
// holds no slot.
func (a *admission) acquire(ctx context.Context) error {
	a.mu.Lock()
	if a.running < a.max && a.waiters.Len() == 0 {
		a.running++
		a.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	e := a.waiters.PushBack(ready)
	a.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		select {
		case <-ready:
			// Granted while we were giving up: hand the slot on.
			a.mu.Unlock()
			a.release()
		default:
			a.waiters.Remove(e)
			a.mu.Unlock()
		}
		return ctx.Err()
	}
}

// release frees a slot, granting it to the oldest waiter if there is one.
func (a *admission) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.waiters.Front(); e != nil {
		a.waiters.Remove(e)
		close(e.Value.(chan struct{})) // the slot moves to the waiter: running unchanged
		return
	}
	a.running--
}

// counts returns the requests running and waiting.
func (a *admission) counts() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.waiters.Len()
}
