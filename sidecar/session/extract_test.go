package session

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/config"
)

// sources parses "Header:X-Session-ID,Query:sid" (the annotation syntax)
// into a source list; test input only.
func sources(spec string) []config.Source {
	var out []config.Source
	for _, s := range strings.Split(spec, ",") {
		typ, name, _ := strings.Cut(s, ":")
		out = append(out, config.Source{Type: config.SourceType(typ), Name: name})
	}
	return out
}

// request parses a raw HTTP/1.1 request head, so tests see exactly what
// the server hands a handler (canonical header keys, repeated headers).
func request(t testing.TB, target string, headers ...string) *http.Request {
	t.Helper()
	raw := "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + strings.Join(headers, "\r\n")
	if len(headers) > 0 {
		raw += "\r\n"
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
	if err != nil {
		t.Fatalf("ReadRequest: %v", err)
	}
	return r
}

// fakeClaims is a ClaimReader that accepts tokens "valid-*" and has the
// claims given; it counts verifications.
type fakeClaims struct {
	claims map[string]string
	calls  int
}

func (f *fakeClaims) Claim(token, name string) (string, bool) {
	f.calls++
	if !strings.HasPrefix(token, "valid-") {
		return "", false
	}
	v, ok := f.claims[name]
	return v, ok && v != ""
}

// fakeMulti adds the one-verification extension.
type fakeMulti struct{ fakeClaims }

func (f *fakeMulti) Claims(token string, names []string) ([]string, bool) {
	f.calls++
	if !strings.HasPrefix(token, "valid-") {
		return nil, false
	}
	vals := make([]string, len(names))
	ok := false
	for i, n := range names {
		if vals[i] = f.claims[n]; vals[i] != "" {
			ok = true
		}
	}
	return vals, ok
}

func TestExtract(t *testing.T) {
	long := strings.Repeat("k", MaxKeyBytes)
	all := "Header:X-Session-ID,Query:session_id,Cookie:session_sid,JWTClaim:sub"
	cases := []struct {
		name     string
		sources  string
		target   string
		headers  []string
		wantKey  string
		wantType string
	}{
		// Order: the first non-empty source wins, whatever else is present.
		{"header first", all, "/?session_id=q", []string{"X-Session-ID: h", "Cookie: session_sid=c", "Authorization: Bearer valid-1"}, "h", "Header"},
		{"query second", all, "/?session_id=q", []string{"Cookie: session_sid=c", "Authorization: Bearer valid-1"}, "q", "Query"},
		{"cookie third", all, "/", []string{"Cookie: session_sid=c", "Authorization: Bearer valid-1"}, "c", "Cookie"},
		{"jwt fourth", all, "/", []string{"Authorization: Bearer valid-1"}, "user-1", "JWTClaim"},
		{"order is the config's", "Cookie:session_sid,Query:session_id,Header:X-Session-ID", "/?session_id=q", []string{"X-Session-ID: h", "Cookie: session_sid=c"}, "c", "Cookie"},
		{"nothing", all, "/?other=1", []string{"X-Other: 1", "Cookie: other=1"}, "", ""},
		{"no headers at all", all, "/", nil, "", ""},

		// Header: name case-insensitive, first value, empty is absent.
		{"header name case", "Header:x-session-id", "/", []string{"X-SESSION-ID: h"}, "h", "Header"},
		{"header name case in config", "Header:X-SESSION-ID", "/", []string{"x-session-id: h"}, "h", "Header"},
		{"header repeated: first value", "Header:X-Session-ID", "/", []string{"X-Session-ID: first", "X-Session-ID: second"}, "first", "Header"},
		{"header list value kept whole", "Header:X-Session-ID", "/", []string{"X-Session-ID: a, b"}, "a, b", "Header"},
		{"header empty falls through", "Header:X-Session-ID,Query:s", "/?s=q", []string{"X-Session-ID: "}, "q", "Query"},
		{"header first value empty", "Header:X-Session-ID,Query:s", "/?s=q", []string{"X-Session-ID:", "X-Session-ID: later"}, "q", "Query"},
		{"header value trimmed by HTTP", "Header:X-Session-ID", "/", []string{"X-Session-ID:   h  "}, "h", "Header"},
		{"header underscore name", "Header:x_session", "/", []string{"X_Session: h"}, "h", "Header"},

		// Query: exact name, first value, decoded, malformed pairs skipped.
		{"query", "Query:session_id", "/v1/chat?session_id=abc", nil, "abc", "Query"},
		{"query name is exact", "Query:session_id", "/?Session_ID=abc", nil, "", ""},
		{"query duplicates: first", "Query:s", "/?s=one&s=two", nil, "one", "Query"},
		{"query empty falls through", "Query:s,Header:X-S", "/?s=", []string{"X-S: h"}, "h", "Header"},
		{"query name without value", "Query:s,Header:X-S", "/?s", []string{"X-S: h"}, "h", "Header"},
		{"query decoded", "Query:s", "/?s=a%20b+c%2Fd", nil, "a b c/d", "Query"},
		{"query malformed pair skipped", "Query:s", "/?%zz=1&s=ok&x=%", nil, "ok", "Query"},
		{"query malformed value absent", "Query:s", "/?s=%zz", nil, "", ""},
		{"query semicolon is not a separator", "Query:s", "/?a=1;s=x", nil, "", ""},
		{"query encoded name", "Query:session id", "/?session%20id=x", nil, "x", "Query"},

		// Cookie: exact, case-sensitive name, first of the name.
		{"cookie among others", "Cookie:session_sid", "/", []string{"Cookie: a=1; session_sid=xyz; b=2"}, "xyz", "Cookie"},
		{"cookie name is case-sensitive", "Cookie:session_sid", "/", []string{"Cookie: Session_Sid=xyz"}, "", ""},
		{"cookie same name twice: first", "Cookie:sid", "/", []string{"Cookie: sid=one; sid=two"}, "one", "Cookie"},
		{"cookie across Cookie headers: first", "Cookie:sid", "/", []string{"Cookie: a=1", "Cookie: sid=one", "Cookie: sid=two"}, "one", "Cookie"},
		{"cookie quoted value", "Cookie:sid", "/", []string{`Cookie: sid="abc"`}, "abc", "Cookie"},
		{"cookie empty falls through", "Cookie:sid,Query:s", "/?s=q", []string{"Cookie: sid="}, "q", "Query"},
		{"cookie invalid value dropped", "Cookie:sid,Query:s", "/?s=q", []string{`Cookie: sid=a"b`}, "q", "Query"},

		// JWTClaim: Bearer scheme case-insensitive, verified tokens only.
		{"bearer lower case", "JWTClaim:sub", "/", []string{"Authorization: bearer valid-1"}, "user-1", "JWTClaim"},
		{"bearer upper case", "JWTClaim:sub", "/", []string{"Authorization: BEARER valid-1"}, "user-1", "JWTClaim"},
		{"bearer extra spaces", "JWTClaim:sub", "/", []string{"Authorization: Bearer    valid-1"}, "user-1", "JWTClaim"},
		{"basic auth is not a token", "JWTClaim:sub,Query:s", "/?s=q", []string{"Authorization: Basic dXNlcjpwYXNz"}, "q", "Query"},
		{"bearer without token", "JWTClaim:sub,Query:s", "/?s=q", []string{"Authorization: Bearer"}, "q", "Query"},
		{"invalid token falls through", "JWTClaim:sub,Query:s", "/?s=q", []string{"Authorization: Bearer forged"}, "q", "Query"},
		{"missing claim falls through", "JWTClaim:email,Query:s", "/?s=q", []string{"Authorization: Bearer valid-1"}, "q", "Query"},
		{"second claim", "JWTClaim:email,JWTClaim:tenant", "/", []string{"Authorization: Bearer valid-1"}, "t1", "JWTClaim"},
		{"claim between other sources", "JWTClaim:email,Header:X-S,JWTClaim:sub", "/", []string{"Authorization: Bearer valid-1"}, "user-1", "JWTClaim"},
		{"header between claims wins", "JWTClaim:email,Header:X-S,JWTClaim:sub", "/", []string{"Authorization: Bearer valid-1", "X-S: h"}, "h", "Header"},
		{"first Authorization header only", "JWTClaim:sub", "/", []string{"Authorization: Bearer forged", "Authorization: Bearer valid-1"}, "", ""},

		// Length bound.
		{"longest key", "Header:X-S", "/", []string{"X-S: " + long}, long, "Header"},
		{"too long falls through", "Header:X-S,Query:s", "/?s=q", []string{"X-S: " + long + "k"}, "q", "Query"},

		// A type config.Validate rejects never matches.
		{"unknown type ignored", "Heder:X-S,Query:s", "/?s=q", []string{"X-S: h"}, "q", "Query"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, reader := range []ClaimReader{
				&fakeClaims{claims: map[string]string{"sub": "user-1", "tenant": "t1"}},
				&fakeMulti{fakeClaims{claims: map[string]string{"sub": "user-1", "tenant": "t1"}}},
			} {
				e := NewExtractor(sources(tc.sources), reader)
				k := e.Extract(request(t, tc.target, tc.headers...))
				key, typ := k.Value, string(k.Source)
				if key != tc.wantKey || typ != tc.wantType {
					t.Fatalf("%T: Extract = %.40q, %q; want %.40q, %q", reader, key, typ, tc.wantKey, tc.wantType)
				}
			}
		})
	}
}

func TestExtractNoClaimReader(t *testing.T) {
	e := NewExtractor(sources("JWTClaim:sub,Query:s"), nil)
	k := e.Extract(request(t, "/?s=q", "Authorization: Bearer valid-1"))
	key, typ := k.Value, k.Source
	if key != "q" || typ != "Query" {
		t.Fatalf("Extract = %q, %q; want the next source", key, typ)
	}
}

// TestExtractVerifiesOnce: several JWTClaim sources cost one verification
// with a MultiClaimReader, and none when an earlier source wins.
func TestExtractVerifiesOnce(t *testing.T) {
	m := &fakeMulti{fakeClaims{claims: map[string]string{"tenant": "t1"}}}
	e := NewExtractor(sources("JWTClaim:a,JWTClaim:b,JWTClaim:c,JWTClaim:tenant"), m)
	if key := e.Extract(request(t, "/", "Authorization: Bearer valid-1")).Value; key != "t1" || m.calls != 1 {
		t.Fatalf("key %q after %d verifications, want t1 after 1", key, m.calls)
	}
	m.calls = 0
	e.Extract(request(t, "/", "Authorization: Bearer forged"))
	if m.calls != 1 {
		t.Fatalf("invalid token verified %d times, want 1", m.calls)
	}
	m.calls = 0
	e = NewExtractor(sources("Header:X-S,JWTClaim:tenant"), m)
	e.Extract(request(t, "/", "X-S: h", "Authorization: Bearer valid-1"))
	if m.calls != 0 {
		t.Fatalf("token verified %d times though a header won", m.calls)
	}
	// A plain ClaimReader is asked lazily, source by source.
	p := &fakeClaims{claims: map[string]string{"a": "x"}}
	e = NewExtractor(sources("JWTClaim:a,JWTClaim:b"), p)
	if key := e.Extract(request(t, "/", "Authorization: Bearer valid-1")).Value; key != "x" || p.calls != 1 {
		t.Fatalf("key %q after %d calls, want x after 1", key, p.calls)
	}
}

// TestExtractNoQueryParse: without a Query source the query is not parsed
// (a request with a huge query costs nothing extra).
func TestExtractNoQueryParse(t *testing.T) {
	r := request(t, "/?s=q")
	r.URL = nil // would panic if a Header-only extractor touched it
	if key := NewExtractor(sources("Header:X-S"), nil).Extract(r).Value; key != "" {
		t.Fatalf("key %q", key)
	}
	if key := NewExtractor(sources("Query:s"), nil).Extract(r).Value; key != "" {
		t.Fatalf("key %q from a request without URL", key)
	}
}

func BenchmarkExtract(b *testing.B) {
	for _, bc := range []struct{ name, sources, target, header string }{
		{"header", "Header:X-Session-ID,Query:session_id,Cookie:sid", "/v1/chat/completions", "X-Session-ID: 0123456789abcdef"},
		{"query", "Header:X-Session-ID,Query:session_id,Cookie:sid", "/v1/chat/completions?session_id=0123456789abcdef", "X-Other: 1"},
		{"cookie", "Header:X-Session-ID,Query:session_id,Cookie:sid", "/v1/chat/completions", "Cookie: a=1; b=2; sid=0123456789abcdef"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := NewExtractor(sources(bc.sources), nil)
			r := request(b, bc.target, bc.header)
			b.ReportAllocs()
			for b.Loop() {
				if k := e.Extract(r); k.Value == "" {
					b.Fatal("no key")
				}
			}
		})
	}
}
