// Package reqbody carries a request's buffered body from the proxy to the
// parts that route by fields of it: the choice of pool by "model",
// session keys from Body sources, and the Responses API's
// previous_response_id and store. The fields a listener reads are known
// when it is built (Fields); a request's body is scanned for all of them
// at once, on first use, and never when nothing asks.
package reqbody

import (
	"context"
	"sync"

	"github.com/tetherproxy/tether/sidecar/jsonscan"
)

// MaxValueBytes bounds a string read from a body: longer strings are
// absent. It equals session.MaxKeyBytes, the bound of every key source.
const MaxValueBytes = 4096

// Fields are the body paths one listener reads. Immutable; nil reads none.
type Fields struct{ paths *jsonscan.Paths }

// NewFields compiles paths (jsonscan.ValidatePath; duplicates are fine).
func NewFields(paths ...string) (*Fields, error) {
	p, err := jsonscan.Compile(paths...)
	if err != nil {
		return nil, err
	}
	return &Fields{paths: p}, nil
}

// Body is one request's body. Not safe for concurrent use: it lives in
// the goroutine that serves the request.
type Body struct {
	f       *Fields
	raw     []byte
	s       *jsonscan.Scanner
	scanned bool
	// others are the values of paths the listener was not built with,
	// each scanned once.
	others map[string]jsonscan.Value
}

// Of returns raw as a Body whose fields are scanned when first read.
func (f *Fields) Of(raw []byte) *Body {
	b := new(Body)
	b.Reset(f, raw)
	return b
}

// Reset makes b what f.Of(raw) returns, for a caller that keeps a Body
// in a request's own state (one allocation a request spared).
func (b *Body) Reset(f *Fields, raw []byte) { *b = Body{f: f, raw: raw} }

func (b *Body) scan() *jsonscan.Scanner {
	if !b.scanned {
		b.scanned = true
		if b.f != nil && b.f.paths.Len() > 0 {
			b.s = b.f.paths.Scan(b.raw, MaxValueBytes)
		}
	}
	return b.s
}

// Value is the body's value at path: Absent when the body does not hold
// one, is not a JSON object, or b is nil. The listener's fields come from
// its one scan; any other path (a Body source of a ModelServer, which
// arrives while the sidecar runs) is read by a scan of its own.
func (b *Body) Value(path string) jsonscan.Value {
	if b == nil {
		return jsonscan.Value{}
	}
	if b.f != nil {
		if i := b.f.paths.Index(path); i >= 0 {
			s := b.scan()
			if s == nil || !s.IsObject() {
				return jsonscan.Value{}
			}
			return s.Value(i)
		}
	}
	if v, ok := b.others[path]; ok {
		return v
	}
	var v jsonscan.Value
	if p := compiled(path); p != nil {
		if s := p.Scan(b.raw, MaxValueBytes); s.IsObject() {
			v = s.Value(0)
		}
	}
	if b.others == nil {
		b.others = make(map[string]jsonscan.Value, 1)
	}
	b.others[path] = v
	return v
}

// maxCompiled bounds the cache of single paths compiled for Value. The
// paths come from ModelServer objects (a handful per pool); past the
// bound a path is compiled on every use.
const maxCompiled = 256

var (
	compiledMu    sync.Mutex
	compiledPaths = map[string]*jsonscan.Paths{} // nil: not a valid path
)

// compiled returns path compiled alone, or nil when it is not a valid
// path.
func compiled(path string) *jsonscan.Paths {
	compiledMu.Lock()
	defer compiledMu.Unlock()
	if p, ok := compiledPaths[path]; ok {
		return p
	}
	p, err := jsonscan.Compile(path)
	if err != nil {
		p = nil
	}
	if len(compiledPaths) < maxCompiled {
		compiledPaths[path] = p
	}
	return p
}

// String is the string at path, if the body holds one within MaxValueBytes.
func (b *Body) String(path string) (string, bool) {
	v := b.Value(path)
	return v.Str, v.Kind == jsonscan.String && !v.TooLong
}

// IsObject reports whether the body is a valid JSON object. It scans
// the body (when the listener reads any field) but is false for a nil b.
func (b *Body) IsObject() bool {
	if b == nil {
		return false
	}
	s := b.scan()
	return s != nil && s.IsObject()
}

// ContextKey is the key a context carries a Body under. NewContext
// makes such a context; a context type of the caller's own may answer
// the key itself (the proxy's exchange does, saving a context per
// request).
type ContextKey struct{}

// NewContext returns ctx carrying b.
func NewContext(ctx context.Context, b *Body) context.Context {
	return context.WithValue(ctx, ContextKey{}, b)
}

// FromContext returns the Body ctx carries, or nil (whose reads yield nothing).
func FromContext(ctx context.Context) *Body {
	b, _ := ctx.Value(ContextKey{}).(*Body)
	return b
}

// Len is the body's size in bytes; 0 for a nil Body.
func (b *Body) Len() int {
	if b == nil {
		return 0
	}
	return len(b.raw)
}
