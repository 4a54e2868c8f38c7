package sim

import (
	"fmt"
	"io"
	"net"
	"net/http"
)

// Fault makes a simulated server fail its completion requests the way real
// model servers fail, for tests of what sits in front of them (tether's
// failure handling and chaos suite). /health, /metrics and /sim/* keep
// answering: a faulty server still looks alive to a liveness probe.
type Fault string

// Faults.
const (
	FaultNone Fault = ""
	// FaultReset reads each request and then resets the connection
	// without a response byte (a crashing worker).
	FaultReset Fault = "reset"
	// FaultHang reads each request and never answers (a wedged GPU).
	FaultHang Fault = "hang"
	// FaultError answers each request 503 (an overloaded or broken engine).
	FaultError Fault = "error"
)

// Faults lists the faults ParseFault accepts ("none" is FaultNone).
var Faults = []Fault{FaultNone, FaultReset, FaultHang, FaultError}

// ParseFault reads a fault's name; "none" and "" are FaultNone.
func ParseFault(s string) (Fault, error) {
	if s == "none" {
		return FaultNone, nil
	}
	for _, f := range Faults {
		if Fault(s) == f {
			return f, nil
		}
	}
	return FaultNone, fmt.Errorf("unknown fault %q (want none, reset, hang or error)", s)
}

func (f Fault) String() string {
	if f == FaultNone {
		return "none"
	}
	return string(f)
}

// SetFault makes every later completion request fail with f (FaultNone
// heals).
func (s *Server) SetFault(f Fault) { s.fault.Store(&f) }

// Fault is the current fault.
func (s *Server) Fault() Fault { return *s.fault.Load() }

// failed serves a completion request under the current fault; it reports
// false when there is none and the request is to be served.
func (s *Server) failed(w http.ResponseWriter, r *http.Request) bool {
	f := s.Fault()
	if f == FaultNone {
		return false
	}
	io.Copy(io.Discard, r.Body)
	switch f {
	case FaultReset:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler) // cannot hijack: abort the response instead
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN
		}
		conn.Close()
	case FaultHang:
		<-r.Context().Done()
	case FaultError:
		writeError(w, http.StatusServiceUnavailable, "server_error", "simulated fault: the engine is unavailable")
	}
	return true
}

// postFault is SetFault for tests of separate processes:
// POST /sim/fault?mode=reset|hang|error|none; GET /sim/fault reads it.
func (s *Server) postFault(w http.ResponseWriter, r *http.Request) {
	f, err := ParseFault(r.URL.Query().Get("mode"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	s.SetFault(f)
	s.getFault(w, r)
}

func (s *Server) getFault(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"fault": s.Fault().String()})
}
