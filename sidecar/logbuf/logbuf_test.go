package logbuf

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/logjson"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// countingWriter records every write it is given, whole.
type countingWriter struct {
	mu     sync.Mutex
	writes []string
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

func (c *countingWriter) all() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.writes, ""), len(c.writes)
}

// TestBatchesAndFlushesAfterInterval: lines written together reach the
// underlying writer in one write, in order, once the interval passed.
func TestBatchesAndFlushesAfterInterval(t *testing.T) {
	defer goleak.VerifyNone(t)
	var under countingWriter
	w := New(&under, 4096, 20*time.Millisecond)
	var want strings.Builder
	for i := range 10 {
		line := fmt.Sprintf("{\"n\":%d}\n", i)
		want.WriteString(line)
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got, n := under.all(); n != 0 || got != "" {
		t.Fatalf("written before the interval: %q", got)
	}
	testkit.Eventually(t, 2*time.Second, "the buffered lines flushed", func() bool { _, n := under.all(); return n > 0 })
	if got, n := under.all(); got != want.String() || n != 1 {
		t.Fatalf("got %d writes %q, want one write %q", n, got, want.String())
	}
	w.Close()
}

// TestFullBufferWritesAtOnce: a line that does not fit starts the write
// of what is held; one larger than the buffer is written with what is
// held, whole.
func TestFullBufferWritesAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	var under countingWriter
	w := New(&under, 16, time.Hour)
	defer w.Close()
	w.Write([]byte("0123456789\n"))
	w.Write([]byte("abcdefghij\n")) // does not fit: the first goes out
	waitIdle(w)
	if got, n := under.all(); n != 1 || got != "0123456789\n" {
		t.Fatalf("after overflow: %d writes %q", n, got)
	}
	big := strings.Repeat("x", 40) + "\n"
	w.Write([]byte(big))
	waitIdle(w)
	if got, n := under.all(); n != 2 || got != "0123456789\nabcdefghij\n"+big {
		t.Fatalf("after a line larger than the buffer: %d writes %q", n, got)
	}
	if w.Dropped() != 0 {
		t.Fatalf("%d lines dropped", w.Dropped())
	}
}

// waitIdle waits until no batch of w's is on its way.
func waitIdle(w *Writer) {
	w.mu.Lock()
	for w.writing {
		w.idle.Wait()
	}
	w.mu.Unlock()
}

// TestCloseFlushesAndWritesThrough: Close writes what is held, and the
// lines after it are not held.
func TestCloseFlushesAndWritesThrough(t *testing.T) {
	var under bytes.Buffer
	w := New(&under, 1024, time.Hour)
	w.Write([]byte("a\n"))
	if under.Len() != 0 {
		t.Fatal("written before Close")
	}
	if err := w.Close(); err != nil || under.String() != "a\n" {
		t.Fatalf("Close: %v, %q", err, under.String())
	}
	w.Write([]byte("b\n"))
	if under.String() != "a\nb\n" {
		t.Fatalf("after Close: %q", under.String())
	}
}

// TestUnbuffered: an interval of 0 writes every line through.
func TestUnbuffered(t *testing.T) {
	var under countingWriter
	w := New(&under, 1024, 0)
	w.Write([]byte("a\n"))
	w.Write([]byte("b\n"))
	if got, n := under.all(); n != 2 || got != "a\nb\n" {
		t.Fatalf("%d writes %q", n, got)
	}
}

// TestConcurrentLinesStayWhole: concurrent writers' lines are never
// interleaved within a line nor reordered, and every line is written or
// counted as dropped (go test -race).
func TestConcurrentLinesStayWhole(t *testing.T) {
	var under countingWriter
	w := New(&under, 512, time.Millisecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				w.Write(fmt.Appendf(nil, "{\"g\":%d,\"i\":%03d}\n", g, i))
			}
		})
	}
	wg.Wait()
	w.Close()
	got, _ := under.all()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if uint64(len(lines))+w.Dropped() != 800 {
		t.Fatalf("%d lines and %d dropped, want 800 in all", len(lines), w.Dropped())
	}
	last := map[byte]string{}
	for _, l := range lines {
		if len(l) != len(`{"g":0,"i":000}`) {
			t.Fatalf("torn line %q", l)
		}
		if g := l[5]; l <= last[g] {
			t.Fatalf("line %q after %q", l, last[g])
		}
		last[l[5]] = l
	}
}

// TestFlushAtWarn: an info line waits for its batch; a warning is written
// at once with the info line held before it, also through a derived
// logger.
func TestFlushAtWarn(t *testing.T) {
	var under countingWriter
	w := New(&under, 4096, time.Hour)
	defer w.Close()
	log := slog.New(FlushAt(slog.NewJSONHandler(w, nil), w, slog.LevelWarn)).With("pool", "p")
	log.Info("routine")
	if _, n := under.all(); n != 0 {
		t.Fatal("an info line was written before its batch")
	}
	log.Warn("something broke")
	waitIdle(w)
	got, n := under.all()
	if n != 1 || !strings.Contains(got, `"msg":"routine"`) || !strings.Contains(got, `"msg":"something broke"`) ||
		strings.Index(got, "routine") > strings.Index(got, "something broke") {
		t.Fatalf("after a warning: %d writes %q, want both lines in order at once", n, got)
	}
}

// TestFlushAtWarnGivenParts: the same for records handed over as their
// parts (logjson.HandleAttrs, the access log's way), over logjson's
// handler, which takes them so, and over slog's, which takes a record.
func TestFlushAtWarnGivenParts(t *testing.T) {
	for name, inner := range map[string]func(io.Writer) slog.Handler{
		"logjson":          func(w io.Writer) slog.Handler { return logjson.New(w, nil) },
		"slog.JSONHandler": func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
	} {
		var under countingWriter
		w := New(&under, 4096, time.Hour)
		h := FlushAt(inner(w), w, slog.LevelWarn)
		if _, ok := h.(logjson.AttrsHandler); !ok {
			t.Fatalf("%s: FlushAt's handler takes no record as parts", name)
		}
		now := time.Now()
		if err := logjson.HandleAttrs(context.Background(), h, now, slog.LevelInfo, "routine", []slog.Attr{slog.Int("status", 200)}); err != nil {
			t.Fatal(err)
		}
		if _, n := under.all(); n != 0 {
			t.Fatalf("%s: an info line was written before its batch", name)
		}
		if err := logjson.HandleAttrs(context.Background(), h, now, slog.LevelWarn, "something broke", nil); err != nil {
			t.Fatal(err)
		}
		waitIdle(w)
		got, n := under.all()
		if n != 1 || !strings.Contains(got, `"msg":"routine","status":200`) || !strings.Contains(got, `"msg":"something broke"`) {
			t.Fatalf("%s: after a warning: %d writes %q, want both lines at once", name, n, got)
		}
		w.Close()
	}
}

// blockingWriter holds its first write until release is closed.
type blockingWriter struct {
	countingWriter
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.entered)
		<-b.release
	}
	return b.countingWriter.Write(p)
}

// TestLinesDoNotWaitForASlowWrite: a line that fills the buffer does
// not write the batch itself (a pipe whose reader is slow would hold it);
// while the batch is on its way, lines go into the second buffer and
// their writers return; a line that finds both buffers taken is dropped
// and counted, its writer not waiting either; a flush asked for meanwhile
// (a warning's) is done after the batch, and what was not dropped arrives
// whole and in order.
func TestLinesDoNotWaitForASlowWrite(t *testing.T) {
	defer goleak.VerifyNone(t)
	under := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	w := New(under, 16, time.Hour)
	returned := make(chan struct{})
	go func() {
		w.Write([]byte("0123456789\n"))
		w.Write([]byte("abc\n"))
		w.Write([]byte("def\n")) // does not fit: the first batch's write starts
		w.Write([]byte("ghijkl\n"))
		w.Write([]byte("mnopqrstu\n")) // both buffers taken: dropped
		w.Flush()                      // asks for the second buffer after the first
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("a line or a flush waited for the write of an earlier batch")
	}
	<-under.entered // the first batch is being written, and blocks
	if w.Dropped() != 1 {
		t.Fatalf("%d lines dropped, want 1", w.Dropped())
	}
	close(under.release)
	waitIdle(w)
	if got, _ := under.all(); got != "0123456789\nabc\ndef\nghijkl\n" {
		t.Fatalf("wrote %q", got)
	}
	w.Close()
}

// TestReportDrops: lines dropped are reported as a warning with their
// count, once per interval in which there were some.
func TestReportDrops(t *testing.T) {
	defer goleak.VerifyNone(t)
	under := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	w := New(under, 8, time.Hour)
	w.Write([]byte("abcdef\n"))
	w.Write([]byte("ghijkl\n")) // the first batch's write starts, and blocks
	<-under.entered
	w.Write([]byte("mnopqr\n")) // dropped
	w.Write([]byte("stuvwx\n")) // dropped

	var logged countingWriter
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	reg := prometheus.NewRegistry()
	go func() {
		ReportDrops(ctx, w, ReportOptions{Log: slog.New(slog.NewJSONHandler(&logged, nil)), Registerer: reg, Every: 5 * time.Millisecond})
		close(done)
	}()
	testkit.Eventually(t, 10*time.Second, "the drops reported", func() bool { _, n := logged.all(); return n > 0 })
	time.Sleep(30 * time.Millisecond) // intervals without drops: no more warnings
	cancel()
	<-done
	if got, n := logged.all(); n != 1 || !strings.Contains(got, `"level":"WARN"`) || !strings.Contains(got, `"dropped":2,"dropped_total":2`) {
		t.Fatalf("%d warnings %q, want one saying 2 lines were dropped", n, got)
	}
	if n, err := testkit.FindMetric(reg, "tether_log_lines_dropped_total"); err != nil || n != 2 {
		t.Fatalf("tether_log_lines_dropped_total = %v, %v; want 2", n, err)
	}
	close(under.release)
	w.Close()
}
