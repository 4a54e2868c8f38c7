package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestShutdownDrains pins the order of a graceful stop: /readyz turns 503
// at once while the admin listener still answers, the data listener takes
// no new connection, a stream in flight runs to its end, and only then
// does Run return (and the store close).
func TestShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	sc := startSidecar(t, configFor("default/m", []string{heldStream(t, release)},
		`[{type: Header, name: X-Session-ID}]`, "proxy: {shutdownTimeout: 20s}"))

	resp, err := http.Post(sc.url("default/m", "/v1/chat/completions"), "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, err := stream.ReadString('\n'); err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first event: %q %v", line, err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- sc.stop() }()
	testkit.Eventually(t, 10*time.Second, "/readyz 503 while draining", func() bool {
		r, err := http.Get(sc.admin("/readyz"))
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusServiceUnavailable
	})
	testkit.Eventually(t, 10*time.Second, "the data listener closed", func() bool {
		c, err := net.Dial("tcp", sc.srv.PoolAddr("default/m"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with a stream in flight", err)
	default:
	}

	close(release)
	rest, err := io.ReadAll(stream)
	if err != nil || !strings.Contains(string(rest), "second") || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream was cut: %q %v", rest, err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
