package hop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/table"
	"github.com/tetherproxy/tether/sidecar/testkit"
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

// readThreads reads the thread counters from admin's /metrics. The full
// count is 2: the sidecar adapts only between one thread and two
// (README "Threads").
func readThreads(ctx context.Context, admin string) (threadsReading, error) {
	g, err := testkit.ScrapeURL(ctx, "http://"+admin+"/metrics")
	if err != nil {
		return threadsReading{}, err
	}
	// A series not there yet is none so far: a change counter's label
	// appears with its first change, and neither exists on a fixed count.
	get := func(name string, label ...string) (float64, bool, error) {
		v, err := testkit.FindMetric(g, name, label...)
		if errors.Is(err, testkit.ErrNotFound) {
			return 0, false, nil
		}
		return v, err == nil, err
	}
	var r threadsReading
	one, ok, err1 := get("tether_gomaxprocs_seconds_total", "threads", "1")
	two, _, err2 := get("tether_gomaxprocs_seconds_total", "threads", "2")
	up, _, err3 := get("tether_gomaxprocs_changes_total", "direction", "up")
	down, _, err4 := get("tether_gomaxprocs_changes_total", "direction", "down")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return r, err
	}
	r.OnOne, r.OnMax = seconds(one), seconds(two)
	r.Up, r.Down, r.ok = int(up), int(down), ok
	return r, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// threadsProbe reads a sidecar's thread counters as a point's measured
// part begins (on a goroutine of its own: the generator must not wait
// for it) and as it ends.
type threadsProbe struct {
	admin  string
	before threadsReading
	err    error
	read   chan struct{} // closed once before is read; nil until begin
}

func (p *threadsProbe) begin(ctx context.Context) {
	p.read = make(chan struct{})
	go func() {
		defer close(p.read)
		p.before, p.err = readThreads(ctx, p.admin)
	}()
}

// end reads the counters again and returns what changed since begin;
// nil if the part never began or the sidecar exports no counters.
func (p *threadsProbe) end(ctx context.Context) (*Threads, error) {
	if p.read == nil {
		return nil, nil
	}
	after, err := readThreads(ctx, p.admin)
	<-p.read
	if err = errors.Join(err, p.err); err != nil {
		return nil, err
	}
	return after.since(p.before), nil
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
