package logjson

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// both formats r with a Handler and with slog.JSONHandler. The
// Handler's HandleAttrs, given r's parts, must write what its Handle
// writes.
func both(t testing.TB, r slog.Record) (got, want string) {
	t.Helper()
	var a, b, c bytes.Buffer
	if err := New(&a, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := slog.NewJSONHandler(&b, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var attrs []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	if err := HandleAttrs(context.Background(), New(&c, nil), r.Time, r.Level, r.Message, attrs); err != nil {
		t.Fatal(err)
	}
	if c.String() != a.String() {
		t.Fatalf("HandleAttrs:\n got %s\nwant %s (Handle's)", c.String(), a.String())
	}
	return a.String(), b.String()
}

// strings the escaping must get right, beside random ones.
var hardStrings = []string{
	"", "plain", `quote " and \ backslash`, "<html> & stuff", "new\nline\r\ttab",
	"\x00\x01\x1f\x7f", "caf\u00e9 \u65e5\u672c", "\u2028 and \u2029", "bad \xff utf8 \xc3",
	"/v1/chat/completions", "ab\x1bc",
}

var hardFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.001, 0.123, 1.5, 123.456, 1e-6, 9.99e-7, 1e-9,
	1e20, 1e21, 1.5e300, -2.5e-8, math.MaxFloat64, math.SmallestNonzeroFloat64}

// TestSameAsJSONHandler: records the fast path takes are written byte
// for byte as slog.JSONHandler writes them, including the access log's.
func TestSameAsJSONHandler(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 3, 4, 567891234, time.FixedZone("X", 3600))
	r := slog.NewRecord(now, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("request_id", "0b6f8c1e-4e1a-4d1a-9a63-8c9b1f1f0e2d"), slog.String("pool", "default/m"),
		slog.String("source", "Header"), slog.String("key_hash", "0123456789abcdef0123456789abcdef"),
		slog.String("decision", "hit"), slog.String("selected_pod", "ns/pod-0"), slog.Bool("retried", true),
		slog.Float64("upstream_header_ms", 0.412), slog.String("method", "POST"), slog.String("path", "/v1/chat/completions"),
		slog.Int("status", 200), slog.String("outcome", "completed"), slog.Int64("bytes", 1234),
		slog.Float64("duration_ms", 1.07), slog.Uint64("u", math.MaxUint64), slog.Int64("neg", math.MinInt64))
	if got, want := both(t, r); got != want {
		t.Fatalf("access log line:\n got %s\nwant %s", got, want)
	}
	for _, s := range hardStrings {
		r := slog.NewRecord(now, slog.LevelWarn, s, 0)
		r.AddAttrs(slog.String(s+"k", s))
		if got, want := both(t, r); got != want {
			t.Errorf("string %q:\n got %s\nwant %s", s, got, want)
		}
	}
	for _, f := range hardFloats {
		r := slog.NewRecord(now.UTC(), slog.LevelError, "f", 0)
		r.AddAttrs(slog.Float64("f", f), slog.Float64("neg", -f))
		if got, want := both(t, r); got != want {
			t.Errorf("float %g:\n got %s\nwant %s", f, got, want)
		}
	}
	many := slog.NewRecord(now, slog.LevelInfo, "more attributes than Handle copies", 0)
	for i := range maxInline + 5 {
		many.AddAttrs(slog.Int(strconv.Itoa(i), i))
	}
	if got, want := both(t, many); got != want {
		t.Errorf("%d attributes:\n got %s\nwant %s", many.NumAttrs(), got, want)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		r := slog.NewRecord(now.Add(time.Duration(rnd.Int64())), slog.Level(rnd.IntN(20)-8), randString(rnd), 0)
		for range rnd.IntN(12) {
			k := randString(rnd) + "k"
			switch rnd.IntN(5) {
			case 0:
				r.AddAttrs(slog.String(k, randString(rnd)))
			case 1:
				r.AddAttrs(slog.Int64(k, rnd.Int64()-rnd.Int64()))
			case 2:
				r.AddAttrs(slog.Bool(k, rnd.IntN(2) == 0))
			case 3:
				r.AddAttrs(slog.Float64(k, math.Float64frombits(rnd.Uint64())))
			case 4:
				r.AddAttrs(slog.Float64(k, float64(rnd.IntN(100000))/1000))
			}
		}
		if got, want := both(t, r); got != want {
			t.Fatalf("random record:\n got %s\nwant %s", got, want)
		}
	}
}

func randString(rnd *rand.Rand) string {
	b := make([]byte, rnd.IntN(12))
	for i := range b {
		b[i] = byte(rnd.IntN(256))
		if rnd.IntN(3) > 0 {
			b[i] = byte('a' + rnd.IntN(26))
		}
	}
	return string(b)
}

// TestFallsBack: records the fast path does not take (other kinds, NaN,
// an empty key, no time) and derived handlers are slog.JSONHandler's.
func TestFallsBack(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 3, 4, 5, time.UTC)
	for name, a := range map[string]slog.Attr{
		"any": slog.Any("a", []int{1}), "error": slog.Any("err", errors.New("x")), "nan": slog.Float64("f", math.NaN()),
		"inf": slog.Float64("f", math.Inf(-1)), "duration": slog.Duration("d", time.Second), "time": slog.Time("t", now),
		"group": slog.Group("g", slog.Int("i", 1)), "empty key": slog.Int("", 0), "empty key, value": slog.Int("", 3),
	} {
		r := slog.NewRecord(now, slog.LevelInfo, "m", 0)
		r.AddAttrs(slog.String("s", "v"), a)
		if got, want := both(t, r); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	r := slog.NewRecord(time.Time{}, slog.LevelInfo, "no time", 0)
	if got, want := both(t, r); got != want {
		t.Errorf("no time:\n got %s\nwant %s", got, want)
	}
	var a, b bytes.Buffer
	slog.New(New(&a, nil)).With("pool", "p").WithGroup("g").Info("m", "k", 1.5)
	slog.New(slog.NewJSONHandler(&b, nil)).With("pool", "p").WithGroup("g").Info("m", "k", 1.5)
	if got, want := stripTime(a.String()), stripTime(b.String()); got != want {
		t.Errorf("derived:\n got %s\nwant %s", got, want)
	}
	a.Reset()
	h := New(&a, &slog.HandlerOptions{Level: slog.LevelWarn})
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelWarn) {
		t.Error("the level option is not honoured")
	}
}

// stripTime drops the time field, which differs between two calls.
func stripTime(s string) string {
	if i := bytes.IndexByte([]byte(s), ','); i > 0 {
		return s[i:]
	}
	return s
}

// FuzzSameAsJSONHandler: any string and float the fast path writes come
// out as slog.JSONHandler writes them.
func FuzzSameAsJSONHandler(f *testing.F) {
	for _, s := range hardStrings {
		f.Add(s, 0.5, int64(1))
	}
	f.Fuzz(func(t *testing.T, s string, fl float64, n int64) {
		r := slog.NewRecord(time.Unix(0, n).UTC(), slog.LevelInfo, s, 0)
		r.AddAttrs(slog.String("k"+s, s), slog.Float64("f", fl), slog.Int64("n", n))
		if got, want := both(t, r); got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAccessLine: the access log's line, with a Handler and with
// slog.JSONHandler.
func BenchmarkAccessLine(b *testing.B) {
	attrs := []slog.Attr{slog.String("request_id", "0b6f8c1e-4e1a-4d1a-9a63-8c9b1f1f0e2d"), slog.String("pool", "default/m"),
		slog.String("source", "Header"), slog.String("key_hash", "0123456789abcdef0123456789abcdef"),
		slog.String("decision", "hit"), slog.String("selected_pod", "ns/pod-0"), slog.Float64("upstream_header_ms", 0.412),
		slog.String("method", "POST"), slog.String("path", "/v1/chat/completions"), slog.Int("status", 200),
		slog.String("outcome", "completed"), slog.Int64("bytes", 1234), slog.Float64("duration_ms", 1.07)}
	for name, h := range map[string]slog.Handler{"logjson": New(discard{}, nil), "slog.JSONHandler": slog.NewJSONHandler(discard{}, nil)} {
		b.Run(name, func(b *testing.B) {
			log := slog.New(h)
			b.ReportAllocs()
			for b.Loop() {
				log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
			}
		})
	}
	// The proxy's way: the line's parts, no record (no attribute slice).
	b.Run("logjson.HandleAttrs", func(b *testing.B) {
		h := New(discard{}, nil)
		b.ReportAllocs()
		for b.Loop() {
			_ = HandleAttrs(context.Background(), h, time.Now(), slog.LevelInfo, "request", attrs)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
