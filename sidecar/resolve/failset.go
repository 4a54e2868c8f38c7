package resolve

import (
	"sync"
	"time"
)

// FailSet remembers backends that refused a connection, for a short time
// during which they are not selectable. Discovery may still list such a
// backend (a static address whose process died, a pod whose readiness
// probe has not failed yet); the FailSet keeps every session off it until
// the timeout passes. One FailSet serves all pools of a process, since a
// dead address is dead for every pool.
type FailSet struct {
	mu      sync.Mutex
	until   map[string]time.Time
	timeout time.Duration
	now     func() time.Time
}

// NewFailSet returns a FailSet that keeps a backend out for timeout.
func NewFailSet(timeout time.Duration, now func() time.Time) *FailSet {
	if now == nil {
		now = time.Now
	}
	return &FailSet{until: make(map[string]time.Time), timeout: timeout, now: now}
}

// Mark records a connection failure of backend id.
func (f *FailSet) Mark(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until[id] = f.now().Add(f.timeout)
}

// Failed reports whether id is within its fail timeout.
func (f *FailSet) Failed(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.until[id]
	if !ok {
		return false
	}
	if f.now().Before(u) {
		return true
	}
	delete(f.until, id) // expired: keep the map as small as the failures
	return false
}
