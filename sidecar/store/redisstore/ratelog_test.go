package redisstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestRateLog(t *testing.T) { synctest.Test(t, testRateLog) }

func testRateLog(t *testing.T) {
	var buf bytes.Buffer
	r := &rateLog{log: slog.New(slog.NewTextHandler(&buf, nil)), interval: 5 * time.Second}

	r.warn("boom", "n", 1)
	for range 99 {
		time.Sleep(10 * time.Millisecond)
		r.warn("boom")
	}
	time.Sleep(5 * time.Second)
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
