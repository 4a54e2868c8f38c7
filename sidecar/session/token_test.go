package session

import (
	"net/http/httptest"
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
