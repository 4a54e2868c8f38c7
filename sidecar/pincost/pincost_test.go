package pincost

import (
	"fmt"
	"testing"
	"time"
)

// TestCompareKeepsAWarmPinUnderAModestQueue: with a learned 1 ms per
// prefill token and a 90% hit ratio, a 4,000-token conversation costs 4 s
// to prefill elsewhere and 0.4 s on its warm backend: a queue of a few
// requests on the pinned backend is worth waiting for, a long one is not.
func TestCompareKeepsAWarmPinUnderAModestQueue(t *testing.T) {
	e := New(1000) // 1 ms per token
	const body = 4000 * defaultBytesPerToken
	idle := Load{Waiting: 0, Running: 1}
	for _, tc := range []struct {
		waiting float64
		move    bool
	}{
		{0, false},
		{2, false}, // 2 s of queue + 0.4 s < 4 s
		{4, false}, // 4.4 s against 4 s: within the margin
		{6, true},  // 6.4 s > 1.25 × 4 s
	} {
		est := e.Compare(body, Load{Waiting: tc.waiting, Running: 1}, idle, false)
		if got := est.Better(0.25); got != tc.move {
			t.Errorf("pinned waiting %v: keep %v, move %v: moved=%v, want %v", tc.waiting, est.Keep, est.Move, got, tc.move)
		}
	}
	// Cold, the pin has nothing to protect: any shorter queue wins.
	if est := e.Compare(body, Load{Waiting: 1, Running: 1}, idle, true); !est.Better(0) {
		t.Errorf("cold pin behind a queue of 1 stays: %+v", est)
	}
	if est := e.Compare(body, idle, idle, true); est.Better(0) {
		t.Errorf("cold pin on an idle backend moves to an equally idle one: %+v", est)
	}
}

// TestLearn: the prefill rate is learned from unqueued turns with enough
// uncached tokens only; bytes per token and the kept pins' hit ratio
// converge to what responses report.
func TestLearn(t *testing.T) {
	e := New(0)
	if f := e.Figures(); f.PrefillTokensPerSecond != DefaultPrefillTokensPerSecond || f.HitRatio != defaultHitRatio {
		t.Fatalf("defaults: %+v", f)
	}
	for range 200 {
		// 1,000 uncached tokens in 500 ms: 2,000 tokens/s.
		e.Learn(Turn{BodyBytes: 6000, PromptTokens: 2000, CachedTokens: 1000, HasCached: true, Kept: true,
			FirstToken: 500 * time.Millisecond, Duration: 2 * time.Second})
		// Ignored for the rate: queued, or too few uncached tokens.
		e.Learn(Turn{BodyBytes: 6000, PromptTokens: 2000, CachedTokens: 1000, HasCached: true, Kept: true,
			FirstToken: 50 * time.Second, Duration: 2 * time.Second, Queued: true})
		e.Learn(Turn{BodyBytes: 6000, PromptTokens: 2000, CachedTokens: 1990, HasCached: true, Kept: false,
			FirstToken: 5 * time.Second, Duration: 2 * time.Second})
	}
	f := e.Figures()
	near := func(got, want float64) bool { return got > want*0.98 && got < want*1.02 }
	if !near(f.PrefillTokensPerSecond, 2000) || !near(f.BytesPerToken, 3) || !near(f.ServiceSeconds, 2) {
		t.Fatalf("learned %+v, want 2000 tokens/s, 3 bytes/token, 2 s", f)
	}
	// Only kept turns teach the hit ratio (the third turn was not kept).
	if !near(f.HitRatio, 0.5) {
		t.Fatalf("hit ratio %v, want 0.5", f.HitRatio)
	}
	// A configured rate is not overridden.
	fixed := New(500)
	fixed.Learn(Turn{PromptTokens: 2000, HasCached: true, FirstToken: time.Second})
	if r := fixed.Figures().PrefillTokensPerSecond; r != 500 {
		t.Fatalf("configured rate became %v", r)
	}
	// No prompt tokens: nothing learned (and no division by zero).
	before := e.Figures()
	e.Learn(Turn{BodyBytes: 10, FirstToken: time.Second})
	if e.Figures() != before {
		t.Fatal("a turn without prompt tokens was learned")
	}
}

func TestIsCold(t *testing.T) {
	for _, tc := range []struct {
		prompt, cached int64
		cold           bool
	}{
		{1000, 0, true},
		{1000, 100, true},
		{1000, 101, false},
		{100, 0, false}, // too short to judge
		{ColdMinPrompt, 0, true},
	} {
		if got := IsCold(tc.prompt, tc.cached); got != tc.cold {
			t.Errorf("IsCold(%d, %d) = %v", tc.prompt, tc.cached, got)
		}
	}
}

// TestColdMarks: a mark serves one decision, for its backend, until it
// lapses; the set never holds more than its bound.
func TestColdMarks(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCold(3)
	c.Mark("s1", "a", now.Add(time.Minute))
	if c.Take("s1", "b", now) {
		t.Fatal("a mark for backend a taken for b")
	}
	c.Mark("s1", "a", now.Add(time.Minute))
	if !c.Take("s1", "a", now) || c.Take("s1", "a", now) {
		t.Fatal("a mark must serve exactly one decision")
	}
	c.Mark("s2", "a", now.Add(time.Minute))
	if c.Take("s2", "a", now.Add(2*time.Minute)) {
		t.Fatal("a lapsed mark was taken")
	}
	for i := range 100 {
		c.Mark(fmt.Sprint("k", i), "a", now.Add(time.Minute))
	}
	if c.Len() != 3 {
		t.Fatalf("holds %d marks, bound 3", c.Len())
	}
	if !c.Take("k99", "a", now) {
		t.Fatal("the newest mark was evicted")
	}
}

func BenchmarkCompare(b *testing.B) {
	e := New(0)
	for b.Loop() {
		e.Compare(16000, Load{Waiting: 3, Running: 2}, Load{Running: 2}, false)
	}
}
