package server

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/session"
)

// debugHandler adds /debug/* to mux: what an operator inside the pod
// reaches for, on a loopback listener only (config.Debug, or the admin
// listener when that is on loopback). Nothing here is reachable from the
// pod network: it reveals where sessions are bound and changes the log
// level.
func (s *Server) debugHandler(mux *http.ServeMux) http.Handler {
	mux.HandleFunc("GET /debug/bindings", s.debugBinding)
	mux.HandleFunc("GET /debug/config", s.debugConfig)
	mux.HandleFunc("GET /debug/backends", s.debugBackends)
	mux.HandleFunc("GET /debug/loglevel", s.debugLogLevel)
	mux.HandleFunc("PUT /debug/loglevel", s.debugLogLevel)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// debugBinding answers GET /debug/bindings?pool=NAME&key=KEY, or
// &keyHash=HASH with the access log's key_hash instead of the raw key,
// with the binding of that session, read without refreshing it. A key is
// hashed with the same function (and store key secret) as requests.
func (s *Server) debugBinding(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pool, key, keyHash := q.Get("pool"), q.Get("key"), strings.ToLower(q.Get("keyHash"))
	if pool == "" || (key == "") == (keyHash == "") {
		http.Error(w, "pool and one of key or keyHash are required", http.StatusBadRequest)
		return
	}
	if _, ok := s.sources[pool]; !ok {
		http.Error(w, "unknown pool "+pool, http.StatusNotFound)
		return
	}
	if key != "" {
		keyHash = s.keys.StoreKey(pool, key)
	} else if _, err := hex.DecodeString(keyHash); err != nil || len(keyHash) != session.KeyHashLen {
		http.Error(w, fmt.Sprintf("keyHash must be the %d hex digits of the access log's key_hash", session.KeyHashLen), http.StatusBadRequest)
		return
	}
	b, ok, err := s.store.Peek(r.Context(), keyHash)
	if err != nil {
		http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !ok {
		http.Error(w, "no binding", http.StatusNotFound)
		return
	}
	writeJSON(w, struct {
		Backend    string `json:"backend"`
		Prefill    string `json:"prefill,omitempty"`
		ExpiresAt  string `json:"expiresAt"`
		Generation uint64 `json:"generation"`
		KeyHash    string `json:"keyHash"`
	}{b.Pod, b.PrefillPod, b.ExpiresAt.UTC().Format(time.RFC3339Nano), b.Gen, keyHash})
}

// debugConfig answers GET /debug/config with the effective configuration,
// defaults applied. The schema holds secrets only as file paths, so this
// shows where keys and passwords are read from, never what they are.
func (s *Server) debugConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.cfg)
}

// debugBackends answers GET /debug/backends: every pool's selectable
// backends as discovery lists them now, with what this replica knows of
// each: ejected by outlier detection (not selectable until the ejection
// ends), requests in flight from here, the load last scraped, and what
// the bounds of hashed placement read (live bindings, recent work).
func (s *Server) debugBackends(w http.ResponseWriter, _ *http.Request) {
	type load struct {
		Waiting float64 `json:"waiting"`
		Running float64 `json:"running"`
		KVUsage float64 `json:"kvUsage"`
		At      string  `json:"scrapedAt"`
	}
	type backend struct {
		ID         string `json:"id"`
		Name       string `json:"name"`
		Addr       string `json:"addr"`
		Role       string `json:"role,omitempty"`
		Group      string `json:"group,omitempty"`
		Since      string `json:"readySince,omitempty"`
		Selectable bool   `json:"selectable"`
		Ejected    bool   `json:"ejected"`
		InFlight   int64  `json:"inFlight"`
		Load       *load  `json:"load,omitempty"`
		// What the bindings and work bounds read (README "Placement"),
		// where the pool has them.
		Bindings   *int     `json:"bindings,omitempty"`
		RecentWork *float64 `json:"recentWorkBytes,omitempty"`
	}
	type pool struct {
		Name     string    `json:"name"`
		Synced   bool      `json:"synced"`
		Backends []backend `json:"backends"`
	}
	out := struct {
		Pools []pool `json:"pools"`
	}{Pools: []pool{}}
	for _, p := range s.pools {
		set := p.src.Current()
		pv := pool{Name: p.cfg.Name, Synced: p.src.Synced(), Backends: []backend{}}
		add := func(list []discovery.Backend, role string) {
			ids := make([]string, len(list))
			for i, b := range list {
				ids[i] = b.ID
			}
			held, work := make([]int, len(list)), make([]float64, len(list))
			hasBindings, hasWork := p.bal.Measures(ids, held, work)
			for i, b := range list {
				ejected := p.outliers.Ejected(b.ID)
				bv := backend{ID: b.ID, Name: b.Name, Addr: b.Addr, Role: role, Group: b.Group,
					Selectable: !ejected, Ejected: ejected, InFlight: p.bal.Outstanding(b.ID)}
				if !b.Since.IsZero() {
					bv.Since = b.Since.UTC().Format(time.RFC3339)
				}
				if hasBindings {
					bv.Bindings = &held[i]
				}
				if hasWork {
					w := math.Round(work[i])
					bv.RecentWork = &w
				}
				if p.load != nil {
					if smp, ok := p.load.Get(b.ID); ok {
						bv.Load = &load{smp.Waiting, smp.Running, smp.KVUsage, smp.At.UTC().Format(time.RFC3339Nano)}
					}
				}
				pv.Backends = append(pv.Backends, bv)
			}
		}
		if set != nil {
			role := ""
			if p.cfg.Backends.IsPD() {
				role = "decode"
			}
			add(set.Backends, role)
			add(set.Prefill, "prefill")
		}
		out.Pools = append(out.Pools, pv)
	}
	writeJSON(w, out)
}

// debugLogLevel answers GET /debug/loglevel with the current level and
// PUT /debug/loglevel?level=debug (or the level as the body) by changing
// it at once, for every logger of the process.
func (s *Server) debugLogLevel(w http.ResponseWriter, r *http.Request) {
	if s.level == nil {
		http.Error(w, "the log level of this process cannot be changed", http.StatusNotImplemented)
		return
	}
	if r.Method == http.MethodPut {
		text := r.URL.Query().Get("level")
		if text == "" {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 64))
			text = strings.TrimSpace(string(b))
		}
		var l slog.Level
		if err := l.UnmarshalText([]byte(text)); err != nil {
			http.Error(w, fmt.Sprintf("level %q: want debug, info, warn or error", text), http.StatusBadRequest)
			return
		}
		old := s.level.Level()
		s.level.Set(l)
		s.log.Warn("log level changed through /debug/loglevel", "from", old.String(), "to", l.String())
	}
	fmt.Fprintln(w, strings.ToLower(s.level.Level().String()))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
