package server_test

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// podServer is an HTTP server standing in for a model-server pod: it
// answers with its name and records the prefill address the sidecar
// gave it (x-prefiller-host-port, for a decode pod).
type podServer struct {
	name    string
	srv     *httptest.Server
	prefill chan string
}

func (p *podServer) port() int {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.srv.URL, "http://"))
	n, _ := strconv.Atoi(port)
	return n
}

func startPodServer(t *testing.T, name string) *podServer {
	t.Helper()
	p := &podServer{name: name, prefill: make(chan string, 64)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case p.prefill <- r.Header.Get("x-prefiller-host-port"):
		default:
		}
		w.Header().Set("X-Modelsim-Id", name)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// podObject is the Running, Ready pod of a podServer: all on 127.0.0.1,
// each with its own container port named "http".
func podObject(p *podServer, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: p.name, UID: types.UID("uid-" + p.name), Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(p.port())}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// TestLLMDTokensPinBothHalves: a PD pool reads llm-d's plain tokens back
// for both halves (allowUnsigned): x-session-token names the decode pod,
// x-session-token-prefill the prefill pod, and every turn goes to exactly
// that pair, where without the prefill token the prefill pod would be any
// of the group's. The response carries both tokens under the same names.
// The prefill header's name is configurable (sessionToken.prefillHeader).
func TestLLMDTokensPinBothHalves(t *testing.T) {
	for _, prefillHeader := range []string{"", "x-prefill-pin"} {
		name := prefillHeader
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) { testLLMDTokens(t, prefillHeader) })
	}
}

func testLLMDTokens(t *testing.T, prefillHeader string) {
	yamlHeader, readHeader := "", "x-session-token-prefill" // llm-d's name, the default
	if prefillHeader != "" {
		yamlHeader, readHeader = ", prefillHeader: "+prefillHeader, prefillHeader
	}
	p0, p1, p2, d0 := startPodServer(t, "p-0"), startPodServer(t, "p-1"), startPodServer(t, "p-2"), startPodServer(t, "d-0")
	prefill := map[string]string{"role": "prefill", "pd-group": "a"}
	objs := []runtime.Object{
		podObject(p0, prefill), podObject(p1, prefill), podObject(p2, prefill),
		podObject(d0, map[string]string{"role": "decode", "pd-group": "a"}),
	}
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: llm/pd
    sessionSticky:
      sources: [{type: Token, name: x-session-token}, {type: Header, name: X-Session-ID}]
    sessionToken: {keyFile: %s, allowUnsigned: true%s}
    backends:
      prefill: {selector: role=prefill, portName: http}
      decode: {selector: role=decode, portName: http}
      groupLabel: pd-group
`, writeKey(t), yamlHeader)
	sc := startSidecarWith(t, doc, server.Deps{Kube: fake.NewClientset(objs...), Namespace: "llm"})
	plain := func(name string) string { return base64.StdEncoding.EncodeToString([]byte(name)) }
	send := func(set func(*http.Request)) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", sc.url("llm/pd", "/v1/chat/completions"), strings.NewReader(`{"model":"m"}`))
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		select {
		case got := <-d0.prefill:
			return resp, got
		case <-time.After(10 * time.Second):
			t.Fatal("the decode pod saw no request")
		}
		return nil, ""
	}
	for _, want := range []*podServer{p1, p2, p0} {
		for i := 0; i < 8; i++ {
			resp, got := send(func(r *http.Request) {
				r.Header.Set("x-session-token", plain("llm/d-0"))
				r.Header.Set(readHeader, plain("llm/"+want.name))
			})
			if got != want.srv.Listener.Addr().String() {
				t.Fatalf("turn %d pinned to %s: the decode pod was given prefill %s, want %s", i, want.name, got, want.srv.Listener.Addr())
			}
			if resp.Header.Get("x-session-token") == "" || resp.Header.Get(readHeader) == "" {
				t.Fatalf("response tokens: %q, %s %q", resp.Header.Get("x-session-token"), readHeader, resp.Header.Get(readHeader))
			}
		}
	}
	testkit.Eventually(t, 5*time.Second, "access log lines", func() bool {
		return strings.Count(sc.logs.String(), `"prefill_pod":"llm/p-1"`) == 8
	})

	// The tokens the sidecar wrote, echoed back as a client would, keep
	// the pair: the signed decode token names the prefill half too.
	resp, first := send(func(r *http.Request) { r.Header.Set("X-Session-ID", "fresh") })
	for i := 0; i < 6; i++ {
		if _, got := send(func(r *http.Request) {
			r.Header.Set("x-session-token", resp.Header.Get("x-session-token"))
			r.Header.Set(readHeader, resp.Header.Get(readHeader))
		}); got != first {
			t.Fatalf("echoed tokens: prefill %s, the pair's is %s", got, first)
		}
	}
}
