package check

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/webhook"
)

// probePod is a router pod as small as the injector injects: it opts in
// by label (so both webhook entries take it) and passes the restricted
// Pod Security Standard, so a namespace that enforces it admits it too.
func probePod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "tether-check-",
			Labels:       map[string]string{"app.kubernetes.io/name": "tether-check", inject.LabelInject: "true"},
			Annotations: map[string]string{
				inject.AnnotationSources:         "Header:X-Session-ID",
				inject.AnnotationBackendSelector: "app.kubernetes.io/name=tether-check-backend",
				inject.AnnotationBackendPort:     "8000",
			},
		},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "router", Image: "registry.k8s.io/pause:3.10",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// checkAdmission: the webhook answers with the sidecar. By default a pod
// is created through the API server in dry-run mode, which calls the
// webhook as for a real pod and stores nothing; with CallWebhook the
// AdmissionReview goes to the webhook directly.
func checkAdmission(ctx context.Context, in *install) Result {
	if in.o.CallWebhook {
		return callWebhook(ctx, in)
	}
	ns, err := probeNamespace(ctx, in)
	if err != nil {
		return fail("%s", err)
	}
	p, err := in.o.Client.CoreV1().Pods(ns).Create(ctx, probePod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "failed calling webhook") {
			hint = fmt.Sprintf(": the API server cannot reach the webhook (see the webhook and injector checks; kubectl -n %s logs deployment/%s)", in.o.Namespace, in.o.Name)
		}
		return fail("a dry-run pod in namespace %s was refused: %v%s", ns, err, hint)
	}
	if !hasSidecar(p) {
		return fail("a dry-run pod in namespace %s came back without the %s container: the API server did not call the webhook for it (check the webhook configuration's selectors against the chart's)",
			ns, inject.ContainerName)
	}
	return ok("the API server called the webhook: a dry-run pod in namespace %s got the %s container", ns, inject.ContainerName)
}

// probeNamespace is where the dry-run pod goes: the first labelled
// namespace the injector serves, else "default" (the pod opts in).
func probeNamespace(ctx context.Context, in *install) (string, error) {
	list, err := in.o.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: injectionSelector})
	if err != nil {
		return "", fmt.Errorf("%s", apiProblem("namespaces", err))
	}
	for _, n := range list.Items {
		if !in.excluded(n.Name) {
			return n.Name, nil
		}
	}
	return "default", nil
}

// callWebhook sends an AdmissionReview for probePod to the webhook the
// way the API server does: to the Service's DNS name (or the URL) of the
// entry that serves labelled namespaces, over TLS verified against that
// entry's caBundle.
func callWebhook(ctx context.Context, in *install) Result {
	mwc, err := in.webhookConfig(ctx)
	if err != nil {
		return fail("%s", apiProblem("MutatingWebhookConfiguration "+in.cfg.WebhookConfig, err))
	}
	if len(mwc.Webhooks) == 0 {
		return fail("MutatingWebhookConfiguration %s has no entries", mwc.Name)
	}
	w := mwc.Webhooks[0]
	for _, e := range mwc.Webhooks {
		if s := e.ClientConfig.Service; s != nil && s.Path != nil && *s.Path == webhook.PathMutate {
			w = e
		}
	}
	target := webhookURL(w.ClientConfig)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(w.ClientConfig.CABundle) {
		return fail("%s has no usable caBundle to verify the webhook with (%s)", w.Name, caBundleHint(in))
	}
	pod, err := json.Marshal(probePod())
	if err != nil {
		return fail("%v", err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("tether-check-" + strconv.FormatInt(in.now.UnixNano(), 36)),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "tether-check", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: pod}, DryRun: ptr.To(true),
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return fail("%v", err)
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: dialName(in, w.ClientConfig), MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 5 * time.Second,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: in.o.Timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fail("webhook URL %s: %v", target, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fail("the webhook at %s does not answer: %v (kubectl -n %s get endpointslices -l kubernetes.io/service-name=%s; kubectl -n %s logs deployment/%s)",
			target, err, in.cfg.Namespace, in.cfg.ServiceName, in.o.Namespace, in.o.Name)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, webhook.MaxBodyBytes))
	var out admissionv1.AdmissionReview
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.Response == nil {
		return fail("the webhook at %s answered %s: %.200s", target, resp.Status, b)
	}
	r := out.Response
	switch {
	case r.UID != review.Request.UID:
		return fail("the webhook at %s answered for another request (uid %q)", target, r.UID)
	case !r.Allowed:
		msg := ""
		if r.Result != nil {
			msg = r.Result.Message
		}
		return fail("the webhook at %s denied the check's pod: %s", target, msg)
	case r.PatchType == nil || !bytes.Contains(r.Patch, []byte(`"name":"`+inject.ContainerName+`"`)):
		return fail("the webhook at %s did not add the %s container to the check's pod", target, inject.ContainerName)
	}
	return ok("the webhook at %s (TLS verified against the caBundle of %s) answered with the %s container", target, w.Name, inject.ContainerName)
}

// webhookURL is where the API server sends an entry's reviews.
func webhookURL(cc admissionregv1.WebhookClientConfig) string {
	if cc.URL != nil {
		return *cc.URL
	}
	s := cc.Service
	port := int32(443)
	if s.Port != nil {
		port = *s.Port
	}
	u := url.URL{Scheme: "https", Host: s.Name + "." + s.Namespace + ".svc:" + strconv.Itoa(int(port))}
	if s.Path != nil {
		u.Path = *s.Path
	}
	return u.String()
}

func hasSidecar(p *corev1.Pod) bool {
	isSidecar := func(c corev1.Container) bool { return c.Name == inject.ContainerName }
	return slices.ContainsFunc(p.Spec.InitContainers, isSidecar) || slices.ContainsFunc(p.Spec.Containers, isSidecar)
}
