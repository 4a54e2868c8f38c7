package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Keys of the Secret that holds the self-managed certificates.
const (
	KeyCABundle = "ca.crt" // the current CA first, then the previous one while it is valid
	KeyCAKey    = "ca.key"
	KeyTLSCert  = "tls.crt"
	KeyTLSKey   = "tls.key"
)

// Defaults of SelfManaged.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
	DefaultInterval     = time.Minute
)

// SelfManaged generates and renews the webhook's certificates without
// cert-manager. Every replica runs it; they share one Secret, and the
// API server's optimistic concurrency (resourceVersion) settles races:
// the loser of a conflict reads the winner's certificates.
//
// The serving certificate is renewed at two thirds of its lifetime and
// signed by the same CA, so the caBundle does not change. The CA itself is
// renewed at two thirds of its (long) lifetime; the bundle then holds the
// new and the previous CA, so replicas still serving a certificate of the
// previous CA stay trusted until they reload.
type SelfManaged struct {
	Client      kubernetes.Interface
	Namespace   string
	SecretName  string
	ServiceName string
	// ExtraSANs are added to the serving certificate: IP addresses or DNS
	// names (127.0.0.1 for a webhook with a URL client config in tests).
	ExtraSANs []string
	// WebhookConfig is the MutatingWebhookConfiguration whose caBundle is
	// kept current; Webhooks names the entries to patch (all when empty).
	WebhookConfig string
	Webhooks      []string
	CALifetime    time.Duration
	CertLifetime  time.Duration
	// Interval between checks; a change to the webhook configuration
	// (a GitOps tool resetting caBundle) triggers a check at once.
	Interval time.Duration
	Store    *Store
	Log      *slog.Logger
	Now      func() time.Time
}

func (m *SelfManaged) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// SANs returns the DNS names and IPs the serving certificate must carry.
func (m *SelfManaged) SANs() ([]string, []net.IP) {
	svc, ns := m.ServiceName, m.Namespace
	dns := []string{svc + "." + ns + ".svc", svc, svc + "." + ns, svc + "." + ns + ".svc.cluster.local"}
	var ips []net.IP
	for _, s := range m.ExtraSANs {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else if !slices.Contains(dns, s) {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// Sync makes one pass: the Secret holds valid certificates (creating or
// renewing them), the Store serves them, and the webhooks trust them.
func (m *SelfManaged) Sync(ctx context.Context) error {
	bundle, err := m.syncSecret(ctx)
	if err != nil {
		return err
	}
	return m.syncCABundle(ctx, bundle)
}

// Run syncs until ctx is done: at once, then every Interval, on every
// change of the webhook configuration, and with backoff after errors. It
// returns nil (a lifecycle.Part): a failed sync is retried, never fatal.
func (m *SelfManaged) Run(ctx context.Context) error {
	interval := m.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(m.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + m.WebhookConfig
		}))
	inf := factory.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	backoff := time.Second
	for {
		wait := interval
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.Log.Warn("self-managed certificates: sync failed, retrying", "err", err, "in", backoff)
			wait, backoff = backoff, min(backoff*2, interval)
		} else {
			backoff = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-trigger:
			t.Stop()
		case <-t.C:
		}
	}
}

// syncSecret creates or renews the certificates in the Secret, loads the
// serving pair into the Store and returns the CA bundle.
func (m *SelfManaged) syncSecret(ctx context.Context) ([]byte, error) {
	secrets := m.Client.CoreV1().Secrets(m.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		sec, err := secrets.Get(ctx, m.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			sec, err = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get secret %s/%s: %w", m.Namespace, m.SecretName, err)
		}
		var data map[string][]byte
		if sec != nil {
			data = sec.Data
		}
		next, changed, err := m.renew(data)
		if err != nil {
			return nil, err
		}
		if changed {
			if sec == nil {
				sec = &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: m.SecretName, Namespace: m.Namespace,
						Labels: map[string]string{"app.kubernetes.io/managed-by": "tether-injector"}},
					Type: corev1.SecretTypeOpaque,
					Data: next,
				}
				_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
			} else {
				sec = sec.DeepCopy()
				sec.Data = next
				_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			}
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				continue // another replica wrote first: use what it wrote
			}
			if err != nil {
				return nil, fmt.Errorf("write secret %s/%s: %w", m.Namespace, m.SecretName, err)
			}
			m.Log.Info("self-managed certificates written", "secret", m.SecretName)
		}
		loadedNew, err := m.Store.Set(KeyPair{CertPEM: next[KeyTLSCert], KeyPEM: next[KeyTLSKey]})
		if err != nil {
			return nil, err
		}
		if loadedNew {
			m.Log.Info("serving certificate loaded", "secret", m.SecretName)
		}
		return next[KeyCABundle], nil
	}
	return nil, errors.New("secret kept changing under us (5 conflicts in a row)")
}

// renew returns the Secret data with certificates that are valid, not due
// for renewal and cover the SANs; changed is false when data was already so.
func (m *SelfManaged) renew(data map[string][]byte) (map[string][]byte, bool, error) {
	now := m.now()
	caLife, certLife := m.CALifetime, m.CertLifetime
	if caLife <= 0 {
		caLife = DefaultCALifetime
	}
	if certLife <= 0 {
		certLife = DefaultCertLifetime
	}
	dns, ips := m.SANs()

	var bundle []*x509.Certificate
	ca := KeyPair{CertPEM: firstPEM(data[KeyCABundle]), KeyPEM: data[KeyCAKey]}
	caCert, _, err := ca.Parse()
	changed := false
	if err == nil {
		bundle, _ = ParseCerts(data[KeyCABundle])
	}
	if err != nil || !now.Before(RenewAt(caCert)) {
		if ca, err = NewCA("tether-injector-ca", now, caLife); err != nil {
			return nil, false, err
		}
		newCert, _, _ := ca.Parse()
		bundle = append([]*x509.Certificate{newCert}, bundle...)
		caCert, changed = newCert, true
	}
	// Keep only unexpired CAs, the current one first.
	kept := bundle[:0]
	for i, c := range bundle {
		if i == 0 || now.Before(c.NotAfter) {
			kept = append(kept, c)
		}
	}
	if len(kept) != len(bundle) {
		changed = true
	}
	bundle = kept[:min(len(kept), 2)]

	serving := KeyPair{CertPEM: data[KeyTLSCert], KeyPEM: data[KeyTLSKey]}
	sc, _, err := serving.Parse()
	if err != nil || !now.Before(RenewAt(sc)) || !covers(sc, dns, ips) || !signedBy(sc, caCert) {
		if serving, err = NewServing(ca, dns, ips, now, certLife); err != nil {
			return nil, false, err
		}
		changed = true
	}
	var pemBundle []byte
	for _, c := range bundle {
		pemBundle = append(pemBundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return map[string][]byte{
		KeyCABundle: pemBundle,
		KeyCAKey:    ca.KeyPEM,
		KeyTLSCert:  serving.CertPEM,
		KeyTLSKey:   serving.KeyPEM,
	}, changed || !bytes.Equal(pemBundle, data[KeyCABundle]), nil
}

func firstPEM(b []byte) []byte {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil
	}
	return pem.EncodeToMemory(block)
}

// syncCABundle sets caBundle on the webhooks, addressed by name with a
// strategic merge patch (the list's merge key is the name), never by index.
func (m *SelfManaged) syncCABundle(ctx context.Context, bundle []byte) error {
	api := m.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := api.Get(ctx, m.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get MutatingWebhookConfiguration %s: %w", m.WebhookConfig, err)
	}
	type clientConfig struct {
		CABundle []byte `json:"caBundle"`
	}
	type entry struct {
		Name         string       `json:"name"`
		ClientConfig clientConfig `json:"clientConfig"`
	}
	var stale []entry
	seen := map[string]bool{}
	for _, w := range cfg.Webhooks {
		if len(m.Webhooks) > 0 && !slices.Contains(m.Webhooks, w.Name) {
			continue
		}
		seen[w.Name] = true
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			stale = append(stale, entry{Name: w.Name, ClientConfig: clientConfig{CABundle: bundle}})
		}
	}
	for _, n := range m.Webhooks {
		if !seen[n] {
			return fmt.Errorf("MutatingWebhookConfiguration %s has no webhook named %q", m.WebhookConfig, n)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"webhooks": stale})
	if err != nil {
		return err
	}
	if _, err := api.Patch(ctx, m.WebhookConfig, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch caBundle of %s: %w", m.WebhookConfig, err)
	}
	names := make([]string, len(stale))
	for i, s := range stale {
		names[i] = s.Name
	}
	m.Log.Info("webhook caBundle patched", "config", m.WebhookConfig, "webhooks", names)
	return nil
}
