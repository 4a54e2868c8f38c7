//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Scenario 12: a pool defined by a Kthena ModelServer
// (networking.serving.volcano.sh/v1alpha1) in the real API server, with
// the CRD installed: the sidecar takes the pods, port, model and
// sessionSticky block from the object, follows its edits without a
// restart, and answers a clear 503 once it is deleted.

// modelServerEnv is an env with the ModelServer CRD installed, the router
// account allowed to read ModelServers, three ds pods and one pod of
// another app that the object's selector must leave out.
func modelServerEnv(t *testing.T, ns string) (*env, dynamic.ResourceInterface) {
	e := newEnv(t, ns)
	e.c.InstallModelServerCRD(t)
	e.c.ModelServerReaderRole(t, ns, "router")
	for i := 0; i < 3; i++ {
		e.addPod(fmt.Sprintf("ds-%d", i), fmt.Sprintf("127.0.0.%d", 2+i), dsLabels)
	}
	e.addPod("other-0", "127.0.0.5", map[string]string{"app": "other"})
	return e, e.c.Dynamic(t).Resource(cluster.ModelServerGVR).Namespace(ns)
}

// modelServer is a ModelServer as a Kthena user writes it; sticky is the
// trafficPolicy.sessionSticky block, nil for none.
func modelServer(name string, port int, sticky map[string]any) *unstructured.Unstructured {
	tp := map[string]any{"timeout": "30s"}
	if sticky != nil {
		tp["sessionSticky"] = sticky
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.serving.volcano.sh/v1alpha1",
		"kind":       "ModelServer",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"model":            "modelsim",
			"inferenceEngine":  "vLLM",
			"workloadSelector": map[string]any{"matchLabels": map[string]any{"app": "ds"}},
			"workloadPort":     map[string]any{"port": int64(port)},
			"trafficPolicy":    tp,
		},
	}}
}

func headerSticky(ttl int64, header string) map[string]any {
	return map[string]any{"sessionAffinitySeconds": ttl, "sources": []any{map[string]any{"type": "Header", "name": header}}}
}

// startModelServerRouter runs a sidecar whose pool chat is the
// ModelServer name in its own namespace: no sources, selector, port or
// model in the config.
func (e *env) startModelServerRouter(name, ip, msName string) *router {
	e.t.Helper()
	listen, admin := cluster.FreeAddr(e.t, "127.0.0.1"), cluster.FreeAddr(e.t, "127.0.0.1")
	cfg := fmt.Sprintf(`listen: %s
admin: %s
store: {backend: memory}
pools:
- name: chat
  backends:
    modelServer: {name: %s}
`, listen, admin, msName)
	sc := cluster.StartSidecar(e.t, cluster.SidecarSpec{
		Name: name, Namespace: e.ns, IP: ip, Admin: admin, Kubeconfig: e.kubeconfig, Config: cfg,
	})
	return &router{Sidecar: sc, t: e.t, listen: listen, admin: admin}
}

// editModelServer changes the object through the API, retrying on a
// conflict with another writer.
func editModelServer(t *testing.T, ms dynamic.ResourceInterface, name string, edit func(spec map[string]any)) {
	t.Helper()
	for i := 0; ; i++ {
		cur, err := ms.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(cur.Object["spec"].(map[string]any))
		if _, err = ms.Update(t.Context(), cur, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) || i == 5 {
			t.Fatalf("update ModelServer %s: %v", name, err)
		}
	}
}

// waitUpdates waits until the sidecar has applied n versions of the object.
func (r *router) waitUpdates(n int) {
	r.t.Helper()
	testkit.Eventually(r.t, 30*time.Second, fmt.Sprintf("%d ModelServer versions applied", n), func() error {
		if v := r.metric("tether_model_server_updates_total", "pool", "chat", "result", "applied"); v < float64(n) {
			return fmt.Errorf("applied = %v", v)
		}
		return nil
	})
}

// ttlOf is how long the session's binding has left.
func (r *router) ttlOf(session string) time.Duration {
	r.t.Helper()
	b, ok := r.binding(session)
	if !ok {
		r.t.Fatalf("session %s has no binding", session)
	}
	return time.Until(b.ExpiresAt)
}

// TestScenario12ModelServer: sticky turns through a ModelServer-defined
// pool on the pods its workloadSelector picks; an edit of the TTL applies
// to new bindings, an edit of the sources switches the key atomically,
// removing sessionSticky makes the pool balanced without bindings, and a
// deletion answers 503 with a log line that says why.
func TestScenario12ModelServer(t *testing.T) {
	e, ms := modelServerEnv(t, "s12")
	if _, err := ms.Create(t.Context(), modelServer("ds", e.port, headerSticky(300, "X-Session-ID")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.startModelServerRouter("router-0", "127.0.1.1", "ds")
	r.waitSelectable("backend", 3)
	if v := r.metric("tether_model_server_available", "pool", "chat"); v != 1 {
		t.Fatalf("tether_model_server_available = %v, want 1", v)
	}

	// Sticky by the object's sessionSticky, on its selector's pods only.
	home := bindSessions(t, r, "s12", 9)
	for s, p := range home {
		if !strings.HasPrefix(p, "ds-") {
			t.Fatalf("session %s went to %s, which the workloadSelector leaves out", s, p)
		}
		if ttl := r.ttlOf(s); ttl < 290*time.Second || ttl > 300*time.Second {
			t.Fatalf("session %s binding expires in %s, want the object's 300s", s, ttl)
		}
	}

	// TTL edit: new bindings (and refreshes) use the new TTL, no restart.
	editModelServer(t, ms, "ds", func(spec map[string]any) {
		spec["trafficPolicy"].(map[string]any)["sessionSticky"] = headerSticky(60, "X-Session-ID")
	})
	r.waitUpdates(2)
	r.turn("s12-new-ttl")
	if ttl := r.ttlOf("s12-new-ttl"); ttl < 50*time.Second || ttl > 60*time.Second {
		t.Fatalf("binding made after the TTL edit expires in %s, want 60s", ttl)
	}
	checkStay(t, r, home, "after the TTL edit")

	// Sources edit: the key now comes from X-Conversation; a turn that
	// carries only X-Session-ID has no key (balanced, not bound), one with
	// X-Conversation sticks.
	editModelServer(t, ms, "ds", func(spec map[string]any) {
		spec["trafficPolicy"].(map[string]any)["sessionSticky"] = headerSticky(60, "X-Conversation")
	})
	r.waitUpdates(3)
	r.turn("s12-0")
	if a := r.latestAccess(); a.Decision != "none" {
		t.Fatalf("turn keyed by the old source after the sources edit: decision %q, want none", a.Decision)
	}
	conv := r.conversationTurn("c-1")
	for i := 0; i < 3; i++ {
		if got := r.conversationTurn("c-1"); got != conv {
			t.Fatalf("X-Conversation session moved from %s to %s", conv, got)
		}
	}

	// sessionSticky removed: a plain balanced pool, nothing bound.
	editModelServer(t, ms, "ds", func(spec map[string]any) {
		delete(spec["trafficPolicy"].(map[string]any), "sessionSticky")
	})
	r.waitUpdates(4)
	seen := map[string]bool{}
	for i := 0; i < 12; i++ {
		seen[r.turn("s12-unsticky")] = true
		if a := r.latestAccess(); a.Decision != "none" {
			t.Fatalf("non-sticky pool: decision %q, want none", a.Decision)
		}
	}
	if _, ok := r.binding("s12-unsticky"); ok {
		t.Fatal("a non-sticky pool bound a session")
	}
	// Balancing sees no load between sequential turns, so the two random
	// choices tie and either wins: all 12 on one of three pods has odds
	// of 3·(1/3)^12, about 6e-6.
	if len(seen) < 2 {
		t.Fatalf("12 turns of a non-sticky pool all went to %v", seen)
	}

	// Deleted: a clear 503 and a log line, not a 404 or a hang.
	if err := ms.Delete(t.Context(), "ds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "503 after the ModelServer was deleted", func() error {
		_, code, body, err := r.tryTurn("s12-0")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "ModelServer s12/ds does not exist") {
			return fmt.Errorf("status %d, body %q, err %v", code, body, err)
		}
		return nil
	})
	// The sidecar logs the line before it answers the first 503, but the
	// harness copies the sidecar's output on a goroutine of its own (the
	// pipe os/exec reads into the buffer): wait for that copy.
	testkit.Eventually(t, 5*time.Second, "the log line for the deletion", func() error {
		if !r.logged("ModelServer not found: the pool answers 503 until it exists again") {
			return fmt.Errorf("not in the sidecar's output:\n%s", r.Tail(20))
		}
		return nil
	})
	if v := r.metric("tether_model_server_available", "pool", "chat"); v != 0 {
		t.Fatalf("tether_model_server_available = %v after the deletion, want 0", v)
	}

	// Created again: the pool serves again without a restart.
	if _, err := ms.Create(t.Context(), modelServer("ds", e.port, headerSticky(300, "X-Session-ID")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the pool serving again after the ModelServer was recreated", func() error {
		if _, code, body, err := r.tryTurn("s12-back"); err != nil || code != http.StatusOK {
			return fmt.Errorf("status %d, body %q, err %v", code, body, err)
		}
		return nil
	})
}

// TestScenario12ModelServerPD: a ModelServer with a pdGroup defines a PD
// pool: prefill and decode pods are matchLabels plus their role's labels,
// pairs form only inside one value of groupKey, every turn of a session
// goes to its whole pair, and a pod outside every group is never paired.
func TestScenario12ModelServerPD(t *testing.T) {
	e := newEnv(t, "s12pd")
	e.c.InstallModelServerCRD(t)
	e.c.ModelServerReaderRole(t, e.ns, "router")
	group := map[string]string{}
	add := func(name, role, g, ip string) {
		e.addPod(name, ip, map[string]string{"app": "ds", "role": role, "pd-group": g})
		group[name] = g
	}
	add("p-a0", "prefill", "a", "127.0.0.2")
	add("p-a1", "prefill", "a", "127.0.0.3")
	add("d-a0", "decode", "a", "127.0.0.4")
	add("p-b0", "prefill", "b", "127.0.0.5")
	add("d-b0", "decode", "b", "127.0.0.6")
	e.addPod("p-nogroup", "127.0.0.7", map[string]string{"app": "ds", "role": "prefill"})

	ms := modelServer("ds", e.port, headerSticky(300, "X-Session-ID"))
	ms.Object["spec"].(map[string]any)["workloadSelector"] = map[string]any{
		"matchLabels": map[string]any{"app": "ds"},
		"pdGroup": map[string]any{"groupKey": "pd-group",
			"prefillLabels": map[string]any{"role": "prefill"}, "decodeLabels": map[string]any{"role": "decode"}},
	}
	if _, err := e.c.Dynamic(t).Resource(cluster.ModelServerGVR).Namespace(e.ns).Create(t.Context(), ms, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.startModelServerRouter("router-0", "127.0.1.1", "ds")
	r.waitSelectable("prefill", 3)
	r.waitSelectable("decode", 2)

	for i := 0; i < 8; i++ {
		s := fmt.Sprintf("s12pd-%d", i)
		var first [2]string
		for j := 0; j < 3; j++ {
			decode := r.turn(s)
			a := r.lastAccess(s)
			prefill := strings.TrimPrefix(a.PrefillPod, e.ns+"/")
			if prefill == "" || group[prefill] == "" || group[prefill] != group[decode] {
				t.Fatalf("session %s: prefill %q and decode %s are not one group's pair (access log %+v)", s, prefill, decode, a)
			}
			if j == 0 {
				first = [2]string{prefill, decode}
			} else if pair := [2]string{prefill, decode}; pair != first {
				t.Fatalf("session %s moved from pair %v to %v", s, first, pair)
			}
		}
		if b, ok := r.binding(s); !ok || !strings.Contains(b.Prefill, "/"+first[0]+"/") {
			t.Fatalf("session %s binding %+v does not record prefill pod %s", s, b, first[0])
		}
	}
}

// TestScenario12ModelServerTTLZero: Kthena's admission refuses an
// explicit sessionAffinitySeconds: 0 (minimum 1 when set), and so does the
// API server with the CRD, naming the field.
func TestScenario12ModelServerTTLZero(t *testing.T) {
	e, ms := modelServerEnv(t, "s12z")
	_, err := ms.Create(t.Context(), modelServer("ds", e.port, headerSticky(0, "X-Session-ID")), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.trafficPolicy.sessionSticky.sessionAffinitySeconds") {
		t.Fatalf("create with sessionAffinitySeconds 0: %v, want Invalid naming the field", err)
	}
}

// conversationTurn sends a turn keyed by X-Conversation only.
func (r *router) conversationTurn(conv string) string {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.listen+"/v1/chat/completions",
		strings.NewReader(`{"model":"modelsim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Conversation", conv)
	resp, err := client.Do(req)
	r.requests++
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("conversation %s: %s", conv, resp.Status)
	}
	return resp.Header.Get("X-Modelsim-Id")
}

// logged reports whether the sidecar wrote a line containing s.
func (r *router) logged(s string) bool {
	for _, l := range r.Lines() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// latestAccess is the access-log line of the latest request, for turns
// without a session key (their lines carry no key hash).
func (r *router) latestAccess() cluster.AccessLog {
	r.t.Helper()
	n := r.requests
	var logs []cluster.AccessLog
	testkit.Eventually(r.t, 10*time.Second, fmt.Sprintf("%d access-log lines", n), func() error {
		if logs = r.AccessLogs(); len(logs) < n {
			return fmt.Errorf("%d lines so far", len(logs))
		}
		return nil
	})
	return logs[len(logs)-1]
}
