package app_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/sidecar/buildinfo"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func parseFlags(t *testing.T, args ...string) app.Config {
	t.Helper()
	var cfg app.Config
	fs := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func routerPod(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "inject", "testdata", "in", "router.yaml"))
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
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "0b9a2c4e-1111-2222-3333-444455556666",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "llm",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: pod},
		},
	}
	b, _ := json.Marshal(r)
	return b
}

// TestAdmissionOverHTTPS runs the whole injector in self-managed mode
// against a fake API, and sends AdmissionReviews over real TLS on a
// loopback port, trusting only the CA the injector generated and put in
// the webhook configuration's caBundle.
func TestAdmissionOverHTTPS(t *testing.T) {
	client := fake.NewClientset(
		&admissionregv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "tether-injector"},
			Webhooks:   []admissionregv1.MutatingWebhook{{Name: "ns.inject.tether.dev"}, {Name: "pod.inject.tether.dev"}},
		},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm", Labels: map[string]string{"tether.dev/injection": "enabled"}}},
		// A router pod stored after its injection: its account gets the binding.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "router-0", Labels: map[string]string{"tether.dev/injected": "true"}},
			Spec: corev1.PodSpec{ServiceAccountName: "router"}},
	)
	cfg := parseFlags(t, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--self-managed-certs",
		"--extra-san=127.0.0.1", "--namespace=tether-system", "--sidecar-image=example.com/tether-sidecar:test")
	reg := prometheus.NewRegistry()
	a, err := app.New(cfg, client, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	var bundle []byte
	testkit.Eventually(t, 15*time.Second, "the caBundle patched", func() bool {
		cfg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "tether-injector", metav1.GetOptions{})
		if err == nil && len(cfg.Webhooks[1].ClientConfig.CABundle) > 0 {
			bundle = cfg.Webhooks[1].ClientConfig.CABundle
			return true
		}
		return false
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("no CA in caBundle")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "https://" + a.WebhookAddr().String()

	post := func(path string, body []byte) (int, *admissionv1.AdmissionReview) {
		t.Helper()
		resp, err := hc.Post(base+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("response: %v: %s", err, b)
		}
		return resp.StatusCode, &out
	}

	// Injected: the patch applies and adds the native sidecar.
	pod := routerPod(t)
	code, out := post("/mutate", review(pod))
	if code != 200 || !out.Response.Allowed || out.Response.PatchType == nil || out.Response.UID != "0b9a2c4e-1111-2222-3333-444455556666" {
		t.Fatalf("injection: %d %+v", code, out)
	}
	patch, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Name != "tether-sidecar" ||
		got.Spec.InitContainers[0].Image != "example.com/tether-sidecar:test" {
		t.Fatalf("no sidecar in the patched pod: %+v", got.Spec.InitContainers)
	}

	// The opt-in entry leaves pods that did not opt in alone.
	if code, out := post("/mutate/opt-in", review(pod)); code != 200 || !out.Response.Allowed || out.Response.Patch != nil {
		t.Fatalf("opt-in entry: %d %+v", code, out)
	}

	// A bad annotation is denied with its name in the message.
	bad := bytes.Replace(pod, []byte(`"tether.dev/ttl":"5m"`), []byte(`"tether.dev/ttl":"500ms"`), 1)
	if code, out := post("/mutate", review(bad)); code != 200 || out.Response.Allowed ||
		!strings.Contains(out.Response.Result.Message, `tether.dev/ttl: must be at least 1s, got "500ms"`) {
		t.Fatalf("denial: %d %+v", code, out)
	}

	// Malformed and oversized bodies.
	if code, _ := post("/mutate", []byte("{not json")); code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d, want 400", code)
	}
	if code, _ := post("/mutate", bytes.Repeat([]byte(" "), 2<<20)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d, want 413", code)
	}
	resp, err := hc.Get(base + "/mutate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", resp.StatusCode)
	}

	// Admin listener: ready, and the counters moved.
	admin := "http://" + a.AdminAddr().String()
	for _, p := range []string{"/healthz", "/readyz"} {
		r, err := hc.Get(admin + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d", p, r.StatusCode)
		}
	}
	r, err := hc.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(r.Body)
	r.Body.Close()
	bi := buildinfo.Get()
	for _, want := range []string{
		`tether_injector_admissions_total{result="injected"} 1`,
		`tether_injector_admissions_total{result="denied"} 1`,
		`tether_injector_admissions_total{result="not_selected"} 1`,
		`tether_injector_admissions_total{result="error"} 3`,
		`tether_injector_duration_seconds_count`,
		fmt.Sprintf("tether_build_info{goversion=%q,revision=%q,version=%q} 1", bi.GoVersion, bi.Revision, bi.Version),
		`tether_injector_admissions_total{result="host_network"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The serving certificate's expiry, as served.
	conn, err := tls.Dial("tcp", a.WebhookAddr().String(), &tls.Config{RootCAs: roots, ServerName: "tether-injector.tether-system.svc", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	notAfter := conn.ConnectionState().PeerCertificates[0].NotAfter
	conn.Close()
	if want := fmt.Sprintf("tether_injector_certificate_expiry_timestamp_seconds %s\n", strconv.FormatFloat(float64(notAfter.Unix()), 'g', -1, 64)); !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %q", want)
	}

	// The RoleBinding controller ran too, for the injected pod's account.
	testkit.Eventually(t, 15*time.Second, "the RoleBinding for the injected pod's account", func() bool {
		rb, err := client.RbacV1().RoleBindings("llm").Get(ctx, "tether-sidecar", metav1.GetOptions{})
		return err == nil && len(rb.Subjects) == 1 && rb.Subjects[0].Name == "router" && rb.Subjects[0].Kind == "ServiceAccount"
	})
}

// TestCertDirMode serves a certificate from files (cert-manager mode) with
// no API server at all.
func TestCertDirMode(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA("test", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := certs.NewServing(ca, []string{"localhost"}, nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), kp.CertPEM, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "tls.key"), kp.KeyPEM, 0o600)
	cfg := parseFlags(t, "--listen=127.0.0.1:0", "--admin-listen=", "--cert-dir="+dir, "--manage-rbac=false")
	a, err := app.New(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}
	defer tr.CloseIdleConnections()
	var resp *http.Response
	testkit.Eventually(t, 15*time.Second, "the webhook serving TLS", func() bool {
		resp, err = (&http.Client{Transport: tr}).Get("https://" + a.WebhookAddr().String() + "/readyz")
		return err == nil
	})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz: %d", resp.StatusCode)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--listen=127.0.0.1:0"}, // no certificate source
		{"--listen=127.0.0.1:0", "--cert-dir=x", "--self-managed-certs"},
		{"--listen=127.0.0.1:0", "--cert-dir=x", "--sidecar-memory-limit=lots"},
		{"--listen=127.0.0.1:0", "--cert-dir=x", "--default-store=disk"},
		{"--listen=127.0.0.1:0", "--cert-dir=x", "--sidecar-image-pull-policy=Sometimes"},
	} {
		cfg := parseFlags(t, append(args, "--admin-listen=", "--manage-rbac=false")...)
		if a, err := app.New(cfg, fake.NewClientset(), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry()); err == nil {
			a.Run(canceled())
			t.Errorf("accepted %v", args)
		}
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
