package session

import (
	"net/http/httptest"
	"testing"

	"github.com/tetherproxy/tether/sidecar/config"
)

type okTokens map[string]bool

func (o okTokens) Valid(tok string) bool { return o[tok] }

// TestTokenSource: a Token source yields only a token its checker
// accepts; a forged one falls through to the next source, and without a
// checker Token sources never yield.
func TestTokenSource(t *testing.T) {
	srcs := []config.Source{{Type: config.SourceToken, Name: "x-session-token"}, {Type: config.SourceHeader, Name: "x-session-id"}}
	e := NewExtractor(srcs, nil, WithTokens(okTokens{"good": true}))
	cases := []struct{ tok, id, key, typ string }{
		{"good", "s1", "good", config.SourceToken},
		{"forged", "s1", "s1", config.SourceHeader},
		{"forged", "", "", ""},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-Session-Token", tc.tok)
		if tc.id != "" {
			r.Header.Set("X-Session-Id", tc.id)
		}
		if k, typ := e.Extract(r); k != tc.key || typ != tc.typ {
			t.Errorf("token %q id %q: Extract = %q %q, want %q %q", tc.tok, tc.id, k, typ, tc.key, tc.typ)
		}
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-Session-Token", "good")
	if k, _ := NewExtractor(srcs, nil).Extract(r); k != "" {
		t.Fatalf("Token source without a checker yielded %q", k)
	}
}
