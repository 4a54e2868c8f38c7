package redisstore

import (
	"log/slog"
	"sync"
	"time"
)

// rateLog logs at most one line per interval and counts what it dropped,
// so a Redis outage at thousands of requests per second costs a few log
// lines, not thousands; the counter metric carries the exact numbers.
type rateLog struct {
	log      *slog.Logger
	interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (r *rateLog) warn(msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < r.interval {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	r.log.Warn(msg, append(args, "suppressed", n)...)
}
