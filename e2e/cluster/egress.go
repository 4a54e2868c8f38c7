package cluster

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
)

// egressGuard keeps the kube-apiserver from reaching anything outside
// loopback. A webhook configured with a Service reference
// (name.namespace.svc) makes the API server resolve and dial that name —
// and a resolver outside the test may answer it. The apiserver's clients
// (webhooks included) honour HTTPS_PROXY, so the guard is a local
// "proxy" that refuses every CONNECT, records its target, and fails the
// test at cleanup. Loopback stays direct through NO_PROXY.
type egressGuard struct {
	ln       net.Listener
	mu       sync.Mutex
	attempts []string
	wg       sync.WaitGroup
}

func newEgressGuard() (*egressGuard, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &egressGuard{ln: ln}
	g.wg.Add(1)
	go g.serve()
	return g, nil
}

func (g *egressGuard) serve() {
	defer g.wg.Done()
	for {
		conn, err := g.ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		g.mu.Lock()
		g.attempts = append(g.attempts, strings.TrimSpace(line))
		g.mu.Unlock()
		conn.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"))
		conn.Close()
	}
}

// env is what the apiserver process gets so that only loopback is direct.
func (g *egressGuard) env() []string {
	proxy := "http://" + g.ln.Addr().String()
	noProxy := "127.0.0.0/8,localhost,::1"
	return []string{
		"HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"HTTP_PROXY=" + proxy, "http_proxy=" + proxy,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}

// Attempts are the refused requests ("CONNECT host:port HTTP/1.1").
func (g *egressGuard) Attempts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.attempts...)
}

func (g *egressGuard) close() {
	g.ln.Close()
	g.wg.Wait()
}

// check fails t if the apiserver tried to leave loopback, unless the test
// expected it (AllowEgressAttempts).
func (c *Cluster) checkEgress(t testing.TB) {
	if a := c.egress.Attempts(); len(a) > 0 && !c.egressExpected {
		t.Errorf("kube-apiserver tried to reach outside loopback (refused by the harness): %q — a webhook or API service points at a Service name; use a URL client config on 127.0.0.1", a)
	}
}

// EgressAttempts are the requests the apiserver tried to send outside
// loopback, all refused by the harness.
func (c *Cluster) EgressAttempts() []string { return c.egress.Attempts() }

// AllowEgressAttempts is for the test that proves the guard works: its
// refused attempts do not fail it.
func (c *Cluster) AllowEgressAttempts() { c.egressExpected = true }
