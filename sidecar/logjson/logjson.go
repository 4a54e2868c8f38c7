// Package logjson is slog's JSON handler with a fast path for flat
// records: the access log's line, one per request. slog.JSONHandler
// formats every float through encoding/json's reflection (two per access
// line: upstream_header_ms and duration_ms) and walks a handler state
// built for groups and ReplaceAttr; a record of strings, integers,
// booleans and finite floats, written by a handler without attributes,
// groups or options, is formatted here instead, byte for byte as
// slog.JSONHandler would (a test compares the two on random records).
// Anything else goes to the slog.JSONHandler it wraps.
package logjson

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler writes JSON lines, as slog.NewJSONHandler(w, opts) does.
type Handler struct {
	json slog.Handler // the slog.JSONHandler over w, for everything else
	w    *lockedWriter
	fast bool // opts allow the fast path: no ReplaceAttr, no AddSource
}

// lockedWriter serialises the fast path's writes with the JSONHandler's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// New returns a Handler writing to w with opts (nil: defaults).
func New(w io.Writer, opts *slog.HandlerOptions) *Handler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	lw := &lockedWriter{w: w}
	return &Handler{json: slog.NewJSONHandler(lw, opts), w: lw, fast: opts.ReplaceAttr == nil && !opts.AddSource}
}

// Enabled reports whether the level is enabled (the JSONHandler's options).
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.json.Enabled(ctx, l) }

// WithAttrs returns the JSONHandler with attrs: derived loggers take no fast path.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler { return h.json.WithAttrs(attrs) }

// WithGroup returns the JSONHandler with the group.
func (h *Handler) WithGroup(name string) slog.Handler { return h.json.WithGroup(name) }

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooled keeps an occasional huge line's buffer out of the pool.
const maxPooled = 16 << 10

// Handle writes r as one line.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if h.fast && r.NumAttrs() <= maxInline {
		var inline [maxInline]slog.Attr
		attrs := inline[:0]
		r.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a)
			return true
		})
		if ok, err := h.line(r.Time, r.Level, r.Message, attrs); ok {
			return err
		}
	}
	return h.json.Handle(ctx, r)
}

// maxInline is the most attributes Handle copies out of a record for the
// fast path (the access line has about twenty).
const maxInline = 40

// HandleAttrs writes the record of t, level, msg and attrs as one line,
// as Handle would, without the record: a slog.Record holds five
// attributes inline and allocates a slice for the rest, most of a
// kilobyte per access line (AttrsHandler).
func (h *Handler) HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	if h.fast {
		if ok, err := h.line(t, level, msg, attrs); ok {
			return err
		}
	}
	return h.json.Handle(ctx, record(t, level, msg, attrs))
}

// line writes the fast path's line and reports whether it could: a flat
// record (flat), for a handler whose options allow it.
func (h *Handler) line(t time.Time, level slog.Level, msg string, attrs []slog.Attr) (bool, error) {
	if !flat(t, attrs) {
		return false, nil
	}
	bp := buffers.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = t.Round(0).AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":`...)
	b = appendString(b, level.String())
	b = append(b, `,"msg":`...)
	b = appendString(b, msg)
	for _, a := range attrs {
		b = append(b, ',')
		b = appendString(b, a.Key)
		b = append(b, ':')
		b = appendValue(b, a.Value)
	}
	b = append(b, '}', '\n')
	_, err := h.w.Write(b)
	if cap(b) <= maxPooled {
		*bp = b
		buffers.Put(bp)
	}
	return true, err
}

// AttrsHandler is a handler that writes a record given as its parts
// (Handler, and wrappers of one that pass them on), sparing the caller
// a slog.Record.
type AttrsHandler interface {
	HandleAttrs(ctx context.Context, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error
}

// HandleAttrs writes the record of t, level, msg and attrs through h:
// as its parts when h is an AttrsHandler, as a slog.Record otherwise.
func HandleAttrs(ctx context.Context, h slog.Handler, t time.Time, level slog.Level, msg string, attrs []slog.Attr) error {
	if ah, ok := h.(AttrsHandler); ok {
		return ah.HandleAttrs(ctx, t, level, msg, attrs)
	}
	return h.Handle(ctx, record(t, level, msg, attrs))
}

func record(t time.Time, level slog.Level, msg string, attrs []slog.Attr) slog.Record {
	r := slog.NewRecord(t, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

// flat reports whether the fast path formats a record of t and attrs
// exactly as the JSONHandler would: a time it writes as RFC 3339, and
// attributes with a key, of kinds written without reflection (no NaN or
// infinity, which it reports as errors).
func flat(t time.Time, attrs []slog.Attr) bool {
	if y := t.Year(); t.IsZero() || y < 0 || y >= 10000 {
		return false
	}
	for _, a := range attrs {
		switch v := a.Value; v.Kind() {
		case slog.KindString, slog.KindInt64, slog.KindUint64, slog.KindBool:
		case slog.KindFloat64:
			if math.IsNaN(v.Float64()) || math.IsInf(v.Float64(), 0) {
				return false
			}
		default:
			return false
		}
		if a.Key == "" {
			return false
		}
	}
	return true
}

func appendValue(b []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	default: // KindFloat64 (flat let nothing else through)
		return appendFloat(b, v.Float64())
	}
}

// appendFloat formats f as encoding/json does (which slog calls): 'f'
// notation, 'e' below 1e-6 and from 1e21 on, with e-09 shortened to e-9.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a quoted JSON string, escaped as slog's JSON
// handler escapes: ", \ and control characters (\n, \r and \t by
// name), invalid UTF-8 as \ufffd, and U+2028 and U+2029; <, > and & are
// left as they are.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
