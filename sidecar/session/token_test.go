package session

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/token"
)

// TestTokenSource: a Token source yields only a token its codec
// verifies, with the verified payload; a forged one falls through to the
// next source, and without a codec Token sources never yield.
func TestTokenSource(t *testing.T) {
	codec := token.NewWithKeys("p", []byte("0123456789abcdef0123456789abcdef"), nil, false)
	good := codec.Sign("backend-1", "", time.Unix(1_700_000_000, 0))
	forged := token.NewWithKeys("p", []byte("forged-forged-forged-forged-1234"), nil, false).Sign("backend-2", "", time.Time{})
	srcs := []config.Source{{Type: config.SourceToken, Name: "x-session-token"}, {Type: config.SourceHeader, Name: "x-session-id"}}
	e := NewExtractor(srcs, nil, WithTokens(codec))
	cases := []struct {
		tok, id, key string
		typ          config.SourceType
	}{
		{good, "s1", good, config.SourceToken},
		{forged, "s1", "s1", config.SourceHeader},
		{forged, "", "", ""},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-Session-Token", tc.tok)
		if tc.id != "" {
			r.Header.Set("X-Session-Id", tc.id)
		}
		if k := e.Extract(r); k.Value != tc.key || k.Source != tc.typ {
			t.Errorf("token %q id %q: Extract = %q %q, want %q %q", tc.tok, tc.id, k.Value, k.Source, tc.key, tc.typ)
		}
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-Session-Token", good)
	k := e.Extract(r)
	if want := (token.Payload{Pool: "p", Backend: "backend-1", Since: 1_700_000_000}); k.Token != want {
		t.Fatalf("payload %+v, want %+v", k.Token, want)
	}
	if k := NewExtractor(srcs, nil).Extract(r); k.Value != "" {
		t.Fatalf("Token source without a codec yielded %q", k.Value)
	}
}

// TestPrefillTokenReadBack: a token naming one pod (llm-d's plain
// base64("namespace/name"), accepted with allowUnsigned) gets its prefill
// half from the prefill token header (llm-d's x-session-token-prefill,
// plain or signed); a signed tether token names both halves itself and
// keeps them whatever the prefill header says.
func TestPrefillTokenReadBack(t *testing.T) {
	codec := token.NewWithKeys("p", []byte("0123456789abcdef0123456789abcdef"), nil, true)
	plain := func(name string) string { return base64.StdEncoding.EncodeToString([]byte(name)) }
	e := NewExtractor([]config.Source{{Type: config.SourceToken, Name: "x-session-token"}}, nil, WithTokens(codec))
	cases := []struct {
		name, tok, prefillTok string
		want                  token.Payload
	}{
		{"llm-d tokens for both halves", plain("llm/decode-0"), plain("llm/prefill-1"),
			token.Payload{Pool: "p", Backend: "llm/decode-0", Prefill: "llm/prefill-1"}},
		{"llm-d decode token, signed prefill token", plain("llm/decode-0"), codec.Prefill("llm/prefill-2/uid", time.Time{}),
			token.Payload{Pool: "p", Backend: "llm/decode-0", Prefill: "llm/prefill-2/uid"}},
		{"no prefill token", plain("llm/decode-0"), "",
			token.Payload{Pool: "p", Backend: "llm/decode-0"}},
		{"a prefill token that does not verify", plain("llm/decode-0"), "not base64!",
			token.Payload{Pool: "p", Backend: "llm/decode-0"}},
		{"signed token names its own prefill", codec.Sign("d/uid", "f/uid", time.Time{}), plain("llm/prefill-9"),
			token.Payload{Pool: "p", Backend: "d/uid", Prefill: "f/uid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			r.Header.Set("x-session-token", tc.tok)
			if tc.prefillTok != "" {
				r.Header.Set("X-SESSION-TOKEN-PREFILL", tc.prefillTok) // header names are case-insensitive
			}
			k := e.Extract(r)
			if k.Source != config.SourceToken || k.Token != tc.want {
				t.Fatalf("Extract = %+v, want payload %+v", k, tc.want)
			}
		})
	}
}

// TestTokenCookieSource: with a token cookie the cookie is read back as a
// Token source, after the pool's Token sources and before the rest; a
// cookie that does not verify falls through.
func TestTokenCookieSource(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	codec, err := token.New("p", 5*time.Minute, &config.SessionToken{Header: "x-session-token", PrefillHeader: "x-session-token-prefill", KeyFile: key,
		Cookie: &config.TokenCookie{Name: "tether-session", SameSite: config.SameSiteLax}})
	if err != nil {
		t.Fatal(err)
	}
	byCookie := codec.Sign("by-cookie", "", time.Time{})
	byHeader := codec.Sign("by-header", "", time.Time{})
	req := func(header, cookie, id string) *http.Request {
		r := httptest.NewRequest("POST", "/", nil)
		if header != "" {
			r.Header.Set("x-session-token", header)
		}
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "tether-session", Value: cookie})
		}
		if id != "" {
			r.Header.Set("X-Session-ID", id)
		}
		return r
	}
	withToken := NewExtractor([]config.Source{{Type: config.SourceToken, Name: "x-session-token"}, {Type: config.SourceHeader, Name: "X-Session-ID"}}, nil, WithTokens(codec))
	without := NewExtractor([]config.Source{{Type: config.SourceHeader, Name: "X-Session-ID"}}, nil, WithTokens(codec))
	cases := []struct {
		name        string
		e           *Extractor
		r           *http.Request
		key, target string
	}{
		{"header token first", withToken, req(byHeader, byCookie, "s"), byHeader, "by-header"},
		{"cookie after the header token", withToken, req("", byCookie, "s"), byCookie, "by-cookie"},
		{"cookie before a header key", without, req("", byCookie, "s"), byCookie, "by-cookie"},
		{"forged cookie falls through", without, req("", "forged.token", "s"), "s", ""},
		{"no cookie", without, req("", "", "s"), "s", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.e.Extract(tc.r)
			if k.Value != tc.key || k.Token.Backend != tc.target {
				t.Fatalf("Extract = %+v, want key %q routing to %q", k, tc.key, tc.target)
			}
		})
	}
}

// FuzzTokenExtract: arbitrary token header, prefill header and cookie
// values never panic, and a Token key is one of the request's own token
// values (header or cookie) with a backend to route to.
func FuzzTokenExtract(f *testing.F) {
	dir := f.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		f.Fatal(err)
	}
	codec, err := token.New("p", 5*time.Minute, &config.SessionToken{Header: "x-session-token", PrefillHeader: "x-session-token-prefill", KeyFile: key,
		AllowUnsigned: true, Cookie: &config.TokenCookie{Name: "tether-session", SameSite: config.SameSiteLax}})
	if err != nil {
		f.Fatal(err)
	}
	e := NewExtractor([]config.Source{{Type: config.SourceToken, Name: "x-session-token"}}, nil, WithTokens(codec))
	f.Add(codec.Sign("b", "f", time.Unix(1, 0)), "bGxtL3AtMA==", "tether-session="+codec.Sign("c", "", time.Time{}))
	f.Add("bGxtL2QtMA==", "bGxtL3AtMA==", "")
	f.Add("", "", "tether-session=bGxtL2QtMA==; tether-session=x")
	f.Fuzz(func(t *testing.T, tok, prefill, cookie string) {
		r := &http.Request{Header: http.Header{}}
		r.Header.Set("X-Session-Token", tok)
		r.Header.Set("X-Session-Token-Prefill", prefill)
		r.Header.Set("Cookie", cookie)
		k := e.Extract(r)
		if k.Value == "" {
			return
		}
		if k.Source != config.SourceToken || k.Token.Backend == "" {
			t.Fatalf("key %+v", k)
		}
		from := []string{tok}
		for _, c := range r.CookiesNamed("tether-session") {
			from = append(from, c.Value)
		}
		if !slices.Contains(from, k.Value) {
			t.Fatalf("token key %q is none of the request's values %q", k.Value, from)
		}
	})
}
