package check

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/tetherproxy/tether/injector/certs"
)

// The certificate check is pure logic over three objects; a fake
// clientset holds them (the whole command runs against a real API server
// in e2e/check_test.go).
func TestCertificate(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := certs.NewCA("tether-injector-ca", now.Add(-2*365*24*time.Hour), 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("someone-else", now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dns := []string{"tether-injector.tether-system.svc"}
	serving := func(issued time.Time, life time.Duration, names []string) []byte {
		kp, err := certs.NewServing(ca, names, nil, issued, life)
		if err != nil {
			t.Fatal(err)
		}
		return kp.CertPEM
	}
	year := 365 * 24 * time.Hour
	for _, c := range []struct {
		name        string
		cert        []byte
		bundle      []byte
		now         time.Time
		certManager bool
		want        string // "" is OK; else a substring of the failure
	}{
		{"valid", serving(now.Add(-time.Hour), year, dns), ca.CertPEM, now, false, ""},
		{"another CA in the bundle", serving(now.Add(-time.Hour), year, dns), other.CertPEM, now, false, "does not trust it"},
		{"wrong name", serving(now.Add(-time.Hour), year, []string{"other.tether-system.svc"}), ca.CertPEM, now, false, "does not trust it for tether-injector.tether-system.svc"},
		{"expires in 3 days", serving(now.Add(-time.Hour), 3*24*time.Hour, dns), ca.CertPEM, now, false, "expires in 71h"},
		{"expired", serving(now.Add(-48*time.Hour), 24*time.Hour, dns), ca.CertPEM, now, false, "it expired on 2029-12-31"},
		{"renewal overdue", serving(now.Add(-300*24*time.Hour), year, dns), ca.CertPEM, now, false, "past its renewal time"},
		{"cert-manager renews itself", serving(now.Add(-300*24*time.Hour), year, dns), ca.CertPEM, now, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			secretName, args := "tether-injector-tls", []string{"--self-managed-certs", "--secret-name=tether-injector-tls"}
			var volumes []corev1.Volume
			var mounts []corev1.VolumeMount
			if c.certManager {
				secretName, args = "serving-cert", []string{"--cert-dir=/etc/tls"}
				volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "serving-cert"}}}}
				mounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/tls"}}
			}
			client := fake.NewClientset(
				&appsv1.Deployment{
					ObjectMeta: metav1.ObjectMeta{Name: "tether-injector", Namespace: "tether-system"},
					Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						Volumes: volumes,
						Containers: []corev1.Container{{Name: "injector", Args: append(args,
							"--namespace=$(POD_NAMESPACE)", "--service-name=tether-injector", "--webhook-config=tether-injector"),
							VolumeMounts: mounts}},
					}}},
				},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: "tether-system"},
					Data: map[string][]byte{certs.KeyTLSCert: c.cert, certs.KeyTLSKey: []byte("not read")}},
				&admissionregv1.MutatingWebhookConfiguration{
					ObjectMeta: metav1.ObjectMeta{Name: "tether-injector"},
					Webhooks: []admissionregv1.MutatingWebhook{{Name: "ns.inject.tether.dev", ClientConfig: admissionregv1.WebhookClientConfig{
						Service:  &admissionregv1.ServiceReference{Namespace: "tether-system", Name: "tether-injector", Path: ptr.To("/mutate")},
						CABundle: c.bundle,
					}}},
				},
			)
			rs := Run(context.Background(), Options{Client: client, Namespace: "tether-system", Name: "tether-injector",
				Checks: []string{CheckInjector, CheckCertificate}, Now: func() time.Time { return c.now }})
			r := rs[1]
			if r.Check != CheckCertificate {
				t.Fatalf("results %v", rs)
			}
			switch {
			case c.want == "" && !r.OK:
				t.Fatalf("failed: %s", r)
			case c.want != "" && (r.OK || !strings.Contains(r.Message, c.want)):
				t.Fatalf("%s, want a failure saying %q", r, c.want)
			}
			t.Log(r)
		})
	}
}

func TestWantsSidecar(t *testing.T) {
	ann := map[string]string{"tether.dev/sources": "Header:x"}
	for _, c := range []struct {
		labels, annotations map[string]string
		selected, want      bool
	}{
		{nil, ann, true, true},
		{nil, ann, false, false},
		{map[string]string{"tether.dev/inject": "true"}, nil, false, true},
		{map[string]string{"tether.dev/inject": "false"}, ann, true, false},
		{nil, map[string]string{"tether.dev/inject": "false", "tether.dev/sources": "Header:x"}, true, false},
		{nil, map[string]string{"tether.dev/status": "{}"}, true, false},
		{nil, map[string]string{"prometheus.io/scrape": "true"}, true, false},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: c.labels, Annotations: c.annotations}}
		if got := wantsSidecar(p, c.selected); got != c.want {
			t.Errorf("%v %v selected=%v: %v, want %v", c.labels, c.annotations, c.selected, got, c.want)
		}
	}
}

func TestRestartHint(t *testing.T) {
	owned := func(kind, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-0", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: name, Controller: ptr.To(true)}}}}
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{owned("ReplicaSet", "router-5d8f7c9b4", map[string]string{"pod-template-hash": "5d8f7c9b4"}), "rollout restart deployment/router"},
		{owned("StatefulSet", "chat", nil), "rollout restart statefulset/chat"},
		{owned("Job", "replay", nil), "delete pod p-0 (its Job replay recreates it)"},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-0"}}, "delete pod p-0 and create it again"},
	} {
		if got := restartHint(c.pod); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}
