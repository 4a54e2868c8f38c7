package check

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/injector/certs"
)

// checkInjector: the Deployment exists, its arguments parse, replicas are ready.
func checkInjector(_ context.Context, in *install) Result {
	name := in.o.Namespace + "/" + in.o.Name
	if in.deployment == nil {
		msg := apiProblem("Deployment "+name, in.readErr)
		return fail("%s: install the chart (helm install tether charts/tether -n %s), or name the injector with --namespace and --name",
			msg, in.o.Namespace)
	}
	if in.readErr != nil {
		return fail("Deployment %s: %v: its arguments are not the injector's (another version?); the other checks assume the chart's defaults", name, in.readErr)
	}
	d := in.deployment
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	mode := "self-managed certificates (Secret " + in.cfg.SecretName + ")"
	if !in.cfg.SelfManaged {
		mode = "certificates from " + in.cfg.CertDir + " (cert-manager)"
	}
	image := d.Spec.Template.Spec.Containers[0].Image
	ready := d.Status.ReadyReplicas
	if ready == 0 {
		return fail("Deployment %s: 0 of %d replicas ready (image %s): kubectl -n %s describe deployment %s; kubectl -n %s logs deployment/%s",
			name, want, image, in.o.Namespace, in.o.Name, in.o.Namespace, in.o.Name)
	}
	return ok("Deployment %s: %d of %d replicas ready, image %s, %s, default store %s", name, ready, want, image, mode, in.cfg.DefaultStore)
}

// checkWebhook: the webhook configuration is registered, every entry
// points at the injector's Service (or a URL) with a caBundle, and the
// Service has ready endpoints.
func checkWebhook(ctx context.Context, in *install) Result {
	mwc, err := in.webhookConfig(ctx)
	if err != nil {
		return fail("%s: the API server calls no tether webhook; install the chart, or kubectl apply -f manifests/install.yaml",
			apiProblem("MutatingWebhookConfiguration "+in.cfg.WebhookConfig, err))
	}
	if len(mwc.Webhooks) == 0 {
		return fail("MutatingWebhookConfiguration %s has no webhook entries: re-apply the chart", mwc.Name)
	}
	var problems, names []string
	usesService := false
	for _, w := range mwc.Webhooks {
		policy := "Fail"
		if w.FailurePolicy != nil {
			policy = string(*w.FailurePolicy)
		}
		names = append(names, fmt.Sprintf("%s (failurePolicy %s)", w.Name, policy))
		switch s := w.ClientConfig.Service; {
		case s != nil && (s.Namespace != in.cfg.Namespace || s.Name != in.cfg.ServiceName):
			problems = append(problems, fmt.Sprintf("%s calls Service %s/%s, not the injector's %s/%s", w.Name, s.Namespace, s.Name, in.cfg.Namespace, in.cfg.ServiceName))
		case s != nil:
			usesService = true
		case w.ClientConfig.URL == nil:
			problems = append(problems, fmt.Sprintf("%s has neither a Service nor a URL", w.Name))
		}
		switch {
		case len(w.ClientConfig.CABundle) == 0:
			problems = append(problems, fmt.Sprintf("%s has no caBundle (%s)", w.Name, caBundleHint(in)))
		default:
			if _, err := certs.ParseCerts(w.ClientConfig.CABundle); err != nil {
				problems = append(problems, fmt.Sprintf("%s: caBundle: %v (%s)", w.Name, err, caBundleHint(in)))
			}
		}
	}
	endpoints := ""
	if usesService {
		n, err := readyEndpoints(ctx, in)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case n == 0:
			problems = append(problems, fmt.Sprintf("Service %s/%s has no ready endpoint, so the API server cannot reach the webhook: kubectl -n %s get pods -l app.kubernetes.io/component=injector",
				in.cfg.Namespace, in.cfg.ServiceName, in.cfg.Namespace))
		default:
			endpoints = fmt.Sprintf("; Service %s/%s has %d ready endpoints", in.cfg.Namespace, in.cfg.ServiceName, n)
		}
	}
	if len(problems) > 0 {
		return fail("MutatingWebhookConfiguration %s: %s", mwc.Name, strings.Join(problems, "; "))
	}
	return ok("MutatingWebhookConfiguration %s: %s, caBundle set%s", mwc.Name, strings.Join(names, ", "), endpoints)
}

func caBundleHint(in *install) string {
	if in.cfg.SelfManaged {
		return fmt.Sprintf("the injector fills it; is it running? kubectl -n %s logs deployment/%s", in.o.Namespace, in.o.Name)
	}
	return "cert-manager's cainjector fills it from the cert-manager.io/inject-ca-from annotation; is cert-manager running and the Certificate Ready?"
}

func renewHint(in *install) string {
	if in.cfg.SelfManaged {
		return fmt.Sprintf("the injector renews its certificates at two thirds of their lifetime; is it running? kubectl -n %s logs deployment/%s", in.o.Namespace, in.o.Name)
	}
	return fmt.Sprintf("cert-manager renews it: kubectl -n %s describe certificate", in.cfg.Namespace)
}

// readyEndpoints counts the ready endpoints of the injector's Service.
func readyEndpoints(ctx context.Context, in *install) (int, error) {
	if _, err := in.o.Client.CoreV1().Services(in.cfg.Namespace).Get(ctx, in.cfg.ServiceName, metav1.GetOptions{}); err != nil {
		return 0, fmt.Errorf("%s", apiProblem("Service "+in.cfg.Namespace+"/"+in.cfg.ServiceName, err))
	}
	slices, err := in.o.Client.DiscoveryV1().EndpointSlices(in.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + in.cfg.ServiceName,
	})
	if err != nil {
		return 0, fmt.Errorf("%s", apiProblem("the EndpointSlices of Service "+in.cfg.Namespace+"/"+in.cfg.ServiceName, err))
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// checkCertificate: the serving certificate the injector loads is
// trusted by every entry's caBundle for the name the API server dials,
// and neither it nor its CA expires within MinValidity.
func checkCertificate(ctx context.Context, in *install) Result {
	if r := in.needConfig("where the serving certificate is"); r != nil {
		return *r
	}
	secretName, mounted := in.cfg.SecretName, ""
	if !in.cfg.SelfManaged {
		secretName, mounted = certManagerSecret(in), " mounted at "+in.cfg.CertDir
	}
	secret := "Secret " + in.cfg.Namespace + "/" + secretName
	sec, err := in.o.Client.CoreV1().Secrets(in.cfg.Namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return fail("%s: %s", apiProblem(secret, err), caBundleHint(in))
	}
	chain, err := certs.ParseCerts(sec.Data[certs.KeyTLSCert])
	if err != nil {
		return fail("%s: %s: %v", secret, certs.KeyTLSCert, err)
	}
	leaf := chain[0]
	mwc, err := in.webhookConfig(ctx)
	if err != nil {
		return fail("cannot verify the serving certificate: %s", apiProblem("MutatingWebhookConfiguration "+in.cfg.WebhookConfig, err))
	}
	var problems []string
	var ca *x509.Certificate
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	// Trust is checked apart from expiry, which is reported on its own.
	verifyAt := in.now
	if !verifyAt.Before(leaf.NotAfter) {
		verifyAt = leaf.NotAfter.Add(-time.Minute)
	}
	for _, w := range mwc.Webhooks {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			problems = append(problems, fmt.Sprintf("%s has no usable caBundle", w.Name))
			continue
		}
		host := dialName(in, w.ClientConfig)
		chains, err := leaf.Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: intermediates, DNSName: host, CurrentTime: verifyAt,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("the caBundle of %s does not trust it for %s: %v (%s)", w.Name, host, err, caBundleHint(in)))
			continue
		}
		ca = chains[0][len(chains[0])-1]
	}
	left := leaf.NotAfter.Sub(in.now)
	switch {
	case left <= 0:
		problems = append(problems, fmt.Sprintf("it expired on %s, so the API server refuses the webhook (%s)", leaf.NotAfter.UTC().Format("2006-01-02 15:04 MST"), renewHint(in)))
	case left < in.o.MinValidity:
		problems = append(problems, fmt.Sprintf("it expires in %s (%s; %s)", days(left), leaf.NotAfter.UTC().Format("2006-01-02"), renewHint(in)))
	}
	if renew := certs.RenewAt(leaf); in.cfg.SelfManaged && left >= in.o.MinValidity && in.now.After(renew.Add(in.cfg.CertCheckInterval+time.Hour)) {
		problems = append(problems, fmt.Sprintf("it is past its renewal time (%s, two thirds of its lifetime; %s)", renew.UTC().Format("2006-01-02"), renewHint(in)))
	}
	caText := ""
	if ca != nil {
		caLeft := ca.NotAfter.Sub(in.now)
		if caLeft < in.o.MinValidity {
			problems = append(problems, fmt.Sprintf("its CA %q expires in %s (%s)", ca.Subject.CommonName, days(caLeft), renewHint(in)))
		}
		caText = fmt.Sprintf(", its CA %s (in %s)", ca.NotAfter.UTC().Format("2006-01-02"), days(caLeft))
	}
	subject := fmt.Sprintf("serving certificate (%s%s)", secret, mounted)
	if len(problems) > 0 {
		return fail("%s: %s", subject, strings.Join(problems, "; "))
	}
	return ok("%s for %s: trusted by the caBundle of every entry; expires %s (in %s)%s",
		subject, strings.Join(leaf.DNSNames, ", "), leaf.NotAfter.UTC().Format("2006-01-02"), days(left), caText)
}

// dialName is the name the API server verifies the webhook's
// certificate for: the Service's DNS name, or the URL's host.
func dialName(in *install, cc admissionregv1.WebhookClientConfig) string {
	if s := cc.Service; s != nil {
		return s.Name + "." + s.Namespace + ".svc"
	}
	if cc.URL != nil {
		if u, err := url.Parse(*cc.URL); err == nil {
			if h, _, err := net.SplitHostPort(u.Host); err == nil {
				return h
			}
			return u.Host
		}
	}
	return in.cfg.ServiceName + "." + in.cfg.Namespace + ".svc"
}

// certManagerSecret is the Secret mounted at the injector's --cert-dir.
func certManagerSecret(in *install) string {
	if d := in.deployment; d != nil {
		spec := d.Spec.Template.Spec
		for _, m := range spec.Containers[0].VolumeMounts {
			if strings.TrimSuffix(m.MountPath, "/") != strings.TrimSuffix(in.cfg.CertDir, "/") {
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					return v.Secret.SecretName
				}
			}
		}
	}
	return in.o.Name + "-tls"
}
