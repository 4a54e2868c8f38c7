package server

import (
	"sync/atomic"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

// ringLimits is what the gossip store judges records from the ring by
// (gossip.Limits): the pools of this replica, their TTLs and the backends
// their discovery lists. The store starts before the pools are wired, so
// the pools are published once, when they all are; until then nothing is
// synced and nothing is known.
type ringLimits struct {
	pools atomic.Pointer[[]limitPool]
}

type limitPool struct {
	ttl time.Duration
	src discovery.Source
}

func (l *ringLimits) publish(pools []limitPool) { l.pools.Store(&pools) }

// BindingTTL returns the longest TTL of the pools whose current set lists
// pod (and prefill, when not empty).
func (l *ringLimits) BindingTTL(pod, prefill string) (time.Duration, bool) {
	ps := l.pools.Load()
	if ps == nil {
		return 0, false
	}
	var ttl time.Duration
	found := false
	for _, p := range *ps {
		set := p.src.Current()
		if _, ok := set.Get(pod); !ok {
			continue
		}
		if prefill != "" {
			if _, ok := set.Get(prefill); !ok {
				continue
			}
		}
		ttl, found = max(ttl, p.ttl), true
	}
	return ttl, found
}

// Synced reports whether the pools are wired and every one's discovery has
// its first view.
func (l *ringLimits) Synced() bool {
	ps := l.pools.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if !p.src.Synced() {
			return false
		}
	}
	return true
}
