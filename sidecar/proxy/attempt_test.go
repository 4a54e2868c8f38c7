package proxy

import (
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/resolve"
)

// FuzzCleanQuery: what reaches a backend parses as a query, and a query
// net/url reads whole passes unchanged.
func FuzzCleanQuery(f *testing.F) {
	for _, q := range []string{"", "a=1&b=2", "a=1;b=2", "a=%zz", "a=%2", "%", "a=%20b&c=d%2Fe", "x", "a=1&a=2;", "é=1"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out := cleanQuery(q)
		if _, err := url.ParseQuery(out); err != nil {
			t.Fatalf("cleanQuery(%q) = %q, which does not parse: %v", q, out, err)
		}
		if _, err := url.ParseQuery(q); err == nil && !strings.Contains(q, ";") && out != q {
			t.Fatalf("cleanQuery(%q) = %q, changed a query that parses", q, out)
		}
	})
}

func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":       {"X-A, x-b", " keep-alive "},
		"X-A":              {"1"},
		"X-B":              {"2"},
		"Keep-Alive":       {"timeout=5"},
		"Te":               {"trailers"},
		"Upgrade":          {"h2c"},
		"Proxy-Connection": {"close"},
		"X-Kept":           {"3"},
	}
	removeHopByHop(h)
	if want := (http.Header{"X-Kept": {"3"}}); !reflect.DeepEqual(h, want) {
		t.Fatalf("left %v, want %v", h, want)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, " text/event-stream ;x=y": true,
		"application/json": false, "": false, "text/event-streams": false,
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v", ct, got)
		}
	}
}

// FuzzForwardable: a backend's listed fields less forwardable's are
// what removeHopByHop and the tokens' Header.Set leave of the same
// fields in a map, value for value.
func FuzzForwardable(f *testing.F) {
	f.Add("Connection", "X-A, keep-alive", "X-A", "1", "X-Session-Token", "forged")
	f.Add("X-B", "1", "Te", "trailers", "x-session-token", "2")
	f.Add("Content-Type", "text/plain", "Proxy-Connection", "close", "Connection", " , x-b ")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2, n3, v3 string) {
		names := []string{n1, n2, n3, "X-B", "Upgrade"}
		values := []string{v1, v2, v3, "b", "h2c"}
		var fields []httphead.Field
		h := http.Header{}
		for i, n := range names {
			n = textproto.CanonicalMIMEHeaderKey(n) // httphead's names are canonical
			fields = append(fields, httphead.Field{Name: n, Value: values[i]})
			h[n] = append(h[n], values[i])
		}
		x := &exchange{d: &resolve.Decision{Tokens: []resolve.Header{{Name: "x-session-token", Value: "t"}}}}
		got := http.Header{}
		for _, f := range x.forwardable(fields) {
			got[f.Name] = append(got[f.Name], f.Value)
		}
		removeHopByHop(h)
		for _, tok := range x.d.Tokens {
			h.Del(tok.Name) // Set's replacing, the token's own value aside
		}
		if len(h) == 0 {
			h = http.Header{}
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("forwardable kept %v, a map keeps %v", got, h)
		}
	})
}

func TestASCIIFold(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"x-session-token", "X-Session-Token", true}, {"X-SESSION-TOKEN", "X-Session-Token", true},
		{"x-session-token", "X-Session-Tokens", false}, {"x_session", "X-Session", false}, {"", "", true},
		{"K", "\u212a", false}, {"@", "`", false},
	} {
		if got := asciiFold(c.a, c.b); got != c.want {
			t.Errorf("asciiFold(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
