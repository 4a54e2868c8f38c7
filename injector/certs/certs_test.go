package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// webhookConfig has two entries in an order unlike the injector's list,
// so patching by index would hit the wrong one.
func webhookConfig() *admissionv1.MutatingWebhookConfiguration {
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tether"},
		Webhooks: []admissionv1.MutatingWebhook{
			{Name: "unrelated.example.com", ClientConfig: admissionv1.WebhookClientConfig{CABundle: []byte("keep")}},
			{Name: "pod.inject.tether.dev"},
			{Name: "ns.inject.tether.dev"},
		},
	}
}

func manager(client *fake.Clientset, clk *testkit.Clock) *certs.SelfManaged {
	return &certs.SelfManaged{
		Client: client, Namespace: "tether-system", SecretName: "tether-injector-tls", ServiceName: "tether-injector",
		ExtraSANs: []string{"127.0.0.1", "injector.test"}, WebhookConfig: "tether",
		Webhooks:   []string{"ns.inject.tether.dev", "pod.inject.tether.dev"},
		CALifetime: 300 * time.Hour, CertLifetime: 30 * time.Hour,
		Store: &certs.Store{}, Log: quiet(), Now: clk.Now,
	}
}

func bundleOf(t *testing.T, client *fake.Clientset, name string) []byte {
	t.Helper()
	cfg, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "tether", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Webhooks {
		if w.Name == name {
			return w.ClientConfig.CABundle
		}
	}
	t.Fatalf("no webhook %s", name)
	return nil
}

// verify checks the Store's certificate against the caBundle for a name.
func verify(t *testing.T, s *certs.Store, bundle []byte, name string) *x509.Certificate {
	t.Helper()
	c, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("caBundle holds no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: leaf.NotBefore.Add(time.Hour)}); err != nil {
		t.Fatalf("serving certificate does not verify for %s: %v", name, err)
	}
	return leaf
}

func TestSelfManagedCreatesSharesAndRenews(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clk := testkit.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))

	a := manager(client, clk)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	bundle := bundleOf(t, client, "ns.inject.tether.dev")
	if string(bundleOf(t, client, "pod.inject.tether.dev")) != string(bundle) {
		t.Fatal("the two webhooks got different bundles")
	}
	if string(bundleOf(t, client, "unrelated.example.com")) != "keep" {
		t.Fatal("an unrelated webhook was patched")
	}
	first := verify(t, a.Store, bundle, "tether-injector.tether-system.svc")
	verify(t, a.Store, bundle, "injector.test")
	if len(first.IPAddresses) != 1 || first.IPAddresses[0].String() != "127.0.0.1" {
		t.Fatalf("extra IP SAN missing: %v", first.IPAddresses)
	}

	// A second replica shares the Secret: same certificate, no new write.
	b := manager(client, clk)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if string(b.Store.Current().CertPEM) != string(a.Store.Current().CertPEM) {
		t.Fatal("replicas serve different certificates")
	}

	// Past two thirds of the serving lifetime: a new serving certificate
	// from the same CA, and the caBundle stays as it was.
	clk.Add(21 * time.Hour)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if string(b.Store.Current().CertPEM) == string(a.Store.Current().CertPEM) {
		t.Fatal("serving certificate not renewed")
	}
	if string(bundleOf(t, client, "ns.inject.tether.dev")) != string(bundle) {
		t.Fatal("caBundle changed on a serving renewal")
	}
	verify(t, b.Store, bundle, "tether-injector.tether-system.svc")
	// Replica a picks up b's renewal from the Secret.
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if string(b.Store.Current().CertPEM) != string(a.Store.Current().CertPEM) {
		t.Fatal("replica a did not load the renewed certificate")
	}

	// Past two thirds of the CA lifetime: a new CA; the bundle holds both
	// so a replica still serving the old chain stays trusted.
	old := a.Store.Current()
	clk.Add(200 * time.Hour)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	nb := bundleOf(t, client, "pod.inject.tether.dev")
	cas, err := certs.ParseCerts(nb)
	if err != nil || len(cas) != 2 {
		t.Fatalf("bundle after CA renewal has %d CAs (%v), want 2", len(cas), err)
	}
	verify(t, a.Store, nb, "tether-injector.tether-system.svc")
	oldStore := &certs.Store{}
	if _, err := oldStore.Set(old); err != nil {
		t.Fatal(err)
	}
	verify(t, oldStore, nb, "tether-injector.tether-system.svc")

	// Once the old CA expired it leaves the bundle.
	clk.Add(101 * time.Hour)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cas, _ := certs.ParseCerts(bundleOf(t, client, "ns.inject.tether.dev")); len(cas) != 1 {
		t.Fatalf("expired CA kept in the bundle: %d CAs", len(cas))
	}
}

func TestSelfManagedConflictRetries(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clk := testkit.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	conflicts := 0
	// The first create loses the race: AlreadyExists, as if another
	// replica had created the Secret a moment before.
	client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			winner := manager(fake.NewClientset(webhookConfig()), clk)
			if err := winner.Sync(ctx); err != nil {
				t.Error(err)
			}
			sec, _ := winner.Client.CoreV1().Secrets("tether-system").Get(ctx, "tether-injector-tls", metav1.GetOptions{})
			if err := client.Tracker().Add(sec); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "tether-injector-tls")
		}
		return false, nil, nil
	})
	m := manager(client, clk)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sec, err := client.CoreV1().Secrets("tether-system").Get(ctx, "tether-injector-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[certs.KeyTLSCert]) != string(m.Store.Current().CertPEM) {
		t.Fatal("the loser of the race does not serve the winner's certificate")
	}
}

func TestSelfManagedMissingWebhook(t *testing.T) {
	client := fake.NewClientset(webhookConfig())
	m := manager(client, testkit.NewClock(time.Now()))
	m.Webhooks = []string{"nope.tether.dev"}
	if err := m.Sync(context.Background()); err == nil {
		t.Fatal("a missing webhook name was not reported")
	}
}

// TestSelfManagedRunRepatches: a GitOps tool resets caBundle; Run puts it
// back (the informer triggers a sync long before the interval).
func TestSelfManagedRunRepatches(t *testing.T) {
	client := fake.NewClientset(webhookConfig())
	m := manager(client, testkit.NewClock(time.Now()))
	m.Now = nil
	m.Interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testkit.Eventually(t, 10*time.Second, "a caBundle", func() bool { return len(bundleOf(t, client, "ns.inject.tether.dev")) > 0 })
	want := bundleOf(t, client, "ns.inject.tether.dev")
	cfg, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "tether", metav1.GetOptions{})
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == "ns.inject.tether.dev" {
			cfg.Webhooks[i].ClientConfig.CABundle = nil
		}
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the caBundle restored", func() bool { return string(bundleOf(t, client, "ns.inject.tether.dev")) == string(want) })
}

func TestDirWatcherReloads(t *testing.T) {
	dir := t.TempDir()
	write := func(kp certs.KeyPair) {
		// The kubelet swaps a symlinked directory; writing in place is the
		// harder case (a torn pair is possible) and must also converge.
		if err := os.WriteFile(filepath.Join(dir, "tls.crt"), kp.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.key"), kp.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	ca, err := certs.NewCA("test", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := certs.NewServing(ca, []string{"one"}, nil, now, time.Hour)
	two, _ := certs.NewServing(ca, []string{"two"}, nil, now, time.Hour)
	write(one)
	store := &certs.Store{}
	w := &certs.DirWatcher{Dir: dir, Interval: 10 * time.Millisecond, Store: store, Log: quiet()}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	write(two)
	testkit.Eventually(t, 10*time.Second, "the new pair loaded", func() bool { return string(store.Current().CertPEM) == string(two.CertPEM) })
	cfg := store.TLSConfig()
	if c, err := cfg.GetCertificate(&tls.ClientHelloInfo{}); err != nil || c == nil {
		t.Fatalf("GetCertificate: %v", err)
	}
}

func TestStoreEmpty(t *testing.T) {
	var s certs.Store
	if s.Ready() {
		t.Fatal("empty store ready")
	}
	if _, err := s.GetCertificate(nil); err == nil {
		t.Fatal("empty store served a certificate")
	}
}

// TestExpiryMetric: absent until a certificate is loaded, then its
// NotAfter; a renewal shows at the next scrape.
func TestExpiryMetric(t *testing.T) {
	var s certs.Store
	if n := testutil.CollectAndCount(s.Collector(), certs.ExpiryMetric); n != 0 {
		t.Fatalf("%d series before any certificate", n)
	}
	now := time.Now()
	ca, err := certs.NewCA("test", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, life := range []time.Duration{10 * time.Minute, 20 * time.Minute} {
		kp, err := certs.NewServing(ca, []string{"x.svc"}, nil, now, life)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Set(kp); err != nil {
			t.Fatal(err)
		}
		c, _, err := kp.Parse()
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("# HELP %s x\n# TYPE %s gauge\n%s %s\n", certs.ExpiryMetric, certs.ExpiryMetric, certs.ExpiryMetric, strconv.FormatFloat(float64(c.NotAfter.Unix()), 'g', -1, 64))
		got, err := testutil.CollectAndFormat(s.Collector(), expfmt.TypeTextPlain, certs.ExpiryMetric)
		if err != nil {
			t.Fatal(err)
		}
		if g := helpLine.ReplaceAllString(string(got), "# HELP $1 x"); g != want {
			t.Errorf("lifetime %s: got\n%s\nwant\n%s", life, g, want)
		}
	}
}

var helpLine = regexp.MustCompile(`# HELP (\S+) .*`)
