package loadgen

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one constant-rate run.
type Config struct {
	// Rate is the offered load in requests per second.
	Rate float64
	// Duration is the measured part of the run.
	Duration time.Duration
	// Warmup precedes the measured part at the same rate; its requests
	// are sent but not recorded (connections open, caches fill).
	Warmup time.Duration
	// MaxInFlight bounds concurrent requests. A send that finds no free
	// slot waits, and that wait counts in its latency (it was scheduled
	// earlier). Default 4096.
	MaxInFlight int
	// OnMeasure, if set, is called when the measured part starts (to
	// read a process's CPU time over the measured part only).
	OnMeasure func()
	// Samples keeps every successful measured request's schedule and
	// latency in Result.Samples (16 bytes each), for what a histogram
	// cannot say: whether the slow requests came together.
	Samples bool
}

// Do sends request number i and reports whether it succeeded. It must
// return only once the whole response has been read.
type Do func(ctx context.Context, i int) error

// Result of one run. Latencies are from the scheduled send time to the
// end of the response, for successful requests of the measured part.
type Result struct {
	Offered   float64 // requests per second asked for
	Sent      int     // requests scheduled in the measured part
	OK        int
	Errors    int
	FirstErr  error
	Elapsed   time.Duration // from the first measured send to the last response
	Latency   *Histogram
	Lateness  *Histogram // how late the generator itself started sends (diagnostic)
	Completed float64    // successful requests per second over Elapsed
	// PeakInFlight is the most requests in flight at once, the warm-up's
	// included (where a load that starts from idle first meets the
	// proxy): a few at a steady rate the proxy carries, the depth of its
	// backlog in one it fell behind.
	PeakInFlight int
	// Samples are the successful measured requests, with Config.Samples,
	// in the order they completed.
	Samples []Sample
}

// Sample is one request: when it was due, from the measured part's start,
// and its latency.
type Sample struct {
	Due, Latency time.Duration
}

// Run sends requests on a fixed schedule: request i is due at
// start + i/Rate. The generator never waits for responses before the next
// send; see Config.MaxInFlight.
func Run(ctx context.Context, cfg Config, do Do) *Result {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	warm := int(cfg.Warmup.Seconds() * cfg.Rate)
	total := warm + int(cfg.Duration.Seconds()*cfg.Rate)
	res := &Result{Offered: cfg.Rate, Latency: &Histogram{}, Lateness: &Histogram{}}
	if cfg.Samples {
		res.Samples = make([]Sample, 0, total-warm)
	}

	var (
		wg        sync.WaitGroup
		slots     = make(chan struct{}, cfg.MaxInFlight)
		ok, fails atomic.Int64
		lastEnd   atomic.Int64
		errOnce   sync.Once
		samplesMu sync.Mutex
	)
	// Go's timers wake up to a millisecond late when the process is
	// idle (the netpoller sleeps in whole milliseconds); the schedule
	// needs tens of microseconds, so it sleeps on a thread of its own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	preciseSleeps()
	start := time.Now()
	measureFrom := start.Add(time.Duration(warm) * interval)
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		sleepUntil(due)
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		res.PeakInFlight = max(res.PeakInFlight, len(slots))
		measured := i >= warm
		if i == warm && cfg.OnMeasure != nil {
			cfg.OnMeasure()
		}
		if measured {
			res.Sent++
			res.Lateness.Record(time.Since(due))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := do(ctx, i)
			end := time.Now()
			<-slots
			if !measured {
				return
			}
			if err != nil {
				fails.Add(1)
				errOnce.Do(func() { res.FirstErr = err })
				return
			}
			ok.Add(1)
			res.Latency.Record(end.Sub(due))
			if cfg.Samples {
				samplesMu.Lock()
				res.Samples = append(res.Samples, Sample{Due: due.Sub(measureFrom), Latency: end.Sub(due)})
				samplesMu.Unlock()
			}
			for {
				l := lastEnd.Load()
				if end.UnixNano() <= l || lastEnd.CompareAndSwap(l, end.UnixNano()) {
					break
				}
			}
		}()
	}
	wg.Wait()
	res.OK, res.Errors = int(ok.Load()), int(fails.Load())
	if l := lastEnd.Load(); l > 0 {
		res.Elapsed = time.Unix(0, l).Sub(measureFrom)
		res.Completed = float64(res.OK) / res.Elapsed.Seconds()
	}
	return res
}
