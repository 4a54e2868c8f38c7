package hop

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tetherproxy/tether/e2e/bench/table"
)

// Threads is what a tether sidecar's thread controller did during a
// point's measured part (bench hop -threads), from its own counters
// (tether_gomaxprocs_seconds_total, tether_gomaxprocs_changes_total),
// read on its admin listener as the part began and as it ended: whether
// a run's CPU and tail were those of one thread or two (README
// "Threads").
type Threads struct {
	OnOne, OnMax time.Duration
	Up, Down     int
}

// MaxShare is the share of the time on the full count.
func (t Threads) MaxShare() float64 {
	if all := t.OnOne + t.OnMax; all > 0 {
		return float64(t.OnMax) / float64(all)
	}
	return 0
}

// threadsReading is one read of the counters; ok is false for a sidecar
// that exports none (GOMAXPROCS set: its count is fixed).
type threadsReading struct {
	Threads
	ok bool
}

func (r threadsReading) since(before threadsReading) *Threads {
	if !r.ok || !before.ok {
		return nil
	}
	return &Threads{OnOne: r.OnOne - before.OnOne, OnMax: r.OnMax - before.OnMax, Up: r.Up - before.Up, Down: r.Down - before.Down}
}

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// readThreads reads the thread counters from admin's /metrics.
func readThreads(ctx context.Context, admin string) (threadsReading, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return threadsReading{}, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return threadsReading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return threadsReading{}, fmt.Errorf("%s/metrics: %s", admin, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return threadsReading{}, fmt.Errorf("%s/metrics: %w", admin, err)
	}
	var r threadsReading
	seconds := fams["tether_gomaxprocs_seconds_total"]
	for _, m := range seconds.GetMetric() {
		d := time.Duration(m.GetCounter().GetValue() * float64(time.Second))
		if label(m, "threads") == "1" {
			r.OnOne += d
		} else {
			r.OnMax += d
		}
	}
	for _, m := range fams["tether_gomaxprocs_changes_total"].GetMetric() {
		switch label(m, "direction") {
		case "up":
			r.Up += int(m.GetCounter().GetValue())
		case "down":
			r.Down += int(m.GetCounter().GetValue())
		}
	}
	r.ok = seconds != nil
	return r, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// ThreadsTable is the thread counts of every point that has them; nil
// when none has.
func (r *Results) ThreadsTable() *table.Table {
	t := &table.Table{
		Title: "tether's threads during each point's measured part (its tether_gomaxprocs_seconds_total and tether_gomaxprocs_changes_total; README \"Threads\")",
		Head:  []string{"proxy", "mode", "requests/s", "time on the full count", "up", "down"},
	}
	for _, p := range r.Points {
		if th := p.Threads; th != nil {
			t.Add(Labels[p.Proxy], string(p.Mode), fmt.Sprintf("%.0f", p.Rate), percent(th.MaxShare()), fmt.Sprint(th.Up), fmt.Sprint(th.Down))
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}
