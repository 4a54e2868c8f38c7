package procs

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sidecar describes one tether-sidecar process with one pool, "bench",
// keyed on the X-Session-ID header, over static backends.
type Sidecar struct {
	Name     string
	Backends []string
	// Store is memory (default), redis (Redis at RedisAddr) or gossip.
	Store     string
	RedisAddr string
	// GossipJoin are the ring's seeds (host:port); empty starts a ring.
	GossipJoin []string
	// Pool is extra YAML for the pool, indented by four spaces
	// ("    affinity: {mode: soft}").
	Pool string
	// LogLevel "warn" turns the per-request access log (info) off.
	LogLevel string
	// Env is added to the process's environment (GOMAXPROCS=1).
	Env []string
	// Binary is the tether-sidecar to run; empty: the env's bin directory's.
	Binary string
	// StderrPause, if set, makes the sidecar's stderr (its log) a pipe
	// read in bursts this far apart (slowReader), instead of a file.
	StderrPause time.Duration
}

// Running is a started sidecar.
type Running struct {
	*Process
	Addr   string // the pool's listener
	Admin  string // /readyz, /metrics, /debug
	Gossip string // the gossip bind address, for others to join
}

// Sidecar writes the config, starts bin/tether-sidecar and waits for /readyz.
func (e *Env) Sidecar(s Sidecar) (*Running, error) {
	r := &Running{}
	var err error
	for _, a := range []*string{&r.Addr, &r.Admin} {
		if *a, err = e.Addr(); err != nil {
			return nil, err
		}
	}
	quoted := make([]string, len(s.Backends))
	for i, b := range s.Backends {
		quoted[i] = fmt.Sprintf("%q", b)
	}
	var store string
	switch s.Store {
	case "", "memory":
		store = "{backend: memory}"
	case "redis":
		store = fmt.Sprintf("{backend: redis, redis: {address: %q}}", s.RedisAddr)
	case "gossip":
		if r.Gossip, err = e.Addr(); err != nil {
			return nil, err
		}
		join := make([]string, len(s.GossipJoin))
		for i, j := range s.GossipJoin {
			join[i] = fmt.Sprintf("%q", j)
		}
		// Encrypted and authenticated, as tether's default requires: the
		// bench measures the ring users run.
		key, err := e.GossipKeyFile()
		if err != nil {
			return nil, err
		}
		store = fmt.Sprintf("{backend: gossip, gossip: {bind: %q, advertise: %q, join: [%s], secretKeyFile: %q}}",
			r.Gossip, r.Gossip, strings.Join(join, ", "), key)
	default:
		return nil, fmt.Errorf("sidecar %s: unknown store %q", s.Name, s.Store)
	}
	cfg := fmt.Sprintf(`listen: %s
admin: %s
store: %s
pools:
  - name: bench
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%s]}
%s
`, r.Addr, r.Admin, store, strings.Join(quoted, ", "), s.Pool)
	path := filepath.Join(e.Dir, s.Name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--config", path}
	if s.LogLevel != "" {
		args = append(args, "--log-level", s.LogLevel)
	}
	bin := s.Binary
	if bin == "" {
		bin = filepath.Join(e.Bin, "tether-sidecar")
	}
	if r.Process, err = e.start(s.Name, bin, s.Env, s.StderrPause, args...); err != nil {
		return nil, err
	}
	return r, r.WaitHTTP("http://"+r.Admin+"/readyz", startTimeout)
}

// GossipKeyFile returns the env's gossip key file, writing a random
// 32-byte key (base64, as `openssl rand -base64 32` writes it) the first
// time, so every ring member of one env shares it.
func (e *Env) GossipKeyFile() (string, error) {
	path := filepath.Join(e.Dir, "gossip.key")
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}
