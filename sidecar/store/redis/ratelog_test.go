package redisstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLog(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	r := &rateLog{log: slog.New(slog.NewTextHandler(&buf, nil)), interval: 5 * time.Second, now: c.now}

	r.warn("boom", "n", 1)
	for range 99 {
		c.add(10 * time.Millisecond)
		r.warn("boom")
	}
	c.add(5 * time.Second)
	r.warn("boom", "n", 2)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "n=1 suppressed=0") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(lines[1], "n=2 suppressed=99") {
		t.Errorf("second line %q", lines[1])
	}
}
