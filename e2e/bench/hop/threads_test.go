package hop

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestThreadsAreTheCountersChangeOverThePoint: a point's thread record
// is the difference of two reads of the sidecar's counters, the full
// count's time being every count's but one's; a sidecar that exports
// none (GOMAXPROCS fixed) has no record.
func TestThreadsAreTheCountersChangeOverThePoint(t *testing.T) {
	page := func(one, two float64, up, down int) string {
		return fmt.Sprintf(`# TYPE tether_gomaxprocs_seconds_total counter
tether_gomaxprocs_seconds_total{threads="1"} %g
tether_gomaxprocs_seconds_total{threads="2"} %g
# TYPE tether_gomaxprocs_changes_total counter
tether_gomaxprocs_changes_total{direction="down"} %d
tether_gomaxprocs_changes_total{direction="up"} %d
`, one, two, down, up)
	}
	pages := []string{page(10, 2.5, 3, 2), page(12, 10.5, 5, 3), "# TYPE go_goroutines gauge\ngo_goroutines 12\n"}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, pages[0])
		pages = pages[1:]
	}))
	defer s.Close()
	admin := strings.TrimPrefix(s.URL, "http://")
	var reads []threadsReading
	for range 3 {
		r, err := readThreads(context.Background(), admin)
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, r)
	}
	got := reads[1].since(reads[0])
	want := Threads{OnOne: 2 * time.Second, OnMax: 8 * time.Second, Up: 2, Down: 1}
	if got == nil || *got != want {
		t.Fatalf("since: %+v, want %+v", got, want)
	}
	if s := got.MaxShare(); s != 0.8 {
		t.Errorf("MaxShare %v, want 0.8", s)
	}
	if got := reads[2].since(reads[1]); got != nil {
		t.Errorf("a sidecar without the counters: %+v, want no record", got)
	}

	res := &Results{Points: []Point{{Proxy: HAProxy, Mode: NonStreaming, Rate: 5000}, {Proxy: Tether, Mode: NonStreaming, Rate: 5000, Threads: &want}}}
	tab := res.ThreadsTable()
	if tab == nil || len(tab.Rows) != 1 || strings.Join(tab.Rows[0], "|") != Labels[Tether]+"|non-streaming|5000|80%|2|1" {
		t.Fatalf("table rows %q, want tether's alone", tab.Rows)
	}
}
