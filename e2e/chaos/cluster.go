// Package chaos is tether's chaos suite (make chaos): steady multi-turn
// streaming load through three tether-sidecar replicas over modelsim
// backends, real processes all, while the suite injects the faults a
// production cluster sees — a replica killed and restarted, Redis down, a
// partitioned gossip ring, a backend killed mid-stream, backends that
// reset or never answer, a replica drained by SIGTERM — and measures, per
// fault, the requests sent and failed, the sessions moved and the time to
// recover. The tests are behind the chaos build tag; this file and its
// neighbours are the harness: the cluster (cluster.go), the load
// (load.go), the figures and the report (report.go).
package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/chaos/netcut"
)

// clusters numbers the clusters of a run (Cluster.Name).
var clusters atomic.Int64

// Store is where a cluster's replicas keep bindings.
type Store string

// Stores.
const (
	Gossip Store = "gossip"
	Redis  Store = "redis"
	Memory Store = "memory"
)

// Pool is the pool every replica serves.
const Pool = "chaos"

// Proxy settings of the suite's replicas: failure handling with
// thresholds a test can watch play out in seconds. The first-byte timeout
// is far above any modelsim answer here (a few hundred milliseconds of
// simulated prefill) and the Redis timeout twice the default: the suite
// runs on two shared cores, whose stalls of tens of milliseconds (more
// while a Go process starts) would otherwise be measured as backend and
// store failures.
const (
	ConsecutiveFailures = 3
	FirstByteTimeout    = 4 * time.Second
	ShutdownTimeout     = 20 * time.Second
	RedisTimeout        = 100 * time.Millisecond
	// StreamIdleTimeout is far above modelsim's pause between tokens
	// (milliseconds) and short enough for a frozen backend's streams to
	// be cut within the scenario.
	StreamIdleTimeout = 2 * time.Second
)

// Cluster is the processes of one run: modelsim backends, sidecar
// replicas, and Redis or the gossip ring's relays.
type Cluster struct {
	// Name tells the cluster's processes and files from another
	// cluster's in the same environment.
	Name     string
	Env      *procs.Env
	Backends []*Backend
	Replicas []*Replica
	Store    Store
	// Net relays the gossip ring (partitions); nil for other stores.
	Net   *netcut.Net
	Redis *RedisServer
}

// Backend is a modelsim process that can be killed and restarted on its
// address.
type Backend struct {
	ID, Addr string
	cluster  string
	env      *procs.Env
	flags    []string
	proc     atomic.Pointer[procs.Process]
	starts   int
}

// NewCluster starts backends modelsim processes (flags added) and, per
// store, Redis or the gossip relays; replicas are added with AddReplicas.
func NewCluster(env *procs.Env, store Store, backends int, flags ...string) (*Cluster, error) {
	c := &Cluster{Name: fmt.Sprintf("%s%d", store, clusters.Add(1)), Env: env, Store: store}
	for i := range backends {
		addr, err := env.Addr()
		if err != nil {
			return nil, err
		}
		b := &Backend{ID: fmt.Sprintf("backend-%d", i), Addr: addr, cluster: c.Name, env: env, flags: flags}
		if err := b.Start(); err != nil {
			return nil, err
		}
		c.Backends = append(c.Backends, b)
	}
	if store == Redis {
		r, err := StartRedis(env, c.Name+"-redis")
		if err != nil {
			return nil, err
		}
		c.Redis = r
	}
	return c, nil
}

// Start (re)starts the backend on its address.
func (b *Backend) Start() error {
	b.starts++
	args := append([]string{"--listen", b.Addr, "--id", b.ID}, b.flags...)
	p, err := b.env.Start(fmt.Sprintf("%s-%s-%d", b.cluster, b.ID, b.starts), filepath.Join(b.env.Bin, "modelsim"), args...)
	if err != nil {
		return err
	}
	b.proc.Store(p)
	return p.WaitHTTP("http://"+b.Addr+"/health", 30*time.Second)
}

// Kill ends the backend with SIGKILL: its connections are closed by the
// kernel, as when a pod's container is killed.
func (b *Backend) Kill() { b.proc.Load().Kill() }

// Freeze stops the backend with SIGSTOP, Thaw resumes it: meanwhile its
// connections stay open and the kernel accepts new ones, but nothing is
// read or sent, as with a worker hung in a GPU call or a node that stalls.
func (b *Backend) Freeze() error { return b.proc.Load().Signal(syscall.SIGSTOP) }
func (b *Backend) Thaw() error   { return b.proc.Load().Signal(syscall.SIGCONT) }

// SetFault makes the backend fail every completion request (modelsim's
// faults: reset, hang, error; none heals).
func (b *Backend) SetFault(mode string) error {
	resp, err := http.Post("http://"+b.Addr+"/sim/fault?mode="+mode, "", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: POST /sim/fault?mode=%s: %s", b.ID, mode, resp.Status)
	}
	return nil
}

// Addrs are the backends' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Backends))
	for i, b := range c.Backends {
		out[i] = b.Addr
	}
	return out
}

// Replica is one tether-sidecar process on fixed ports, so that it can be
// killed and restarted in its place.
type Replica struct {
	Index       int
	Name        string
	Addr, Admin string
	config      string
	env         *procs.Env
	extraEnv    []string
	logLevel    string

	mu     sync.Mutex
	proc   *procs.Process
	starts int
	logs   []string // the log file of every start

	// ready is what /readyz last said (Watch); terminating is set by a
	// test before it stops the replica, as a pod deletion takes the pod
	// out of its Service before the kubelet signals it.
	ready, terminating atomic.Bool
}

// ReplicaOptions configure AddReplicas.
type ReplicaOptions struct {
	// MaxEntries bounds the store (0: the default).
	MaxEntries int
	// LogLevel "warn" turns the access log off (load runs).
	LogLevel string
	// Env is added to the processes' environment.
	Env []string
}

// AddReplicas writes n replicas' configs and starts them; they are
// ready when it returns.
func (c *Cluster) AddReplicas(n int, o ReplicaOptions) error {
	if c.Store == Gossip {
		var err error
		first := len(c.Replicas)
		c.Net, err = netcut.New(n, func(i int) int { return c.Replicas[first+i].Pid() })
		if err != nil {
			return err
		}
	}
	key := ""
	if c.Store == Gossip {
		var err error
		if key, err = c.Env.GossipKeyFile(); err != nil {
			return err
		}
	}
	for i := range n {
		r := &Replica{Index: len(c.Replicas), Name: fmt.Sprintf("%s-replica-%d", c.Name, len(c.Replicas)), env: c.Env,
			logLevel: o.LogLevel, extraEnv: o.Env}
		var err error
		if r.Addr, err = c.Env.Addr(); err != nil {
			return err
		}
		if r.Admin, err = c.Env.Addr(); err != nil {
			return err
		}
		var store string
		switch c.Store {
		case Memory:
			store = "{backend: memory}"
			if o.MaxEntries > 0 {
				store = fmt.Sprintf("{backend: memory, memory: {maxEntries: %d}}", o.MaxEntries)
			}
		case Redis:
			store = fmt.Sprintf("{backend: redis, redis: {address: %q, timeout: %s}}", c.Redis.Addr, RedisTimeout)
		case Gossip:
			m := c.Net.Members()[i]
			max := ""
			if o.MaxEntries > 0 {
				max = fmt.Sprintf(", maxEntries: %d", o.MaxEntries)
			}
			store = fmt.Sprintf("{backend: gossip, gossip: {bind: %q, advertise: %q, join: [%s], secretKeyFile: %q%s}}",
				m.Bind, m.Advertise, quoteAll(c.Net.Advertised()), key, max)
		}
		r.config = filepath.Join(c.Env.Dir, r.Name+".yaml")
		doc := fmt.Sprintf(`listen: %s
admin: %s
store: %s
proxy:
  firstByteTimeout: %s
  streamIdleTimeout: %s
  shutdownTimeout: %s
  outlierDetection: {consecutiveFailures: %d}
pools:
  - name: %s
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%s]}
`, r.Addr, r.Admin, store, FirstByteTimeout, StreamIdleTimeout, ShutdownTimeout, ConsecutiveFailures, Pool, quoteAll(c.Addrs()))
		if err := os.WriteFile(r.config, []byte(doc), 0o644); err != nil {
			return err
		}
		c.Replicas = append(c.Replicas, r)
	}
	// Started together: a gossip replica is ready once it has the ring's
	// state, which needs a ring.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, r := range c.Replicas[len(c.Replicas)-n:] {
		wg.Go(func() { errs[i] = r.Start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// Start (re)starts the replica and waits until /readyz answers 200.
func (r *Replica) Start() error {
	r.mu.Lock()
	r.starts++
	name := fmt.Sprintf("%s-%d", r.Name, r.starts)
	args := []string{"--config", r.config}
	if r.logLevel != "" {
		args = append(args, "--log-level", r.logLevel)
	}
	p, err := r.env.StartEnv(name, filepath.Join(r.env.Bin, "tether-sidecar"), r.extraEnv, args...)
	if err == nil {
		r.proc = p
		r.logs = append(r.logs, p.Log)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.terminating.Store(false)
	if err := p.WaitHTTP("http://"+r.Admin+"/readyz", 60*time.Second); err != nil {
		return err
	}
	r.ready.Store(true)
	return nil
}

// Process is the replica's current process.
func (r *Replica) Process() *procs.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Pid is the replica's current process id, 0 before it started.
func (r *Replica) Pid() int {
	if p := r.Process(); p != nil {
		return p.Pid()
	}
	return 0
}

// Kill ends the replica with SIGKILL.
func (r *Replica) Kill() { r.Process().Kill() }

// Terminate sends SIGTERM (a graceful stop) without waiting.
func (r *Replica) Terminate() error { return r.Process().Signal(syscall.SIGTERM) }

// Routable is the router's view: the replica said it is ready and is not
// being taken out.
func (r *Replica) Routable() bool { return r.ready.Load() && !r.terminating.Load() }

// URL is a path on the replica's pool listener.
func (r *Replica) URL(path string) string { return "http://" + r.Addr + path }

// AdminURL is a path on the replica's admin listener.
func (r *Replica) AdminURL(path string) string { return "http://" + r.Admin + path }

// Watch polls every replica's /readyz every interval until stop is
// closed, as a Service's endpoints follow readiness.
func (c *Cluster) Watch(interval time.Duration, stop <-chan struct{}) {
	client := &http.Client{Timeout: interval * 4}
	for _, r := range c.Replicas {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				resp, err := client.Get(r.AdminURL("/readyz"))
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					resp.Body.Close()
				}
				r.ready.Store(ok)
			}
		}()
	}
}

// Close stops every process and relay.
func (c *Cluster) Close() {
	if c.Net != nil {
		c.Net.Close()
	}
}

// AccessLine is one access-log line of a replica.
type AccessLine struct {
	Time        time.Time `json:"time"`
	Msg         string    `json:"msg"`
	RequestID   string    `json:"request_id"`
	Decision    string    `json:"decision"`
	SelectedPod string    `json:"selected_pod"`
	Status      int       `json:"status"`
	Outcome     string    `json:"outcome"`
	Retried     bool      `json:"retried"`
	RetryReason string    `json:"retry_reason"`
	FailedPod   string    `json:"failed_pod"`
	Error       string    `json:"error"`
	StoreError  bool      `json:"store_error"`
	DurationMS  float64   `json:"duration_ms"`
	Backend     string    `json:"backend"` // "backend ejected" lines
	Replica     int       `json:"-"`
}

// Start is when the request arrived (its line is written at its end).
func (a AccessLine) Start() time.Time {
	return a.Time.Add(-time.Duration(a.DurationMS * float64(time.Millisecond)))
}

// Logs reads every replica's log lines (every start's) with the message
// msg ("request" for access-log lines, "backend ejected", ...).
func (c *Cluster) Logs(msg string) ([]AccessLine, error) {
	var out []AccessLine
	for _, r := range c.Replicas {
		r.mu.Lock()
		files := append([]string(nil), r.logs...)
		r.mu.Unlock()
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				if !strings.Contains(line, `"msg":"`+msg+`"`) {
					continue
				}
				var a AccessLine
				if err := json.Unmarshal([]byte(line), &a); err != nil {
					continue // a line cut by a kill
				}
				a.Replica = r.Index
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// RedisServer is a redis-server with an append-only file, so a kill -9
// and a restart keep its bindings, as a production Redis with persistence
// (or a replica taking over) does. The file is fsynced every second, as
// production Redis is run: fsync on every write would make each lookup
// (a write: it slides the TTL) wait on the disk. A kill loses at most the
// last second's new bindings, whose sessions rebind on their next turn.
type RedisServer struct {
	Addr   string
	env    *procs.Env
	name   string
	dir    string
	proc   *procs.Process
	starts int
}

// StartRedis starts redis-server on a free port.
func StartRedis(env *procs.Env, name string) (*RedisServer, error) {
	addr, err := env.Addr()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Addr: addr, env: env, name: name, dir: filepath.Join(env.Dir, name)}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	return r, r.Start()
}

// Start (re)starts redis-server on its port, from its append-only file.
func (r *RedisServer) Start() error {
	r.starts++
	_, port, _ := strings.Cut(r.Addr, ":")
	p, err := r.env.Start(fmt.Sprintf("%s-%d", r.name, r.starts), "redis-server", "--port", port, "--bind", "127.0.0.1",
		"--dir", r.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "yes")
	if err != nil {
		return err
	}
	r.proc = p
	return p.WaitTCP(r.Addr, 30*time.Second)
}

// Kill ends redis-server with SIGKILL.
func (r *RedisServer) Kill() { r.proc.Kill() }
