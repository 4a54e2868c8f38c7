// Package logbuf batches log lines into fewer writes. The sidecar writes
// one access-log line per request; unbuffered, each is a write(2) to
// stderr (a pipe the container runtime reads, waking it), which under
// load costs more CPU than proxying the request. A Writer gathers lines
// and writes them together when its buffer fills or a short interval
// after the first line it holds, as nginx's access_log buffer= and flush=
// do. Lines are never split or reordered, and a warning or an error
// (FlushAt) is written at once, with what was held before it.
//
// A request never waits for the log's reader: batches are written by a
// goroutine of their own, and a line that finds both buffers taken (one
// full, the other still on its way to a reader that fell behind) is
// dropped and counted (Dropped), as HAProxy drops log lines its buffer
// cannot take, instead of holding the request until the reader catches
// up (docs/hop-cost.md "A log reader that falls behind").
package logbuf

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/logjson"
)

// Writer buffers writes to w. It is safe for concurrent use; each Write
// is kept whole (slog handlers write one line per call). Of its two
// buffers one takes lines while the other's batch is on its way to w.
type Writer struct {
	mu      sync.Mutex // guards every field below but w and dropped
	buf     []byte     // the lines held
	spare   []byte     // the other buffer; nil while its batch is being written
	size    int        // a buffer's size; 0: every line written through
	every   time.Duration
	timer   *time.Timer
	pending bool // the timer is set for buf's lines
	writing bool // a batch is on its way to w (drain runs)
	again   bool // drain writes buf as well once its batch is written
	closed  bool
	err     error     // the last write's error, for Close
	idle    sync.Cond // broadcast when writing ends

	w       io.Writer
	dropped atomic.Uint64
}

// New returns a Writer to w that holds up to size bytes and writes what it
// holds at most every after the first of them arrived. every <= 0 or
// size <= 0 returns a Writer that writes through at once.
func New(w io.Writer, size int, every time.Duration) *Writer {
	b := &Writer{w: w, every: every}
	b.idle.L = &b.mu
	if size > 0 && every > 0 {
		b.size = size
		b.buf = make([]byte, 0, size)
		b.spare = make([]byte, 0, size)
	}
	return b
}

// Write buffers p; a line that fills the buffer starts its batch's
// write. It never waits for w unless the Writer writes through (not
// buffering, or closed). A line that finds both buffers taken is dropped
// (Dropped counts it), and Write reports it written: the caller (a
// request's log line) has nothing better to do with it.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || b.size == 0 {
		defer b.mu.Unlock()
		for b.writing { // after the batches before it
			b.idle.Wait()
		}
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > b.size {
		if b.writing {
			b.mu.Unlock()
			b.dropped.Add(1)
			return len(p), nil
		}
		if len(p) > b.size {
			// Larger than a buffer: written now, with what is held.
			b.buf = append(b.buf, p...)
			b.startLocked(false)
			b.mu.Unlock()
			return len(p), nil
		}
		b.startLocked(false)
	}
	b.buf = append(b.buf, p...)
	if !b.pending {
		b.pending = true
		if b.timer == nil {
			b.timer = time.AfterFunc(b.every, b.flushTimed)
		} else {
			b.timer.Reset(b.every)
		}
	}
	b.mu.Unlock()
	return len(p), nil
}

// Dropped is how many lines were dropped because both buffers were taken.
func (b *Writer) Dropped() uint64 { return b.dropped.Load() }

// startLocked, with mu held and no batch being written, takes the
// buffer's lines as a batch and writes it: on a goroutine of its own, or
// (inline) on the caller's, which must not hold mu then (startLocked
// unlocks it first, and the caller locks it again if it needs it).
func (b *Writer) startLocked(inline bool) {
	held := b.buf
	b.buf, b.spare = b.spare, nil
	b.pending = false // the timer, if set, finds the lines gone
	b.writing = true
	if inline {
		b.mu.Unlock()
		b.drain(held)
		return
	}
	go b.drain(held)
}

// drain writes held, then buf's lines while a flush asked for them
// (again), and gives the buffer back.
func (b *Writer) drain(held []byte) {
	for {
		_, err := b.w.Write(held)
		b.mu.Lock()
		b.err = err
		if cap(held) > b.size {
			held = make([]byte, 0, b.size) // a line larger than a buffer grew it
		}
		b.spare = held[:0]
		if !b.again || len(b.buf) == 0 {
			b.again, b.writing = false, false
			b.idle.Broadcast()
			b.mu.Unlock()
			return
		}
		b.again = false
		held, b.buf, b.spare = b.buf, b.spare, nil
		b.pending = false
		b.mu.Unlock()
	}
}

// Flush starts writing what the Writer holds, or asks the write on its
// way to write it next; it does not wait for the write (Close does).
func (b *Writer) Flush() {
	b.mu.Lock()
	b.flushLocked(false)
}

// flushTimed is the timer's flush, written on the timer's goroutine.
func (b *Writer) flushTimed() {
	b.mu.Lock()
	b.flushLocked(true)
}

// flushLocked, with mu held, is Flush; it unlocks mu.
func (b *Writer) flushLocked(inline bool) {
	b.pending = false
	switch {
	case b.writing:
		b.again = true
	case len(b.buf) > 0:
		b.startLocked(inline)
		if inline {
			return // unlocked
		}
	}
	b.mu.Unlock()
}

// Close writes what the Writer holds and waits for every write; later
// writes go through at once. The error is the last write's.
func (b *Writer) Close() error {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.closed = true
	if b.size > 0 {
		b.flushLocked(true)
		b.mu.Lock()
	}
	for b.writing {
		b.idle.Wait()
	}
	err := b.err
	b.mu.Unlock()
	return err
}

// ReportOptions says where ReportDrops reports.
type ReportOptions struct {
	Log *slog.Logger
	// Registerer, if set, takes tether_log_lines_dropped_total.
	Registerer prometheus.Registerer
	Every      time.Duration // how often at most a warning is logged
}

// ReportDrops exports b's dropped lines as a counter and logs a warning,
// at most once every o.Every, saying how many were dropped since the
// last, until ctx ends. The warning takes the log's own way (the reader
// may still be behind: then it is dropped too, and counted in the next).
func ReportDrops(ctx context.Context, b *Writer, o ReportOptions) {
	if o.Registerer != nil {
		o.Registerer.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tether_log_lines_dropped_total",
			Help: "Log lines (access lines mostly) dropped because the reader of the log fell behind: stderr's pipe and both of the log's 64 KiB buffers were full.",
		}, func() float64 { return float64(b.Dropped()) }))
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	var reported uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := b.Dropped(); n > reported {
			o.Log.Warn("log lines dropped: the reader of the sidecar's log fell behind (stderr's pipe and both buffers full)", "dropped", n-reported, "dropped_total", n)
			reported = n
		}
	}
}

// FlushAt wraps h, whose output is w, so that a record at level at or
// above is written at once, with the lines held before it: a warning or
// an error is seen when it happens, only routine lines (the access log)
// wait for their batch.
func FlushAt(h slog.Handler, w *Writer, at slog.Level) slog.Handler {
	return &flushing{Handler: h, w: w, at: at}
}

type flushing struct {
	slog.Handler
	w  *Writer
	at slog.Level
}

func (f *flushing) Handle(ctx context.Context, r slog.Record) error {
	err := f.Handler.Handle(ctx, r)
	if r.Level >= f.at {
		f.w.Flush()
	}
	return err
}

// HandleAttrs is Handle for a record given as its parts
// (logjson.AttrsHandler), passed on as such.
func (f *flushing) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	err := logjson.HandleAttrs(ctx, f.Handler, t, level, msg, attrs)
	if level >= f.at {
		f.w.Flush()
	}
	return err
}

func (f *flushing) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &flushing{Handler: f.Handler.WithAttrs(attrs), w: f.w, at: f.at}
}

func (f *flushing) WithGroup(name string) slog.Handler {
	return &flushing{Handler: f.Handler.WithGroup(name), w: f.w, at: f.at}
}
