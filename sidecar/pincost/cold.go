package pincost

import (
	"sync"
	"time"
)

// Cold-pin detection: a turn that kept its pin and should have found its
// conversation in the backend's prefix cache, but reported (almost) none
// of its prompt cached, shows that the cache is gone there: evicted under
// memory pressure, or the server restarted.
const (
	// ColdRatio: a kept turn with cached tokens at most this share of its
	// prompt found its cache gone.
	ColdRatio = 0.1
	// ColdMinPrompt: shorter prompts are not judged (a short
	// conversation's few blocks say little).
	ColdMinPrompt = 128
)

// IsCold reports whether a kept turn's usage shows its cache gone.
func IsCold(prompt, cached int64) bool {
	return prompt >= ColdMinPrompt && float64(cached) <= ColdRatio*float64(prompt)
}

// Cold remembers the sessions whose pin went cold, until their next turn
// asks (Take) or their binding's TTL passes. It is bounded: when full, a
// new mark replaces an arbitrary one, so a burst of evictions costs at
// most max entries. Marks are this replica's own (a hint for the next
// turn; a turn through another replica keeps the pin as hard affinity
// would).
type Cold struct {
	max int

	mu    sync.Mutex
	marks map[string]coldMark
}

type coldMark struct {
	backend string
	until   time.Time
}

// NewCold returns a set of at most max marks.
func NewCold(max int) *Cold { return &Cold{max: max, marks: make(map[string]coldMark)} }

// Mark records that session key's pin on backend went cold; the mark
// lapses at until.
func (c *Cold) Mark(key, backend string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.marks[key]; !ok && len(c.marks) >= c.max {
		for k := range c.marks { // Go's map order: an arbitrary victim
			delete(c.marks, k)
			break
		}
	}
	c.marks[key] = coldMark{backend, until}
}

// Take reports whether key's pin on backend is marked cold at now, and
// forgets the mark: it serves one decision.
func (c *Cold) Take(key, backend string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.marks[key]
	if !ok {
		return false
	}
	delete(c.marks, key)
	return m.backend == backend && now.Before(m.until)
}

// Len is the number of marks held.
func (c *Cold) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.marks)
}
