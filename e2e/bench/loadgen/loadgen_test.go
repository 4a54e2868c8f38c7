package loadgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<20; v++ {
		i := index(v)
		if i != prev && i != prev+1 {
			t.Fatalf("index(%d) = %d after %d: buckets skipped", v, i, prev)
		}
		if v > upper(i) || (i > 0 && v <= upper(i-1)) {
			t.Fatalf("value %d in bucket %d whose range is (%d, %d]", v, i, upper(i-1), upper(i))
		}
		prev = i
	}
}

func TestQuantilesWithinOnePercent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if rel := float64(got-want) / float64(want); rel < -0.001 || rel > 0.01 {
			t.Errorf("q%.3f = %v, exact %v (%.2f%% off)", q, got, want, 100*rel)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Max() != vals[len(vals)-1] {
		t.Errorf("count %d max %v, want %d %v", h.Count(), h.Max(), len(vals), vals[len(vals)-1])
	}
	if (&Histogram{}).Quantile(0.5) != 0 {
		t.Error("empty histogram has a median")
	}
}

func TestMerge(t *testing.T) {
	var a, b Histogram
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(5 * time.Millisecond)
	a.Merge(&b)
	if a.Count() != 3 || a.Max() != 5*time.Millisecond || a.Quantile(0.5) < 3*time.Millisecond {
		t.Errorf("merged: count %d max %v median %v", a.Count(), a.Max(), a.Quantile(0.5))
	}
}

// A server that stalls for 200 ms once must show the stall in the latency
// of every request that was due during it, not just in the one request
// that happened to be in flight (coordinated omission).
func TestStallCountsForEveryRequestDueDuringIt(t *testing.T) {
	var calls atomic.Int64
	stallUntil := time.Now().Add(300 * time.Millisecond)
	res := Run(context.Background(), Config{Rate: 500, Duration: time.Second, MaxInFlight: 1, Samples: true}, func(ctx context.Context, i int) error {
		calls.Add(1)
		if i == 50 {
			time.Sleep(time.Until(stallUntil))
		}
		return nil
	})
	if res.Sent != 500 || res.OK != 500 || res.Errors != 0 {
		t.Fatalf("sent %d ok %d errors %d, want 500 500 0", res.Sent, res.OK, res.Errors)
	}
	// Requests 50..~150 were due during the stall: at least 10% of the
	// requests waited over 50 ms for it.
	if p90 := res.Latency.Quantile(0.90); p90 < 50*time.Millisecond {
		t.Errorf("p90 = %v: the stall was hidden from the requests queued behind it", p90)
	}
	// The samples say which: request 50 (due at 100 ms) and those due
	// after it until the stall ended (at 300 ms) waited it out.
	if len(res.Samples) != res.OK {
		t.Fatalf("%d samples of %d requests", len(res.Samples), res.OK)
	}
	for _, s := range res.Samples {
		if s.Due < 0 || s.Due >= time.Second || s.Latency <= 0 {
			t.Fatalf("sample %+v outside the measured second", s)
		}
		stalled := s.Due >= 100*time.Millisecond && s.Due < 200*time.Millisecond
		if stalled && s.Latency < 100*time.Millisecond {
			t.Errorf("request due at %v waited %v: not the stall's", s.Due, s.Latency)
		}
	}
}

func TestWarmupIsNotRecordedAndErrorsAreCounted(t *testing.T) {
	boom := errors.New("boom")
	res := Run(context.Background(), Config{Rate: 1000, Warmup: 200 * time.Millisecond, Duration: 300 * time.Millisecond}, func(ctx context.Context, i int) error {
		if i%10 == 0 {
			return boom
		}
		return nil
	})
	if res.Sent != 300 {
		t.Errorf("measured %d requests, want 300 (warm-up excluded)", res.Sent)
	}
	if res.Errors != 30 || res.OK != 270 || !errors.Is(res.FirstErr, boom) {
		t.Errorf("ok %d errors %d first %v, want 270 30 boom", res.OK, res.Errors, res.FirstErr)
	}
	if res.Completed <= 0 || res.Elapsed <= 0 {
		t.Errorf("completed %.0f/s over %v", res.Completed, res.Elapsed)
	}
}

// A backlog's depth is the most requests in flight at once, the warm-up's
// counted: here every request waits until the last has been sent, so all
// of them are in flight together.
func TestPeakInFlightIsTheBacklogsDepth(t *testing.T) {
	const warm, measured = 20, 30
	var started atomic.Int64
	all := make(chan struct{})
	res := Run(context.Background(), Config{Rate: 1000, Warmup: warm * time.Millisecond, Duration: measured * time.Millisecond}, func(ctx context.Context, i int) error {
		if started.Add(1) == warm+measured {
			close(all)
		}
		<-all
		return nil
	})
	if res.PeakInFlight != warm+measured || res.OK != measured {
		t.Errorf("peak in flight %d, ok %d; want %d and %d", res.PeakInFlight, res.OK, warm+measured, measured)
	}
}
