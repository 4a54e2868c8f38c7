package observe_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/logbuf"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// system is what Prometheus scrapes: three sidecars (one on Redis, two
// in a gossip ring with Kubernetes discovery), their modelsim backends
// and an injector, with load on all of them.
type system struct {
	redis    *redistest.Server
	sims     []*httptest.Server
	models   []*sim.Server // sims[i]'s handler (its fault switch)
	sidecars []*sidecar
	injector *injector
}

// sidecar is an in-process server.Server with its scrape labels.
type sidecar struct {
	srv       *server.Server
	namespace string
	pod       string
}

// injector is an in-process tether-injector serving certificates from a
// directory, as in cert-manager mode.
type injector struct {
	app    *app.App
	reg    *prometheus.Registry
	client *http.Client
}

const (
	sessionHeader = "X-Session-ID"
	routerNS      = "llm"
	injectorNS    = "tether-system"
	// certLifetime is short enough for TetherWebhookCertificateExpiring
	// (under 14 days) to go pending: the alert is seen working, not only
	// parsing.
	certLifetime = 10 * 24 * time.Hour
)

func startSystem(t *testing.T) *system {
	t.Helper()
	s := &system{redis: redistest.Start(t)}
	for i := range 3 {
		model := sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", i), PrefillPerToken: 20 * time.Microsecond, DecodePerToken: time.Millisecond})
		srv := httptest.NewServer(model)
		t.Cleanup(srv.Close)
		s.sims, s.models = append(s.sims, srv), append(s.models, model)
	}
	// A backend that is down: its sessions are rebound (connect_failed),
	// retried and the backend is ejected, then tried again after
	// proxy.failTimeout.
	dead := cluster.FreeAddr(t, "127.0.0.1")

	static, _ := json.Marshal([]string{hostPort(s.sims[0]), hostPort(s.sims[1]), hostPort(s.sims[2]), dead})
	s.sidecars = append(s.sidecars, startSidecar(t, "router-redis-0", nil, fmt.Sprintf(`
store: {backend: redis, redis: {address: %q, timeout: 200ms}}
pools:
  - name: chat
    sessionSticky: {sessionAffinitySeconds: 300, sources: [{type: Header, name: %s}]}
    backends: {static: %s}
    loadMetrics: {interval: 1s}
`, s.redis.Addr, sessionHeader, static)))

	// The gossip ring: two replicas, encrypted, discovering their one
	// model-server pod through the Kubernetes API.
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, simPort, _ := net.SplitHostPort(hostPort(s.sims[0]))
	// The ring's pools: chat has one Ready pod, batch only a pod that is
	// not Ready, so batch has no selectable backend and answers 503
	// (TetherNoSelectableBackend fires for it).
	kube := fake.NewClientset(modelPod("modelsim-0", "chat-model", corev1.ConditionTrue), modelPod("batch-0", "batch-model", corev1.ConditionFalse))
	var seed string
	for i := range 2 {
		bind := cluster.FreeAddr(t, "127.0.0.1")
		join := "[]"
		if seed != "" {
			join = fmt.Sprintf("[%q]", seed)
		}
		s.sidecars = append(s.sidecars, startSidecar(t, fmt.Sprintf("router-gossip-%d", i), kube, fmt.Sprintf(`
store: {backend: gossip, gossip: {bind: %q, advertise: %q, join: %s, secretKeyFile: %q}}
pools:
  - name: chat
    sessionSticky: {sessionAffinitySeconds: 300, sources: [{type: Header, name: %s}]}
    backends: {kubernetes: {selector: app=chat-model, port: %[6]s}}
  - name: batch
    listen: %[7]q
    sessionSticky: {sessionAffinitySeconds: 300, sources: [{type: Header, name: %[5]s}]}
    backends: {kubernetes: {selector: app=batch-model, port: %[6]s}}
`, bind, bind, join, keyFile, sessionHeader, simPort, cluster.FreeAddr(t, "127.0.0.1"))))
		seed = bind
	}
	s.injector = startInjector(t)
	return s
}

func modelPod(name, app string, ready corev1.ConditionStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: routerNS, Name: name, Labels: map[string]string{"app": app}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
	}
}

func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func startSidecar(t *testing.T, pod string, kube *fake.Clientset, doc string) *sidecar {
	t.Helper()
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n" + doc))
	if err != nil {
		t.Fatalf("%s config: %v", pod, err)
	}
	deps := server.Deps{Namespace: routerNS, PodName: pod, PodIP: "127.0.0.1"}
	if kube != nil {
		deps.Kube = kube
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(context.Background(), cfg, log, deps)
	if err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	// As main: the log's dropped lines exported (its writer discards).
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		logbuf.ReportDrops(ctx, logbuf.New(io.Discard, 64<<10, 100*time.Millisecond), logbuf.ReportOptions{Log: log, Registerer: srv.Registry(), Every: 10 * time.Second})
	}()
	t.Cleanup(func() { cancel(); <-reported }) // before the cleanup above: the last added runs first
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", pod, err)
		}
	})
	testkit.Eventually(t, 15*time.Second, pod+" ready", func() bool {
		resp, err := http.Get("http://" + srv.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &sidecar{srv: srv, namespace: routerNS, pod: pod}
}

func startInjector(t *testing.T) *injector {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA("tether-observe-test", now, certLifetime)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := certs.NewServing(ca, []string{"localhost"}, nil, now, certLifetime)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var cfg app.Config
	fs := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "")
	if err := fs.Parse([]string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--cert-dir=" + dir,
		"--manage-rbac=false", "--sidecar-image=example.com/tether-sidecar:test"}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := app.New(cfg, nil, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("injector: Run: %v", err)
		}
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	inj := &injector{app: a, reg: reg, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	testkit.Eventually(t, 15*time.Second, "injector serving TLS", func() bool {
		resp, err := inj.client.Get("https://" + a.WebhookAddr().String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return inj
}

// routerPod is the injector's golden router pod, as the API server sends it.
func routerPod(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "injector", "inject", "testdata", "in", "router.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func review(pod []byte) []byte {
	b, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "0b9a2c4e-1111-2222-3333-444455556666",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: routerNS,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: pod},
		},
	})
	return b
}

// load drives the system until ctx ends: multi-turn conversations through
// every sidecar (turns of one session go to one sidecar, as a router
// replica's would, but sessions are shared between the gossip replicas),
// and admissions of every kind through the injector.
func (s *system) load(ctx context.Context, router []byte) {
	reviews := [][]byte{
		review(router), // injected
		review(bytes.Replace(router, []byte(`"5m"`), []byte(`"forever"`), 1)), // denied: invalid tether.dev/ttl
		[]byte(`{"kind":"AdmissionReview"`),                                   // error: not JSON
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 6 {
		wg.Go(func() {
			for turn := 0; ctx.Err() == nil; turn++ {
				session := fmt.Sprintf("session-%d-%d", w, turn/4) // four turns, then a new conversation
				sc := s.sidecars[w%len(s.sidecars)]
				if w%len(s.sidecars) != 0 && turn%2 == 1 { // the other gossip replica
					sc = s.sidecars[1+(w+1)%2]
				}
				chat(ctx, client, "http://"+sc.srv.PoolAddr("chat"), session, turn%4+1)
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}
	wg.Go(func() { // the batch pool, which has no selectable backend
		for i := 0; ctx.Err() == nil; i++ {
			chat(ctx, client, "http://"+s.sidecars[1+i%2].srv.PoolAddr("batch"), fmt.Sprintf("batch-%d", i%4), 1)
			sleep(ctx, 250*time.Millisecond)
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			resp, err := s.injector.client.Post("https://"+s.injector.app.WebhookAddr().String()+"/mutate",
				"application/json", bytes.NewReader(reviews[i%len(reviews)]))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			sleep(ctx, 200*time.Millisecond)
		}
	})
}

// chat sends one turn of session's conversation (turns messages long, so
// later turns share a prefix with earlier ones).
func chat(ctx context.Context, c *http.Client, base, session string, turns int) {
	var msgs []string
	for i := range turns {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat(session+" turn "+strconv.Itoa(i)+" ", 12)))
	}
	body := `{"model":"modelsim","max_tokens":4,"messages":[` + strings.Join(msgs, ",") + `]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sessionHeader, session)
	resp, err := c.Do(req)
	if err != nil {
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
