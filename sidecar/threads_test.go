package main

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestSidecarAdaptsItsThreads runs the sidecar as a process: without
// GOMAXPROCS it adapts its thread count (package threads), starts on one
// and says so; with GOMAXPROCS set it keeps that count and exports no
// thread metrics.
func TestSidecarAdaptsItsThreads(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: Go runs the sidecar on one thread, there is nothing to adapt")
	}
	for _, c := range []struct {
		name, env, logged, metric string
	}{
		{"adapting", "", `"gomaxprocs":2,"adaptive":true`, "tether_gomaxprocs 1\n"},
		{"GOMAXPROCS set", "GOMAXPROCS=2", `"gomaxprocs":2,"adaptive":false`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var extra []string
			if c.env != "" {
				extra = append(extra, c.env)
			}
			_, log, admin := startSidecar(t, "", extra...)
			testkit.Eventually(t, 5*time.Second, "the log line "+c.logged, func() bool {
				return strings.Contains(log(), c.logged)
			})
			if c.metric == "" {
				if m := scrape(t, "http://"+admin+"/metrics"); strings.Contains(m, "tether_gomaxprocs") {
					t.Errorf("/metrics exports the thread count with GOMAXPROCS set:\n%s", grep(m, "tether_gomaxprocs"))
				}
				return
			}
			// Idle, it is on one thread (a second after a busy start).
			// Scraped every half second: a scrape costs the sidecar CPU,
			// and scraping it back to back would keep it on two threads.
			var m string
			for deadline := time.Now().Add(20 * time.Second); ; {
				if m = scrape(t, "http://"+admin+"/metrics"); strings.Contains(m, c.metric) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/metrics has no %q after 20s:\n%s", c.metric, grep(m, "tether_gomaxprocs"))
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
