package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a part that notes when it stops.
type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) part(name string) Part {
	return Part{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		r.mu.Lock()
		r.stopped = append(r.stopped, name)
		r.mu.Unlock()
		return ctx.Err() // a stopped part's Canceled is no failure
	}}
}

// TestStopsGroupsInReverse: the last group stops first, and a group stops
// only after the one after it has returned; stopping runs before any.
func TestStopsGroupsInReverse(t *testing.T) {
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, func() { r.stopped = append(r.stopped, "stopping") },
		Group{r.part("discovery")}, Group{r.part("admin")}, Group{r.part("listener")})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := strings.Join(r.stopped, ","); got != "stopping,listener,admin,discovery" {
		t.Fatalf("stop order %s", got)
	}
}

// TestFailureStopsTheOthers: a failing part stops every other part, and
// its error, named, is Run's.
func TestFailureStopsTheOthers(t *testing.T) {
	r := &recorder{}
	boom := errors.New("boom")
	err := Run(context.Background(), nil,
		Group{r.part("a"), {Name: "broken", Run: func(context.Context) error { return boom }}},
		Group{r.part("b"), {Name: "done early", Run: func(context.Context) error { return nil }}})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "broken: ") {
		t.Fatalf("Run = %v, want broken: boom", err)
	}
	if got := strings.Join(r.stopped, ","); got != "b,a" {
		t.Fatalf("stopped %s, want b,a", got)
	}
}

// TestHTTPServerDrains: a stopped server finishes the request in flight,
// refuses new connections, and closes what outlives the drain.
func TestHTTPServerDrains(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drain  time.Duration
		finish bool // the in-flight request completes
	}{
		{"drained", 10 * time.Second, true},
		{"drain too short", 50 * time.Millisecond, false},
		{"no drain", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-release:
				case <-r.Context().Done():
				}
				w.Write([]byte("done"))
			})}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() {
				ran <- Run(ctx, nil, Group{HTTPServer("test", srv, func() error { return srv.Serve(ln) }, tc.drain, slog.New(slog.DiscardHandler))})
			}()
			got := make(chan string, 1)
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			go func() {
				resp, err := client.Get("http://" + ln.Addr().String())
				if err != nil {
					got <- "error"
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got <- string(b)
			}()
			<-entered
			cancel()
			if tc.finish {
				// Stopped: no new connection is accepted while the request drains.
				testkit.Eventually(t, 10*time.Second, "the listener closed while draining", func() bool {
					c, err := net.Dial("tcp", ln.Addr().String())
					if err == nil {
						c.Close()
					}
					return err != nil
				})
				close(release)
				if b := <-got; b != "done" {
					t.Fatalf("in-flight request got %q, want done", b)
				}
			} else {
				if b := <-got; b == "done" {
					t.Fatal("the request outlived the drain")
				}
				close(release)
			}
			if err := <-ran; err != nil {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}
