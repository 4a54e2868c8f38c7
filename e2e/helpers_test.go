//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// env is one scenario's world: a control plane, a namespace whose
// "router" service account may only read pods, and model-server pods each
// backed by a modelsim process on its own loopback address.
type env struct {
	t          *testing.T
	c          *cluster.Cluster
	ns         string
	kubeconfig string // the router service account's: pod get/list/watch only
	port       int    // every model server listens on this port, as pods of one Deployment do
	sims       map[string]*cluster.Modelsim
	pods       map[string]*corev1.Pod
}

func newEnv(t *testing.T, ns string) *env {
	t.Helper()
	c := cluster.Start(t)
	c.CreateNamespace(t, ns, nil)
	c.PodReaderRole(t, ns, "router")
	return &env{
		t: t, c: c, ns: ns,
		kubeconfig: c.ServiceAccountKubeconfig(t, ns, "router"),
		port:       cluster.FreePort(t, "127.0.0.2"),
		sims:       map[string]*cluster.Modelsim{},
		pods:       map[string]*corev1.Pod{},
	}
}

func (e *env) ctx() context.Context { return context.Background() }

// addPod starts a modelsim identified by the pod's name on ip:port, then
// creates the pod and reports it Running and Ready on ip, in that order,
// as a kubelet would (ready only once the server answers).
func (e *env) addPod(name, ip string, labels map[string]string) *corev1.Pod {
	e.t.Helper()
	e.startSim(name, ip)
	p, err := e.c.StartPod(e.ctx(), cluster.PodSpec{Namespace: e.ns, Name: name, Labels: labels, Port: int32(e.port)}, ip)
	if err != nil {
		e.t.Fatalf("pod %s: %v", name, err)
	}
	e.pods[name] = p
	return p
}

func (e *env) startSim(name, ip string) {
	e.t.Helper()
	e.sims[name] = cluster.StartModelsim(e.t, ip+":"+strconv.Itoa(e.port), name)
}

// podOf maps a modelsim identity (= pod name) back to its pod.
func (e *env) podOf(id string) *corev1.Pod {
	e.t.Helper()
	p, ok := e.pods[id]
	if !ok {
		e.t.Fatalf("no pod for backend %q", id)
	}
	return p
}

// router is one tether-sidecar in a router pod.
type router struct {
	*cluster.Sidecar
	t        *testing.T
	listen   string
	admin    string
	requests int // requests sent through this router, to find their access-log lines
}

// sidecarConfig renders a one-pool sidecar config with header session keys.
// backends is the YAML of the pool's backends block (indented by 4).
func sidecarConfig(listen, admin, storeYAML, backends string) string {
	return fmt.Sprintf(`listen: %s
admin: %s
%s
pools:
- name: chat
  sessionSticky:
    sessionAffinitySeconds: 300
    sources:
    - {type: Header, name: X-Session-ID}
  backends:
%s
`, listen, admin, storeYAML, backends)
}

func kubeBackends(selector string, port int) string {
	return fmt.Sprintf("    kubernetes: {selector: %q, port: %d}", selector, port)
}

// startRouter runs a sidecar as router pod name on ip with the router
// service account's kubeconfig and the given store block.
func (e *env) startRouter(name, ip, storeYAML, backends string) *router {
	e.t.Helper()
	listen, admin := cluster.FreeAddr(e.t, "127.0.0.1"), cluster.FreeAddr(e.t, "127.0.0.1")
	sc := cluster.StartSidecar(e.t, cluster.SidecarSpec{
		Name: name, Namespace: e.ns, IP: ip, Admin: admin, Kubeconfig: e.kubeconfig,
		Config: sidecarConfig(listen, admin, storeYAML, backends),
	})
	return &router{Sidecar: sc, t: e.t, listen: listen, admin: admin}
}

// client has no connection reuse surprises between turns and a bound on
// every request, so a hung backend fails the test instead of the suite.
var client = &http.Client{Timeout: 30 * time.Second}

// turn sends one chat turn of session and returns the modelsim that
// answered. Any status but 200 fails the test: no scenario tolerates a
// failed request.
func (r *router) turn(session string) string {
	r.t.Helper()
	id, code, body, err := r.tryTurn(session)
	r.requests++
	if err != nil || code != http.StatusOK {
		r.t.Fatalf("turn of session %s: status %d, err %v, body %q", session, code, err, body)
	}
	return id
}

func (r *router) tryTurn(session string) (id string, code int, body string, err error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.listen+"/v1/chat/completions",
		strings.NewReader(`{"model":"modelsim","max_tokens":2,"messages":[{"role":"user","content":"hello from `+session+`"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-ID", session)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.Header.Get("X-Modelsim-Id"), resp.StatusCode, string(b), nil
}

// metric reads the one sample of the sidecar's /metrics whose labels
// include the name/value pairs of labels; -1 when there is none.
func (r *router) metric(name string, labels ...string) float64 {
	r.t.Helper()
	v, err := testkit.FindMetric(testkit.Scrape(r.t, "http://"+r.admin+"/metrics"), name, labels...)
	if err != nil {
		return -1
	}
	return v
}

// waitSelectable waits until the sidecar's discovery sees n selectable
// backends of role in pool chat.
func (r *router) waitSelectable(role string, n int) {
	r.t.Helper()
	testkit.Eventually(r.t, 30*time.Second, fmt.Sprintf("%s to see %d selectable %s pods", r.Spec.Name, n, role), func() error {
		if v := r.metric("tether_backends_selectable", "pool", "chat", "role", role); v != float64(n) {
			return fmt.Errorf("tether_backends_selectable = %v", v)
		}
		return nil
	})
}

// binding is the sidecar's /debug/bindings view of a session.
type binding struct {
	Backend    string    `json:"backend"`
	Prefill    string    `json:"prefill"`
	Generation uint64    `json:"generation"`
	KeyHash    string    `json:"keyHash"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// binding returns the session's binding; ok is false when there is none.
func (r *router) binding(session string) (b binding, ok bool) {
	r.t.Helper()
	resp, err := client.Get("http://" + r.admin + "/debug/bindings?pool=chat&key=" + session)
	if err != nil {
		r.t.Fatalf("debug/bindings: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return b, false
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		r.t.Fatalf("debug/bindings: %s %s", resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		r.t.Fatal(err)
	}
	return b, true
}

// lastAccess is the access-log line of session's latest turn. It waits
// until the router has logged as many lines as it was sent requests (a
// line is written when its response ends, a moment after the client has
// read it), then picks the session's last line by its key hash.
func (r *router) lastAccess(sessionKey string) cluster.AccessLog {
	r.t.Helper()
	n := r.requests
	var logs []cluster.AccessLog
	testkit.Eventually(r.t, 10*time.Second, fmt.Sprintf("%d access-log lines", n), func() error {
		logs = r.AccessLogs()
		if len(logs) < n {
			return fmt.Errorf("%d lines so far", len(logs))
		}
		return nil
	})
	h := session.StoreKey("chat", sessionKey)
	for i := len(logs) - 1; i >= 0; i-- {
		if logs[i].KeyHash == h {
			return logs[i]
		}
	}
	r.t.Fatalf("no access-log line for session %s", sessionKey)
	return cluster.AccessLog{}
}

// podID is the backend identity discovery gives a pod.
func podID(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }
