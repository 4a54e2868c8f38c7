package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/sidecar/modelserver"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// samePortServers starts n model servers on 127.0.0.2, 127.0.0.3, ...
// all on one port, as the pods of one Deployment listen: a ModelServer
// names one port for all its pods. X-Slow holds the response headers
// until the client gives up; X-Slow-Body sends headers at once and the
// body a second later.
func samePortServers(t *testing.T, n int) (port int, names []string) {
	t.Helper()
	for attempt := 0; attempt < 10; attempt++ {
		lns, err := listenSamePort(n)
		if err != nil {
			continue
		}
		_, p, _ := net.SplitHostPort(lns[0].Addr().String())
		port, _ = strconv.Atoi(p)
		for i, ln := range lns {
			name := fmt.Sprintf("ds-%d", i)
			names = append(names, name)
			srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if r.Header.Get("X-Slow") != "" {
					select {
					case <-r.Context().Done():
					case <-time.After(20 * time.Second):
					}
					return
				}
				w.Header().Set("X-Modelsim-Id", name)
				if r.Header.Get("X-Slow-Body") != "" {
					w.WriteHeader(200)
					w.(http.Flusher).Flush()
					time.Sleep(time.Second)
				}
				io.WriteString(w, `{"choices":[]}`)
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
		}
		return port, names
	}
	t.Fatal("no port free on every loopback address")
	return 0, nil
}

func listenSamePort(n int) ([]net.Listener, error) {
	first, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{first}
	_, port, _ := net.SplitHostPort(first.Addr().String())
	for i := 1; i < n; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%s", 2+i, port))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func modelServerObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte("apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelServer\nmetadata: {namespace: llm, name: ds}\n" + doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(j, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// readyPods are Ready pods app=ds in namespace llm named names, on
// 127.0.0.2, 127.0.0.3, ... (samePortServers).
func readyPods(names []string) []runtime.Object {
	var objs []runtime.Object
	for i, name := range names {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "ds"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("127.0.0.%d", 2+i),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return objs
}

// TestModelServerBodySource: a ModelServer's sessionSticky may read the
// session from a field of the JSON body, a path the listener was not
// built with: every session keeps its pod, and the decisions say so.
func TestModelServerBodySource(t *testing.T) {
	port, names := samePortServers(t, 2)
	spec := fmt.Sprintf(`spec:
  workloadSelector: {matchLabels: {app: ds}}
  workloadPort: {port: %d}
  model: m1
  trafficPolicy:
    sessionSticky:
      sessionAffinitySeconds: 120
      sources: [{type: Body, name: metadata.conversation}]
`, port)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{modelserver.GVR: "ModelServerList"}, modelServerObject(t, spec))
	doc := "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  - name: llm/ds\n    backends: {modelServer: {name: ds}}\n"
	sc := startSidecarWith(t, doc, server.Deps{Kube: fake.NewClientset(readyPods(names)...), Dynamic: dyn, Namespace: "llm"})
	testkit.Eventually(t, 10*time.Second, "both pods selectable", func() error {
		v, err := testkit.FindMetric(sc.srv.Registry(), "tether_backends_selectable", "pool", "llm/ds", "role", "backend")
		if err != nil || v != 2 {
			return fmt.Errorf("tether_backends_selectable = %v, %v", v, err)
		}
		return nil
	})
	send := func(conversation string) string {
		t.Helper()
		body := `{"model":"m1","metadata":{"conversation":"` + conversation + `"},"messages":[{"role":"user","content":"hi"}]}`
		resp, err := http.Post(sc.url("llm/ds", "/v1/chat/completions"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Modelsim-Id")
	}
	const sessions, turns = 8, 4
	for i := range sessions {
		home := send(fmt.Sprint("c", i))
		for range turns - 1 {
			if got := send(fmt.Sprint("c", i)); got != home {
				t.Fatalf("conversation c%d moved from %s to %s", i, home, got)
			}
		}
	}
	var decisions []string
	testkit.Eventually(t, 5*time.Second, "every access-log line", func() bool {
		decisions = decisions[:0]
		for _, l := range sc.accessLogs(t) {
			decisions = append(decisions, l.Decision+"/"+l.Source)
		}
		return len(decisions) == sessions*turns
	})
	for i, d := range decisions {
		want := "hit/Body"
		if i%turns == 0 {
			want = "miss/Body"
		}
		if d != want {
			t.Fatalf("request %d: decision/source %s, want %s", i, d, want)
		}
	}
}

// TestModelServerPool: a pool defined by a ModelServer through the real
// proxy: picked on a shared listener by the object's model, sticky by its
// sessionSticky, bounded by its trafficPolicy.timeout for the response
// headers (504) but not for the body, non-sticky once an edit removes
// sessionSticky, and answering a clear 503 once the object is deleted.
func TestModelServerPool(t *testing.T) {
	port, names := samePortServers(t, 2)
	objs := readyPods(names)
	spec := fmt.Sprintf(`spec:
  workloadSelector: {matchLabels: {app: ds}}
  workloadPort: {port: %d}
  model: m1
  inferenceEngine: vLLM
  trafficPolicy:
    timeout: 500ms
    sessionSticky:
      sessionAffinitySeconds: 120
      sources: [{type: Header, name: X-Session-ID}]
`, port)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{modelserver.GVR: "ModelServerList"}, modelServerObject(t, spec))
	other := startBackends(t, 1)
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: llm/ds
    backends: {modelServer: {name: ds}}
  - name: llm/static
    models: [static-model]
    backends: {static: [%q]}
`, other[0].addr())
	sc := startSidecarWith(t, doc, server.Deps{Kube: fake.NewClientset(objs...), Dynamic: dyn, Namespace: "llm"})
	send := func(model, session string, hdr ...string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", sc.url("llm/ds", "/v1/chat/completions"), strings.NewReader(`{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		if session != "" {
			req.Header.Set("X-Session-ID", session)
		}
		for _, h := range hdr {
			req.Header.Set(h, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Modelsim-Id"), string(b)
	}
	testkit.Eventually(t, 10*time.Second, "both pods selectable", func() error {
		v, err := testkit.FindMetric(sc.srv.Registry(), "tether_backends_selectable", "pool", "llm/ds", "role", "backend")
		if err != nil || v != 2 {
			return fmt.Errorf("tether_backends_selectable = %v, %v", v, err)
		}
		return nil
	})

	// The listener picks the pool by the object's model; the session sticks.
	code, home, _ := send("m1", "s1")
	if code != 200 || (home != "ds-0" && home != "ds-1") {
		t.Fatalf("model m1: %d from %q", code, home)
	}
	for i := 0; i < 10; i++ {
		if _, got, _ := send("m1", "s1"); got != home {
			t.Fatalf("sticky session moved from %s to %s", home, got)
		}
	}
	if code, got, _ := send("static-model", "s1"); code != 200 || got != "sim-0" {
		t.Fatalf("static pool on the shared listener: %d from %q", code, got)
	}
	if code, _, body := send("m9", "s1"); code != 404 {
		t.Fatalf("a model nobody serves: %d %s", code, body)
	}

	// trafficPolicy.timeout bounds the wait for headers, not the body. It
	// is each attempt's: the timed-out attempt is retried on the other
	// pod (the session moves there), which times out too.
	if code, _, body := send("m1", "s1", "X-Slow"); code != http.StatusGatewayTimeout || !strings.Contains(body, "timed out") {
		t.Fatalf("headers later than the timeout: %d %s", code, body)
	}
	if got := sc.metric(t, "tether_upstream_retries_total", "reason", "timeout"); got != 1 {
		t.Fatalf("tether_upstream_retries_total{reason=timeout} = %v after both pods timed out, want 1", got)
	}
	home = map[string]string{"ds-0": "ds-1", "ds-1": "ds-0"}[home]
	if code, got, body := send("m1", "s1", "X-Slow-Body"); code != 200 || got != home || !strings.Contains(body, "choices") {
		t.Fatalf("a body longer than the timeout: %d from %q: %s", code, got, body)
	}

	// The edit: no sessionSticky any more, another model. No restart.
	edited := modelServerObject(t, fmt.Sprintf("spec:\n  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: %d}\n  model: m2\n", port))
	if _, err := dyn.Resource(modelserver.GVR).Namespace("llm").Update(context.Background(), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the edit applied", func() bool { c, _, _ := send("m2", "s1"); return c == 200 })
	seen := map[string]bool{}
	for i := 0; i < 40; i++ {
		_, got, _ := send("m2", "s1")
		seen[got] = true
	}
	if len(seen) != 2 {
		t.Fatalf("a non-sticky pool kept session s1 on %v", seen)
	}
	if code, _, _ := send("m1", "s1"); code != 404 {
		t.Fatalf("the old model is still served: %d", code)
	}

	// Deleted: its model's requests get a 503 that says why, and a log line.
	if err := dyn.Resource(modelserver.GVR).Namespace("llm").Delete(context.Background(), "ds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "503 after the deletion", func() error {
		code, _, body := send("m2", "s1")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "pool llm/ds: pool unavailable: ModelServer llm/ds does not exist") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if !strings.Contains(sc.logs.String(), "ModelServer not found: the pool answers 503 until it exists again") {
		t.Fatalf("no log line for the deletion:\n%s", sc.logs)
	}
	if code, _, _ := send("static-model", "s1"); code != 200 {
		t.Fatalf("the other pool of the listener: %d", code)
	}
}
