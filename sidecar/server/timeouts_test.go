package server

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/downstream"
)

// Every listener has a header and an idle timeout, and the admin and debug
// listeners a read and a write timeout too: a client that opens
// connections and sends nothing (or stops half way) cannot hold them.
// The proxy listeners have no total read or write timeout on purpose (a
// body arrives under proxy.bodyReadTimeout, a stream runs as long as the
// model generates), but a write waits for the client at most
// proxy.streamIdleTimeout.
func TestEveryListenerHasTimeouts(t *testing.T) {
	cfg, err := config.Parse([]byte(`
listen: 127.0.0.1:0
admin: 0.0.0.0:0
debug: 127.0.0.1:0
pools:
  - {name: a, sessionSticky: {sources: [{type: Header, name: X}]}, backends: {static: ["127.0.0.1:1"]}}
  - {name: b, listen: "127.0.0.1:9", sessionSticky: {sources: [{type: Header, name: X}]}, backends: {static: ["127.0.0.1:2"]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.debug == nil || len(s.listeners) != 2 {
		t.Fatalf("want a debug listener and two proxy listeners, got debug %v and %d", s.debug != nil, len(s.listeners))
	}
	for _, l := range s.all() {
		switch srv := l.srv.(type) {
		case *http.Server:
			if l != s.admin && l != s.debug {
				t.Errorf("%s: a proxy listener on net/http's server", l.addr)
			}
			if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 {
				t.Errorf("%s: header timeout %s, idle timeout %s, read timeout %s, write timeout %s",
					l.addr, srv.ReadHeaderTimeout, srv.IdleTimeout, srv.ReadTimeout, srv.WriteTimeout)
			}
		case *downstream.Server:
			if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteIdleTimeout != config.DefaultStreamIdleTimeout {
				t.Errorf("%s: header timeout %s, idle timeout %s, write idle timeout %s", l.addr, srv.ReadHeaderTimeout, srv.IdleTimeout, srv.WriteIdleTimeout)
			}
		default:
			t.Errorf("%s: served by %T", l.addr, srv)
		}
	}
}
