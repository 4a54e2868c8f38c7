package testkit

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// fatalT records the failure of a helper that calls Fatalf, which then
// ends the goroutine as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, a ...any) {
	f.msg = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (f *fatalT) Fatal(a ...any) { f.msg = fmt.Sprint(a...); runtime.Goexit() }

// failure runs f with a fatalT and returns its failure message ("" if none).
func failure(f func(t testing.TB)) string {
	ft := &fatalT{}
	done := make(chan struct{})
	go func() { defer close(done); f(ft) }()
	<-done
	return ft.msg
}

func TestEventually(t *testing.T) {
	var n atomic.Int64
	Eventually(t, 5*time.Second, "the third poll", func() bool { return n.Add(1) >= 3 })
	if msg := failure(func(t testing.TB) {
		Eventually(t, 30*time.Millisecond, "never", func() bool { return false })
	}); msg != "timed out after 30ms waiting for never" {
		t.Fatalf("bool condition: %q", msg)
	}
	if msg := failure(func(t testing.TB) {
		Eventually(t, 30*time.Millisecond, "agreement", func() error { return errors.New("a says x, b says y") })
	}); msg != "timed out after 30ms waiting for agreement: a says x, b says y" {
		t.Fatalf("error condition: %q", msg)
	}
	ch := make(chan struct{})
	close(ch)
	Eventually(t, time.Second, "closed", Closed(ch))
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	fmt.Fprint(&b, "one\ntwo\nthr")
	if got := strings.Join(b.Lines(), ","); got != "one,two" || b.Count("o") != 2 {
		t.Fatalf("lines %q, count %d", got, b.Count("o"))
	}
	defer func(n int) { maxBuffer = n }(maxBuffer)
	maxBuffer = 1 << 10
	line := strings.Repeat("x", 99) + "\n"
	for range maxBuffer/len(line) + 2 {
		b.Write([]byte(line))
	}
	if n := len(b.String()); n > maxBuffer || !strings.HasSuffix(b.String(), line) || strings.HasPrefix(b.String(), "one") {
		t.Fatalf("bounded buffer holds %d bytes", n)
	}
}

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total"}, []string{"pool", "code"})
	reg.MustRegister(c)
	c.WithLabelValues("a", "200").Add(3)
	c.WithLabelValues("a", "503").Add(1)
	c.WithLabelValues("b", "200").Add(7)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	for name, g := range map[string]prometheus.Gatherer{"registry": reg, "scrape": Scrape(t, srv.URL)} {
		if v := Metric(t, g, "requests_total", "pool", "a", "code", "503"); v != 1 {
			t.Errorf("%s: a/503 = %v", name, v)
		}
		if v := Metric(t, g, "requests_total", "pool", "b"); v != 7 {
			t.Errorf("%s: b = %v", name, v)
		}
		if _, err := FindMetric(g, "requests_total", "pool", "a"); err == nil || !strings.Contains(err.Error(), "2 samples match") {
			t.Errorf("%s: two matches: %v", name, err)
		}
		if _, err := FindMetric(g, "requests_total", "pool", "c"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `requests_total{pool="c"} not found`) {
			t.Errorf("%s: no match: %v", name, err)
		}
	}
	if msg := failure(func(t testing.TB) { Metric(t, reg, "absent_total") }); msg != "metric absent_total not found" {
		t.Fatalf("absent: %q", msg)
	}
}
