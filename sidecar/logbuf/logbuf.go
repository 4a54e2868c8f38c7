// Package logbuf batches log lines into fewer writes. The sidecar writes
// one access-log line per request; unbuffered, each is a write(2) to
// stderr (a pipe the container runtime reads, waking it), which under
// load costs more CPU than proxying the request. A Writer gathers lines
// and writes them together when its buffer fills or a short interval
// after the first line it holds, as nginx's access_log buffer= and flush=
// do. Lines are never split or reordered, and a warning or an error
// (FlushAt) is written at once, with what was held before it.
package logbuf

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/logjson"
)

// Writer buffers writes to w. It is safe for concurrent use; each Write
// is kept whole (slog handlers write one line per call). A buffer is
// written outside the lock its writers take: while one is on its way to
// w (a pipe whose reader may be slow), lines go into the second, so a
// request logging its line waits for a write(2) only when both are full.
type Writer struct {
	mu      sync.Mutex // guards buf, pending, closed and timer
	buf     []byte
	every   time.Duration
	timer   *time.Timer
	pending bool // a flush is scheduled
	closed  bool

	// wmu serialises the writes to w, in the order their buffers were
	// taken; it is taken while mu is held, never the other way round.
	wmu   sync.Mutex
	w     io.Writer
	spare []byte // the buffer not in use, when no write holds it (guarded by wmu)
}

// New returns a Writer to w that holds up to size bytes and writes what it
// holds at most every after the first of them arrived. every <= 0 or
// size <= 0 returns a Writer that writes through at once.
func New(w io.Writer, size int, every time.Duration) *Writer {
	b := &Writer{w: w, every: every}
	if size > 0 && every > 0 {
		b.buf = make([]byte, 0, size)
		b.spare = make([]byte, 0, size)
	}
	return b
}

// Write buffers p, or writes it through when it does not fit an empty
// buffer (or the Writer does not buffer). The error is that of the
// underlying write, when Write made one.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || cap(b.buf) == 0 {
		b.wmu.Lock() // after any buffer being written
		b.mu.Unlock()
		defer b.wmu.Unlock()
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		held := b.takeLocked() // unlocks mu
		err := b.write(held)
		if len(p) > cap(held) {
			if err != nil {
				b.wmu.Unlock()
				return 0, err
			}
			defer b.wmu.Unlock()
			return b.w.Write(p)
		}
		b.wmu.Unlock()
		if err != nil {
			return 0, err
		}
		b.mu.Lock()
	}
	b.buf = append(b.buf, p...)
	if !b.pending {
		b.pending = true
		if b.timer == nil {
			b.timer = time.AfterFunc(b.every, func() { b.Flush() })
		} else {
			b.timer.Reset(b.every)
		}
	}
	b.mu.Unlock()
	return len(p), nil
}

// takeLocked, with mu held, takes the buffer's lines for writing: it
// waits for the write before (the spare buffer comes back with it), puts
// the spare in the buffer's place, and unlocks mu. The caller holds wmu
// and writes the lines it returns (write).
func (b *Writer) takeLocked() []byte {
	b.wmu.Lock()
	held := b.buf
	b.buf, b.spare = b.spare[:0], nil
	b.pending = false
	b.mu.Unlock()
	return held
}

// write writes held to w and returns it as the spare buffer, with wmu
// held (the caller unlocks it).
func (b *Writer) write(held []byte) error {
	var err error
	if len(held) > 0 {
		_, err = b.w.Write(held)
	}
	b.spare = held[:0]
	return err
}

// Flush writes what the Writer holds.
func (b *Writer) Flush() error {
	b.mu.Lock()
	return b.flushLocked()
}

// Close writes what the Writer holds; later writes go through at once.
func (b *Writer) Close() error {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.closed = true
	return b.flushLocked()
}

// flushLocked, with mu held, writes what the Writer holds and unlocks mu
// (before the write: see takeLocked).
func (b *Writer) flushLocked() error {
	if cap(b.buf) == 0 {
		b.mu.Unlock()
		return nil
	}
	held := b.takeLocked()
	defer b.wmu.Unlock()
	return b.write(held)
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
		if ferr := f.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// HandleAttrs is Handle for a record given as its parts
// (logjson.AttrsHandler), passed on as such.
func (f *flushing) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	err := logjson.HandleAttrs(ctx, f.Handler, t, level, msg, attrs)
	if level >= f.at {
		if ferr := f.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (f *flushing) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &flushing{Handler: f.Handler.WithAttrs(attrs), w: f.w, at: f.at}
}

func (f *flushing) WithGroup(name string) slog.Handler {
	return &flushing{Handler: f.Handler.WithGroup(name), w: f.w, at: f.at}
}
