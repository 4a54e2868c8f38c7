package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/tetherproxy/tether/sidecar/upstream"
)

// errNotDiscovered is the dial guard's refusal. It is wrapped in a dial
// *net.OpError, so a backend that left the set between the decision and
// the dial is retried like one that refused the connection.
var errNotDiscovered = errors.New("address is not a discovered backend")

// idleConnTimeout closes idle upstream connections before the backends
// do: vLLM and SGLang serve with uvicorn, which closes a keep-alive
// connection after 5 s idle. A request written into a connection the
// backend is closing that moment fails before any response byte; closing
// first keeps that race (and the retry elsewhere it would cost a session)
// away, for a new connection now and then on an idle path.
const idleConnTimeout = 4 * time.Second

// maxIdlePerBackend is the keep-alive connections kept per backend:
// enough for many concurrent long streams to a few hosts.
const maxIdlePerBackend = 256

// TransportOptions tune the upstream transport.
type TransportOptions struct {
	// DialTimeout bounds connecting (the first-byte timeout is each
	// attempt's: Pool.FirstByteTimeout or the decision's Timeout).
	DialTimeout time.Duration
	// StreamIdleTimeout bounds each wait for a backend to take a byte of
	// a request or send one of a response body (upstream's; NewUpstream
	// only).
	StreamIdleTimeout time.Duration
	// Allowed reports whether host:port belongs to a discovered backend.
	// The transport dials nothing else, whatever a request says.
	Allowed func(addr string) bool
}

// dial connects to allowed addresses only.
func (o TransportOptions) dial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if o.Allowed != nil && !o.Allowed(addr) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errNotDiscovered}
		}
		return d.DialContext(ctx, network, addr)
	}
}

// NewUpstream returns the transport of a pool's requests to its model
// servers: package upstream's round trips on the handler's goroutine,
// keep-alive pools per backend, and the dial guard.
func NewUpstream(o TransportOptions) *upstream.Transport {
	return upstream.New(upstream.Options{
		Dial:              o.dial(),
		MaxIdlePerHost:    maxIdlePerBackend,
		IdleTimeout:       idleConnTimeout,
		StreamIdleTimeout: o.StreamIdleTimeout,
	})
}

// NewTransport returns net/http's transport with the same dial guard and
// idle limits, for the sidecar's other requests to backends (health
// checks, load scrapes): no proxy from the environment, no compression
// negotiation.
func NewTransport(o TransportOptions) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           o.dial(),
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   maxIdlePerBackend,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}
