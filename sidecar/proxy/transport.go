package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// errNotDiscovered is the dial guard's refusal. It is wrapped in a dial
// *net.OpError, so a backend that left the set between the decision and
// the dial is retried like one that refused the connection.
var errNotDiscovered = errors.New("address is not a discovered backend")

// TransportOptions tune the upstream transport.
type TransportOptions struct {
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	// Allowed reports whether host:port belongs to a discovered backend.
	// The transport dials nothing else, whatever a request says.
	Allowed func(addr string) bool
}

// NewTransport returns the transport to model servers: keep-alive pools
// sized for many concurrent long streams to a few hosts, no proxy from the
// environment, no compression negotiation (SSE must not be buffered by a
// gzip layer), and a dial guard.
func NewTransport(o TransportOptions) *http.Transport {
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if o.Allowed != nil && !o.Allowed(addr) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: errNotDiscovered}
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// isDialError reports whether err happened before the request reached a
// backend, so retrying it elsewhere cannot run it twice.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
