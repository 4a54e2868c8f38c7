package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/downstream"
	"github.com/tetherproxy/tether/sidecar/gcfloor"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/threads"
	"github.com/tetherproxy/tether/sidecar/upstream"
)

// layerproxyMain serves tether's per-request work (tetherWork, as
// minproxy -work does) on tether's own server and transport, packages
// downstream and upstream, until stopped: net/http's request and
// response objects with their header maps, the server's connection loop
// and the transport's keep-alive pools, and the sidecar's thread and
// collector rules (packages threads and gcfloor), as the sidecar had
// them until it read requests as lists of fields (its listeners'
// ListRequests; this proxy on them is the lean path plan's last slice,
// docs/hop-cost.md "A lean data path"); but not the sidecar's handler (package proxy: its exchange,
// limits, retries, timers, header rewriting and field-wise response
// writing). Section 1 measures it between the minimal proxy doing the
// same work and tether (`bench hop -proxies go-layers-work`), which
// splits what tether's data path costs beyond the work into its two
// halves: the server and transport (this proxy less the minimal one)
// and the handler (tether less this proxy). docs/hop-cost.md, "Where
// the shape's cost lies".
func layerproxyMain(ctx context.Context, args []string) error {
	return runLayerproxy(ctx, args, os.Stderr)
}

// runLayerproxy is layerproxyMain with its access log (-work log, the
// default) written to logTo.
func runLayerproxy(ctx context.Context, args []string, logTo io.Writer) error {
	work := "log"
	ln, backends, err := listenFor("layerproxy", args, func(fs *flag.FlagSet) {
		workFlag(fs, &work, "tether's per-request work (default log)")
	})
	if err != nil {
		return err
	}
	p := &layerProxy{
		work: newTetherWork(backends, work == "log", logTo),
		// The sidecar's transport, as each pool has it (dial timeout
		// aside, the sidecar's default).
		transport: proxy.NewUpstream(proxy.TransportOptions{DialTimeout: 5 * time.Second}),
	}
	defer p.work.close()
	defer p.transport.CloseIdleConnections()
	// The sidecar's listener settings.
	srv := &downstream.Server{Handler: p, ReadHeaderTimeout: server.ProxyHeaderTimeout, IdleTimeout: server.ProxyIdleTimeout}
	// The sidecar's runtime rules (sidecar/main.go): its thread count
	// and its collector's floor, so that what differs from tether is the
	// handler alone.
	go threads.Run(ctx, threads.Options{Max: runtime.GOMAXPROCS(0)})
	go gcfloor.Run(ctx, gcfloor.Options{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// layerProxy is the handler: tether's work around one round trip.
type layerProxy struct {
	work      *tetherWork
	transport *upstream.Transport
}

// layerFirstByte bounds the wait for a backend's response headers, as
// the sidecar's first-byte timeout does (by a read deadline, upstream's
// RoundTripHeaderTimeout).
const layerFirstByte = 30 * time.Second

// hopByHop are the response fields a proxy does not forward (those the
// bench's backends send).
var hopByHop = []string{"Connection", "Keep-Alive"}

func (p *layerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sess := r.Header["X-Session-Id"]
	var key []byte
	if len(sess) > 0 {
		key = []byte(sess[0])
	}
	rw := p.work.begin(r.Context(), key)
	status := http.StatusBadGateway
	defer func() {
		var method, path string
		if p.work.logs() {
			method, path = r.Method, r.URL.Path
		}
		p.work.end(rw, method, path, status)
	}()
	out := r.WithContext(rw.ctx)
	u := *r.URL
	u.Scheme, u.Host = "http", p.work.backends[rw.backend]
	out.URL, out.Host, out.RequestURI = &u, u.Host, ""
	resp, err := p.transport.RoundTripHeaderTimeout(out, layerFirstByte)
	if err != nil {
		w.WriteHeader(status)
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
	status = resp.StatusCode
	w.WriteHeader(status)
	buf := layerBuffers.Get().(*[]byte)
	defer layerBuffers.Put(buf)
	for {
		n, err := resp.Body.Read(*buf)
		if n > 0 {
			rw.scan((*buf)[:n])
			if _, werr := w.Write((*buf)[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// layerBuffers are the response copy's buffers (the sidecar's size).
var layerBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
