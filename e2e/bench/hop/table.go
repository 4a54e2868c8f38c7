package hop

import (
	"fmt"
	"io"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
	"github.com/tetherproxy/tether/e2e/bench/table"
)

// Ms formats a duration in milliseconds with three significant digits.
func Ms(d time.Duration) string {
	ms := float64(d) / 1e6
	switch a := max(ms, -ms); {
	case a < 1:
		return fmt.Sprintf("%.3f", ms)
	case a < 10:
		return fmt.Sprintf("%.2f", ms)
	case a < 100:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

// Ratio formats a/b as "1.23×", or "—" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Added is a proxy's latency at quantile q minus direct's at the same
// rate and mode (what the hop adds), or false without a direct point.
func (r *Results) Added(p *Point, q float64) (time.Duration, bool) {
	d := r.Point(Direct, p.Mode, p.Rate)
	if d == nil || d.Res.OK == 0 {
		return 0, false
	}
	return p.Res.Latency.Quantile(q) - d.Res.Latency.Quantile(q), true
}

// Setup describes the measurement in one sentence.
func (r *Results) Setup() string {
	o := r.Opts
	fields := ""
	if o.Headers == HeadersSDK {
		fields = ", with the 14 more fields of an OpenAI SDK's request (-headers sdk)"
	}
	conns := "keep-alive"
	if o.CloseEvery > 0 {
		conns = fmt.Sprintf("keep-alive, every %d-th request closing its connection once answered (-close-every)", o.CloseEvery)
	}
	if o.PromptBytes > 0 {
		fields += fmt.Sprintf(", bodies of %d bytes (-prompt-bytes)", o.PromptBytes)
	}
	if o.IdleHeld > 0 {
		conns += fmt.Sprintf("; %d more idle keep-alive connections to each proxy held through the points (-idle-held)", o.IdleHeld)
	}
	logTo := ""
	if o.LogReaderPause > 0 {
		logTo = fmt.Sprintf("; tether's log to a pipe drained every %v (-log-reader-pause)", o.LogReaderPause)
	}
	return fmt.Sprintf("%d modelsim backends in one process (no artificial latency, no request log), %d sessions (X-Session-ID)%s, %s; each point %v measured after %v warm-up; latency from the scheduled send time to the response's last byte; streamed responses are %d SSE events%s",
		o.Backends, o.Sessions, fields, conns, o.Duration, o.Warmup, StreamEvents, logTo)
}

// Tables returns one table per mode and rate, with ratios to HAProxy's
// figures of the same run (the p99's with its 90% interval over the two
// points' requests resampled in blocks, QuantileRatioInterval), then the
// rate search.
func (r *Results) Tables() []*table.Table {
	o := r.Opts
	var out []*table.Table
	for _, mode := range o.Modes {
		for _, rate := range o.RatesOf(mode) {
			t := &table.Table{Title: fmt.Sprintf("%s, %.0f requests/s offered", mode, rate),
				Head: []string{"proxy", "ok/sent", "p50 ms", "p99 ms", "p99.9 ms", "added p50", "added p99", "added p99.9",
					"CPU ms/1k req", "CPU ×HAProxy", "p99 ×HAProxy (90% interval)", "p99.9 ×HAProxy", "peak RSS MiB", "peak in flight"}}
			if mode == Streaming {
				t.Head = append(t.Head, "CPU µs/event")
			}
			h := r.Point(HAProxy, mode, rate)
			for _, name := range o.Proxies {
				p := r.Point(name, mode, rate)
				if p == nil {
					continue
				}
				l := p.Res.Latency
				row := []string{Labels[name], fmt.Sprintf("%d/%d", p.Res.OK, p.Res.Sent),
					Ms(l.Quantile(0.5)), Ms(l.Quantile(0.99)), Ms(l.Quantile(0.999))}
				for _, q := range []float64{0.5, 0.99, 0.999} {
					if a, ok := r.Added(p, q); ok && name != Direct {
						row = append(row, Ms(a))
					} else {
						row = append(row, "—")
					}
				}
				if name == Direct {
					row = append(row, "—", "—", "—", "—", "—")
				} else {
					cpu := fmt.Sprintf("%.0f", float64(p.CPUPer1k)/1e6)
					if p.AuxCPUPer1k > 0 {
						cpu += fmt.Sprintf(" (+%.0f)", float64(p.AuxCPUPer1k)/1e6)
					}
					row = append(row, cpu, "—", "—", "—", fmt.Sprintf("%.1f", float64(p.PeakRSS)/(1<<20)))
					if h != nil {
						row[9] = Ratio(float64(p.CPUPer1k), float64(h.CPUPer1k))
						row[10] = Ratio(float64(l.Quantile(0.99)), float64(h.Res.Latency.Quantile(0.99)))
						if lo, hi, ok := QuantileRatioInterval(p, h, 0.99, 0.9); ok && name != HAProxy {
							row[10] += " (" + bootstrap.Format(lo, hi, ok) + ")"
						}
						row[11] = Ratio(float64(l.Quantile(0.999)), float64(h.Res.Latency.Quantile(0.999)))
					}
				}
				row = append(row, fmt.Sprint(p.Res.PeakInFlight))
				if mode == Streaming {
					if name == Direct {
						row = append(row, "—")
					} else {
						row = append(row, fmt.Sprintf("%.1f", float64(p.CPUPer1k)/1e3/1000/StreamEvents))
					}
				}
				t.Add(row...)
			}
			out = append(out, t)
		}
	}
	if len(r.Max) > 0 {
		t := &table.Table{Title: fmt.Sprintf("highest rate sustained: p99 added over direct's at the same rung < %v, no errors, the offered rate completed; every proxy probed for %v at each rung of %v requests/s (streamed: %v) until its first failure, confirmed by a second probe after a fresh one of direct", o.P99Limit, o.ProbeTime, ladder, streamLadder),
			Head: []string{"proxy", "mode", "requests/s", "×HAProxy", "stopped by (the confirming probe)"}}
		for _, m := range r.Max {
			ratio := "—"
			for _, h := range r.Max {
				if h.Proxy == HAProxy && h.Mode == m.Mode {
					ratio = m.RatioTo(h)
				}
			}
			stop := "— (the ladder's top)"
			if m.Stop != nil {
				stop = m.Stop.String()
			}
			t.Add(Labels[m.Proxy], string(m.Mode), m.Label(), ratio, stop)
		}
		out = append(out, t)
	}
	return out
}

// Print writes the setup and the tables as text.
func (r *Results) Print(w io.Writer) {
	fmt.Fprintln(w, r.Setup())
	for _, t := range r.Tables() {
		t.Text(w)
	}
	if t := r.StallsTable(); t != nil {
		t.Text(w)
	}
	if t := r.ThreadsTable(); t != nil {
		t.Text(w)
	}
	if t := r.IdleTable(); t != nil {
		t.Text(w)
	}
}
