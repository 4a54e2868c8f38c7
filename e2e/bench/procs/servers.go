package procs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startTimeout bounds how long any process may take to become ready.
const startTimeout = 30 * time.Second

// Modelsim starts bin/modelsim on a free port with extra flags
// (--prefill-per-token …) and waits for /health. It returns the address.
func (e *Env) Modelsim(id string, flags ...string) (*Process, string, error) {
	p, addrs, err := e.Modelsims([]string{id}, nil, flags...)
	if err != nil {
		return p, "", err
	}
	return p, addrs[0], nil
}

// Modelsims starts one bin/modelsim process serving one backend per id,
// each on a free port with its own cache and counters, and waits for
// every /health. It returns the addresses, in ids' order. One process
// for a fleet keeps a 2-core machine's scheduler for what is measured.
// env is added to the process's environment.
func (e *Env) Modelsims(ids, env []string, flags ...string) (*Process, []string, error) {
	addrs := make([]string, len(ids))
	for i := range addrs {
		var err error
		if addrs[i], err = e.Addr(); err != nil {
			return nil, nil, err
		}
	}
	args := append([]string{"--listen", strings.Join(addrs, ","), "--id", strings.Join(ids, ",")}, flags...)
	p, err := e.StartEnv(ids[0], filepath.Join(e.Bin, "modelsim"), env, args...)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range addrs {
		if err := p.WaitHTTP("http://"+a+"/health", startTimeout); err != nil {
			return p, nil, err
		}
	}
	return p, addrs, nil
}

// Redis starts redis-server without persistence on a free port.
func (e *Env) Redis(name string) (*Process, string, error) {
	port, err := e.Port()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := e.Start(name, "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "yes")
	if err != nil {
		return nil, "", err
	}
	return p, addr, p.WaitTCP(addr, startTimeout)
}

// HAProxy starts haproxy (one thread) with a stick table on the
// X-Session-ID header: a session's first request is balanced by least
// connections and learned, later ones go to the learned server.
func (e *Env) HAProxy(name string, backends []string) (*Process, string, error) {
	addr, err := e.Addr()
	if err != nil {
		return nil, "", err
	}
	var servers strings.Builder
	for i, b := range backends {
		fmt.Fprintf(&servers, "  server s%d %s\n", i, b)
	}
	cfg := fmt.Sprintf(`global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
frontend fe
  bind %s
  default_backend be
backend be
  balance leastconn
  stick-table type string len 64 size 1m expire 5m
  stick on req.hdr(x-session-id)
%s`, addr, servers.String())
	path := filepath.Join(e.Dir, name+".cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, "", err
	}
	if out, err := exec.Command("haproxy", "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("haproxy config check: %v: %s", err, out)
	}
	p, err := e.Start(name, "haproxy", "-db", "-f", path)
	if err != nil {
		return nil, "", err
	}
	return p, addr, p.WaitTCP(addr, startTimeout)
}

// GoRouter starts this bench binary's router command (one of section 2's
// routing policies, a net/http ReverseProxy) as a process of its own,
// with env added (the sidecars' GOMAXPROCS, so both Go proxies get the
// same threads).
func (e *Env) GoRouter(name, policy string, backends, env []string) (*Process, string, error) {
	return e.benchCommand(name, env, "router", backends, "-policy", policy)
}

// GoRelay starts this bench binary's relay command (a TCP relay, no
// HTTP: the floor of a Go proxy) as a process of its own, with env added.
func (e *Env) GoRelay(name string, backends, env []string) (*Process, string, error) {
	return e.benchCommand(name, env, "relay", backends)
}

// GoMinimal starts this bench binary's minproxy command (the least
// sticky HTTP proxy in Go: the floor of a Go HTTP proxy) as a process of
// its own, with env and the command's args (-work) added.
func (e *Env) GoMinimal(name string, backends, env []string, args ...string) (*Process, string, error) {
	return e.benchCommand(name, env, "minproxy", backends, args...)
}

// GoLayers starts this bench binary's layerproxy command (tether's
// per-request work on tether's server and transport, without its
// handler) as a process of its own, with env and the command's args
// (-work) added.
func (e *Env) GoLayers(name string, backends, env []string, args ...string) (*Process, string, error) {
	return e.benchCommand(name, env, "layerproxy", backends, args...)
}

// benchCommand starts this bench binary's command cmd in front of
// backends, on a fresh address, with env and args added, and waits until
// it listens.
func (e *Env) benchCommand(name string, env []string, cmd string, backends []string, args ...string) (*Process, string, error) {
	addr, err := e.Addr()
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	args = append([]string{cmd, "-listen", addr, "-backends", strings.Join(backends, ",")}, args...)
	p, err := e.StartEnv(name, self, env, args...)
	if err != nil {
		return nil, "", err
	}
	return p, addr, p.WaitTCP(addr, startTimeout)
}

// Nginx starts nginx (one worker) with consistent hashing on the
// X-Session-ID header, upstream keep-alive, and response buffering off so
// SSE events pass as they come.
func (e *Env) Nginx(name string, backends []string) (*Process, string, error) {
	addr, err := e.Addr()
	if err != nil {
		return nil, "", err
	}
	prefix := filepath.Join(e.Dir, name)
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, "", err
	}
	// Workers run as nobody; they must reach the temp directories.
	_ = os.Chmod(e.Dir, 0o755)
	var servers strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&servers, "    server %s;\n", b)
	}
	tmp := filepath.Join(prefix, "tmp")
	cfg := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 8000; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream be {
    hash $http_x_session_id consistent;
%[3]s    keepalive 256;
  }
  server {
    listen %[4]s;
    location / {
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, prefix, tmp, servers.String(), addr)
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, "", err
	}
	args := []string{"-p", prefix, "-e", filepath.Join(prefix, "error.log"), "-c", path}
	if out, err := exec.Command("nginx", append(args, "-t", "-q")...).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("nginx config check: %v: %s", err, out)
	}
	p, err := e.Start(name, "nginx", args...)
	if err != nil {
		return nil, "", err
	}
	return p, addr, p.WaitTCP(addr, startTimeout)
}
