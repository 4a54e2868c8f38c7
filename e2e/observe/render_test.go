package observe_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// mainPanels are the panels rendered into the README, in reading order.
var mainPanels = []string{
	"Requests by decision", "Sticky hit ratio",
	"Prefix-cache hit rate", "Rebinds by reason",
	"Store latency p99", "Store breaker open",
	"Convergence", "Admissions by result",
}

// renderWindow is $__rate_interval in the rendered panels.
const renderWindow = 10 * time.Second

// renderPanels keeps the load running until start+*loadFor, with the
// Redis store paused (SIGSTOP) for a stretch in the middle so the store
// panels show an outage, then one backend resetting every connection for
// a stretch so the rebind panels show its sessions moving, then draws
// mainPanels from query_range results into *pngDir/overview.png.
func renderPanels(t *testing.T, p *prom, s *system, start time.Time) {
	load := max(*loadFor, 40*time.Second)
	// Conversations that outlive the fault below, so that some are bound
	// to the failing backend when it starts (the load's own last four
	// turns: they rarely are); 32 of them, hashed over four backends.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 32 {
		wg.Go(func() {
			for turn := 1; ctx.Err() == nil; turn++ {
				chat(ctx, client, "http://"+s.sidecars[0].srv.PoolAddr("chat"), fmt.Sprintf("long-%d", i), min(turn, 8))
				sleep(ctx, time.Second)
			}
		})
	}
	time.Sleep(time.Until(start.Add(load * 2 / 5)))
	t.Logf("pausing redis-server for %s", load/6)
	s.redis.Pause()
	time.Sleep(load / 6)
	s.redis.Resume()
	time.Sleep(time.Until(start.Add(load * 7 / 10)))
	t.Logf("backend %s resets every connection for %s", hostPort(s.sims[2]), load/8)
	s.models[2].SetFault(sim.FaultReset)
	time.Sleep(load / 8)
	s.models[2].SetFault(sim.FaultNone)
	time.Sleep(time.Until(start.Add(load)))
	end := time.Now()

	byTitle := map[string][]struct{ expr, legend string }{}
	units := map[string]string{}
	for _, pn := range loadDashboard(t).Panels {
		units[pn.Title] = unitLabels[pn.FieldConfig.Defaults.Unit]
		for _, tg := range pn.Targets {
			byTitle[pn.Title] = append(byTitle[pn.Title], struct{ expr, legend string }{tg.Expr, tg.LegendFormat})
		}
	}
	const cols = 2
	rows := (len(mainPanels) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, title := range mainPanels {
		targets := byTitle[title]
		if len(targets) == 0 {
			t.Fatalf("panel %q is not in the dashboard", title)
		}
		pl := plot.New()
		pl.Title.Text = title
		pl.Title.TextStyle.Font.Size = vg.Points(12)
		pl.X.Label.Text = "seconds of load"
		pl.Y.Label.Text = units[title]
		pl.Legend.Top, pl.Legend.Left = true, true
		pl.Legend.TextStyle.Font.Size = vg.Points(8)
		pl.Add(plotter.NewGrid())
		n := 0
		for _, tg := range targets {
			ss, err := p.queryRange(expand(tg.expr, renderWindow), start, end, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(ss, func(a, b series) int {
				return strings.Compare(legend(tg.legend, a.labels), legend(tg.legend, b.labels))
			})
			for _, sr := range ss {
				// Series that stay 0 (the zero series exported for
				// every admission result, say) are left out.
				if !slices.ContainsFunc(sr.v, func(v float64) bool { return v != 0 }) {
					continue
				}
				xys := make(plotter.XYs, len(sr.t))
				for j := range sr.t {
					xys[j] = plotter.XY{X: sr.t[j], Y: sr.v[j]}
				}
				l, err := plotter.NewLine(xys)
				if err != nil {
					t.Fatal(err)
				}
				l.Color = plotutil.Color(n)
				l.Dashes = plotutil.Dashes(n / len(plotutil.DefaultColors))
				l.Width = vg.Points(1.5)
				pl.Add(l)
				pl.Legend.Add(legend(tg.legend, sr.labels), l)
				n++
			}
		}
		if n == 0 {
			t.Errorf("panel %q: no series to draw", title)
		}
		// One time axis for every panel, whenever its series start.
		pl.X.Min, pl.X.Max = 0, end.Sub(start).Seconds()
		pl.X.Tick.Marker = secondTicks{}
		pl.Y.Min = min(pl.Y.Min, 0)
		pl.Y.Max *= 1.3 // room for the legend
		plots[i/cols][i%cols] = pl
	}

	img := vgimg.New(vg.Length(cols)*6*vg.Inch, vg.Length(rows)*3.2*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 5, PadY: vg.Inch / 5, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	if err := os.MkdirAll(*pngDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(*pngDir, "overview.png")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d panels over %s of load)", path, len(mainPanels), end.Sub(start).Round(time.Second))
}

// unitLabels name the y axis for the dashboard's units.
var unitLabels = map[string]string{
	"reqps": "requests/s", "ops": "per second", "percentunit": "ratio", "s": "seconds", "Bps": "bytes/s", "short": "",
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend fills a Grafana legendFormat with a series' labels.
func legend(format string, labels map[string]string) string {
	out := legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
	if out = strings.TrimSpace(out); out == "" {
		return fmt.Sprint(labels)
	}
	return out
}

// secondTicks marks every 10 seconds, labelled every 20.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for s := 0; float64(s) <= hi; s += 10 {
		if float64(s) < lo {
			continue
		}
		label := ""
		if s%20 == 0 {
			label = strconv.Itoa(s)
		}
		ts = append(ts, plot.Tick{Value: float64(s), Label: label})
	}
	return ts
}
