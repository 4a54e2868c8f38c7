package proxy

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
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
