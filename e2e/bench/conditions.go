package main

import (
	"context"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/progress"
	"github.com/tetherproxy/tether/e2e/bench/report"
)

// conditions are what section 1's steady points do not make, each a bug
// once that no point showed (docs/hop-cost.md "The poller's own wait",
// "A log reader that falls behind", "A prompt of many kilobytes"):
// clients closing their connections, a log reader that falls behind, and
// prompts of a later turn. Each is one point of HAProxy and tether at
// 1,000 requests/s, beside direct.
var conditions = []struct {
	name string
	set  func(*hopFlags)
}{
	{"One request in 20 closing its connection once answered", func(h *hopFlags) { h.closeEvery = 20 }},
	{"Tether's log a pipe drained every 120 ms", func(h *hopFlags) { h.logReaderPause = 120 * time.Millisecond }},
	{"Prompts of 32 KiB", func(h *hopFlags) { h.promptBytes = 32 << 10 }},
}

// conditionFlags is base's timing with one condition set.
func conditionFlags(base hopFlags, set func(*hopFlags)) hopFlags {
	h := hopFlags{
		proxies: hop.HAProxy + "," + hop.Tether, modes: string(hop.NonStreaming), rates: "1000", streamRates: "100",
		duration: base.duration, warmup: base.warmup, probe: base.probe,
		sessions: base.sessions, backends: base.backends, headers: base.headers,
	}
	set(&h)
	return h
}

// planConditions puts the conditions' points on the bar.
func planConditions(bar *progress.Bar, base hopFlags) {
	for range conditions {
		// direct, HAProxy and tether at one rate
		bar.Plan(3, base.warmup+base.duration+300*time.Millisecond)
	}
}

// runConditions measures every condition, each with the run's progress
// steps.
func runConditions(ctx context.Context, env *procs.Env, base hopFlags, step func(string)) ([]report.Condition, error) {
	var out []report.Condition
	for _, c := range conditions {
		h := conditionFlags(base, c.set)
		o, err := h.options(env)
		if err != nil {
			return nil, err
		}
		o.Step = step
		r, err := hop.Run(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, report.Condition{Name: c.name, Cmd: "go run ./e2e/bench hop " + h.String(), Hop: r})
	}
	return out, nil
}
