// Package progress draws the benchmark's progress bar on stderr: the
// planned steps carry estimated durations, the bar advances by them (and
// within a step by the time spent in it, up to its estimate), and shows
// the elapsed time and an estimate of what is left. When stderr is not a
// terminal it prints one line per step instead.
package progress

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bar is safe for concurrent use.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	weights  []time.Duration // planned steps, in order
	total    time.Duration
	next     int           // index of the step now running (after Step)
	done     time.Duration // estimates of the finished steps
	label    string
	start    time.Time
	stepFrom time.Time
	stop     chan struct{}
	stopped  sync.WaitGroup
}

// New returns a bar on stderr.
func New() *Bar {
	fi, err := os.Stderr.Stat()
	return &Bar{w: os.Stderr, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

// Plan appends n steps estimated at each.
func (b *Bar) Plan(n int, each time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range n {
		b.weights = append(b.weights, each)
		b.total += each
	}
}

// Skip drops the next n planned steps (after the one running): a part
// that plans for its worst case (a search) says what it did not need.
func (b *Bar) Skip(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := min(b.next, len(b.weights))
	to := min(from+max(n, 0), len(b.weights))
	for _, w := range b.weights[from:to] {
		b.total -= w
	}
	b.weights = slices.Delete(b.weights, from, to)
}

// Start begins the clock and, on a terminal, redraws every second.
func (b *Bar) Start() {
	b.mu.Lock()
	b.start, b.stepFrom = time.Now(), time.Now()
	b.stop = make(chan struct{})
	b.mu.Unlock()
	if !b.tty {
		return
	}
	b.stopped.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.mu.Lock()
				b.draw()
				b.mu.Unlock()
			case <-b.stop:
				return
			}
		}
	})
}

// Step marks the previous step done and the next planned one running.
func (b *Bar) Step(label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next > 0 && b.next <= len(b.weights) {
		b.done += b.weights[b.next-1]
	}
	b.next++
	b.label, b.stepFrom = label, time.Now()
	if b.tty {
		b.draw()
	} else {
		fmt.Fprintf(b.w, "[%3.0f%%] %s elapsed — %s\n", 100*b.fraction(), round(time.Since(b.start)), label)
	}
}

// Finish completes the bar.
func (b *Bar) Finish() {
	if b.stop != nil {
		close(b.stop)
		b.stopped.Wait()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.label = b.total, "done"
	if b.tty {
		b.draw()
		fmt.Fprintln(b.w)
	} else {
		fmt.Fprintf(b.w, "[100%%] done in %s\n", round(time.Since(b.start)))
	}
}

func (b *Bar) fraction() float64 {
	if b.total == 0 {
		return 0
	}
	cur := time.Duration(0)
	if b.next > 0 && b.next <= len(b.weights) && b.done < b.total {
		cur = min(time.Since(b.stepFrom), b.weights[b.next-1])
	}
	return min(1, float64(b.done+cur)/float64(b.total))
}

func (b *Bar) draw() {
	const width = 30
	f := b.fraction()
	filled := int(f * width)
	elapsed := time.Since(b.start)
	left := "—"
	if f > 0.02 {
		left = "~" + round(time.Duration(float64(elapsed)/f)-elapsed)
	}
	label := b.label
	if len(label) > 60 {
		label = label[:57] + "..."
	}
	fmt.Fprintf(b.w, "\r\033[K[%s%s] %3.0f%%  %s elapsed, %s left  %s",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*f, round(elapsed), left, label)
}

func round(d time.Duration) string { return d.Round(time.Second).String() }
