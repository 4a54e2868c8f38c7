package loadgen

import (
	"context"
	"time"
)

// Sleep waits d unless ctx ends first, and reports whether it waited
// the whole (a d of zero or less waits nothing, and reports whether ctx
// is still live).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
