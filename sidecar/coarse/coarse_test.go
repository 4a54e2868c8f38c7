package coarse

import (
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
	base := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC) // a multiple of 50 ms
	for _, tc := range []struct {
		in   time.Duration // after base
		step time.Duration
		want time.Duration // after base
	}{
		{0, 50 * time.Millisecond, 0},
		{time.Nanosecond, 50 * time.Millisecond, 50 * time.Millisecond},
		{5 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
		{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
		{50*time.Millisecond + 1, 50 * time.Millisecond, 100 * time.Millisecond},
		{7 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		{7 * time.Millisecond, 0, 7 * time.Millisecond},
		{7 * time.Millisecond, -time.Second, 7 * time.Millisecond},
	} {
		got := Ceil(base.Add(tc.in), tc.step)
		if !got.Equal(base.Add(tc.want)) {
			t.Errorf("Ceil(base+%v, %v) = base+%v, want base+%v", tc.in, tc.step, got.Sub(base), tc.want)
		}
	}
}

// Times from the running clock (with a monotonic reading) land on the
// grid's next point, never before the time given and less than a step
// after it, and two times within one step share their point.
func TestCeilOfNow(t *testing.T) {
	const step = 50 * time.Millisecond
	for range 1000 {
		now := time.Now()
		got := Ceil(now, step)
		if got.Before(now) || !got.Before(now.Add(step)) {
			t.Fatalf("Ceil(%v) = %v: not in [now, now+step)", now, got)
		}
		if got.UnixNano()%int64(step) != 0 {
			t.Fatalf("Ceil(%v) = %v: not a multiple of %v", now, got, step)
		}
		if p := Ceil(got.Add(-time.Microsecond), step); !p.Equal(got) {
			t.Fatalf("a time a microsecond before %v rounds to %v", got, p)
		}
	}
}
