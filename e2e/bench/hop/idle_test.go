package hop

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// holdingServerEnv makes the test binary, run as a child, an HTTP server
// that holds heldPerConn resident bytes for every connection it has
// open, and prints its address.
const holdingServerEnv = "HOP_TEST_HOLDING_SERVER"

const heldPerConn = 64 << 10

func TestMain(m *testing.M) {
	if os.Getenv(holdingServerEnv) == "" {
		os.Exit(m.Run())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	var mu sync.Mutex
	held := map[net.Conn][]byte{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[]}`))
		}),
		ConnState: func(c net.Conn, s http.ConnState) {
			mu.Lock()
			defer mu.Unlock()
			switch s {
			case http.StateNew:
				b := bytes.Repeat([]byte{1}, heldPerConn) // touched: resident
				held[c] = b
			case http.StateClosed, http.StateHijacked:
				delete(held, c)
			}
		},
	}
	fmt.Println("listening", ln.Addr())
	os.Exit(func() int { srv.Serve(ln); return 2 }())
}

// TestIdleConnectionsCostWhatTheProxyHolds: a server that holds 64 KiB
// for each open connection reads at least that per idle connection, and
// the table names it.
func TestIdleConnectionsCostWhatTheProxyHolds(t *testing.T) {
	env, err := procs.NewEnv(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.StartEnv("holding", self, []string{holdingServerEnv + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	testkit.Eventually(t, 20*time.Second, "the server's address", func() error {
		var ok bool
		if _, addr, ok = strings.Cut(p.Tail(1), "listening "); !ok {
			return fmt.Errorf("not listening yet (exited: %v)", p.Exited())
		}
		return nil
	})
	o := Options{IdleConns: 100, IdleFor: 200 * time.Millisecond}
	o.setDefaults()
	cost, err := measureIdle(context.Background(), &target{name: HAProxy, url: "http://" + addr, proc: p}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f KiB per connection; RSS %d, %d, %d bytes", cost.PerConn()/1024, cost.RSS0, cost.RSS1, cost.RSS2)
	if per := cost.PerConn(); per < heldPerConn || per > 16*heldPerConn {
		t.Errorf("%.0f bytes per idle connection of a server holding %d for each: want at least that, and not 16 times it", per, heldPerConn)
	}
	// Held through the points: IdleHeld to every proxy but direct.
	o.Proxies, o.IdleHeld = []string{Direct, HAProxy}, 10
	held, err := holdIdle(context.Background(), o, map[string]*target{HAProxy: {name: HAProxy, url: "http://" + addr, proc: p}})
	defer closeAll(held)
	if err != nil || len(held) != 10 {
		t.Fatalf("held %d idle connections, err %v; want 10", len(held), err)
	}
	for _, nc := range held {
		if closedByPeer(nc) {
			t.Fatal("a held idle connection is closed")
		}
	}
	tab := (&Results{Idle: []IdleCost{cost}}).IdleTable()
	if tab == nil || len(tab.Rows) != 1 || tab.Rows[0][0] != Labels[HAProxy] || tab.Rows[0][2] != "1.00×" {
		t.Errorf("the table: %+v", tab)
	}
}

// TestAClosedConnectionIsSeen: closedByPeer tells a connection its peer
// closed from one it keeps open.
func TestAClosedConnectionIsSeen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	}
	kept, _ := dial()
	gone, peer := dial()
	peer.Close()
	testkit.Eventually(t, 5*time.Second, "the close to arrive", func() error {
		if !closedByPeer(gone) {
			return fmt.Errorf("a connection its peer closed reads as open")
		}
		return nil
	})
	if closedByPeer(kept) {
		t.Error("a connection its peer keeps reads as closed")
	}
}
