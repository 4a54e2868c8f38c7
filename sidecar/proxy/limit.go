package proxy

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Limit serves at most max requests of h at once, request bodies being
// read included: beyond it a request is answered 503 with Retry-After at
// once, so a flood of connections cannot hold more request bodies, and
// more memory, than the listener was sized for. active follows the
// requests being served; shed counts the ones refused (both may be nil).
func Limit(h http.Handler, max int, active prometheus.Gauge, shed prometheus.Counter) http.Handler {
	return &limiter{h: h, max: int64(max), active: active, shed: shed}
}

type limiter struct {
	h      http.Handler
	max    int64
	n      atomic.Int64
	active prometheus.Gauge
	shed   prometheus.Counter
}

func (l *limiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		if l.shed != nil {
			l.shed.Inc()
		}
		w.Header().Set("Retry-After", "1")
		// The body is not read: closing the connection spares reading it.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusServiceUnavailable, "too many concurrent requests on this listener (proxy.maxConcurrentRequests)")
		return
	}
	if l.active != nil {
		l.active.Inc()
		defer l.active.Dec()
	}
	defer l.n.Add(-1)
	l.h.ServeHTTP(w, r)
}
