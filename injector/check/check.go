// Package check looks at a tether install through the API server and
// says, one line per check, what is wrong and what to do: the injector's
// Deployment, its webhook configuration, the serving certificate against
// the caBundle, whether the webhook answers, the labelled namespaces and
// their pods, and the RBAC of the injector and of the sidecars. It backs
// `tether-injector check`; everything it reads is reachable from a
// laptop with a kubeconfig.
package check

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/injector/app"
)

// Check names, in the order they run.
const (
	CheckInjector    = "injector"
	CheckWebhook     = "webhook"
	CheckCertificate = "certificate"
	CheckAdmission   = "admission"
	CheckNamespaces  = "namespaces"
	CheckPods        = "pods"
	CheckRBAC        = "rbac"
	CheckSidecarRBAC = "sidecar-rbac"
)

// All lists every check in order.
var All = []string{CheckInjector, CheckWebhook, CheckCertificate, CheckAdmission, CheckNamespaces, CheckPods, CheckRBAC, CheckSidecarRBAC}

// Options say which install to check and how.
type Options struct {
	Client kubernetes.Interface
	// Namespace and Name of the injector's Deployment (the chart's
	// defaults: tether-system, tether-injector). Its arguments say where
	// everything else is.
	Namespace string
	Name      string
	// Checks to run (default All).
	Checks []string
	// CallWebhook makes the admission check send an AdmissionReview to the
	// webhook itself, as the API server would (through its Service: from
	// inside the cluster, as the chart's helm test does), instead of
	// creating a dry-run pod through the API server.
	CallWebhook bool
	// MinValidity: a certificate that expires sooner fails (default 7 days).
	MinValidity time.Duration
	// Timeout of each check (default 10s).
	Timeout time.Duration
	Now     func() time.Time
}

// Result is one line of the report.
type Result struct {
	Check   string
	OK      bool
	Message string
}

func (r Result) String() string {
	s := "OK  "
	if !r.OK {
		s = "FAIL"
	}
	return fmt.Sprintf("%s %s: %s", s, r.Check, r.Message)
}

// Failed reports whether any result failed.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return !r.OK })
}

// install is what the checks share: the injector's configuration, read
// from its Deployment's arguments, and the objects several checks use.
type install struct {
	o          Options
	cfg        app.Config
	deployment *appsv1.Deployment // nil when not read or missing
	readErr    error              // why the Deployment's arguments are not known
	mwc        *admissionregv1.MutatingWebhookConfiguration
	mwcErr     error
	now        time.Time
}

// Run runs the checks and returns their results in order.
func Run(ctx context.Context, o Options) []Result {
	if o.MinValidity == 0 {
		o.MinValidity = 7 * 24 * time.Hour
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	checks := o.Checks
	if len(checks) == 0 {
		checks = All
	}
	in := &install{o: o, now: o.Now()}
	in.cfg = defaultConfig(o.Namespace, o.Name)
	// The Deployment's arguments say where everything is. The webhook and
	// admission checks manage with the chart's names alone (the helm test
	// may read nothing else).
	if slices.ContainsFunc(checks, func(c string) bool { return c != CheckWebhook && c != CheckAdmission }) {
		in.readDeployment(ctx)
	}
	funcs := map[string]func(context.Context, *install) Result{
		CheckInjector:    checkInjector,
		CheckWebhook:     checkWebhook,
		CheckCertificate: checkCertificate,
		CheckAdmission:   checkAdmission,
		CheckNamespaces:  checkNamespaces,
		CheckPods:        checkPods,
		CheckRBAC:        checkRBAC,
		CheckSidecarRBAC: checkSidecarRBAC,
	}
	var out []Result
	for _, name := range All {
		if !slices.Contains(checks, name) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		r := funcs[name](cctx, in)
		cancel()
		r.Check = name
		out = append(out, r)
	}
	return out
}

// Known reports whether every name is a check.
func Known(names []string) error {
	for _, n := range names {
		if !slices.Contains(All, n) {
			return fmt.Errorf("unknown check %q (checks: %s)", n, strings.Join(All, ", "))
		}
	}
	return nil
}

// defaultConfig is the injector's configuration with every flag at its
// default and the chart's names derived from the Deployment's name.
func defaultConfig(namespace, name string) app.Config {
	var c app.Config
	fs := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	c.RegisterFlags(fs, namespace)
	c.Namespace, c.ServiceName, c.WebhookConfig = namespace, name, name
	c.SecretName = name + "-tls"
	return c
}

// readDeployment reads the injector's Deployment and parses its
// container's arguments with the injector's own flags.
func (in *install) readDeployment(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, in.o.Timeout)
	defer cancel()
	d, err := in.o.Client.AppsV1().Deployments(in.o.Namespace).Get(ctx, in.o.Name, metav1.GetOptions{})
	if err != nil {
		in.readErr = err
		return
	}
	in.deployment = d
	var c app.Config
	fs := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The injector defaults --namespace to its pod's own: the Deployment's.
	c.RegisterFlags(fs, in.o.Namespace)
	if len(d.Spec.Template.Spec.Containers) == 0 {
		in.readErr = fmt.Errorf("deployment %s/%s has no container", in.o.Namespace, in.o.Name)
		return
	}
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", in.o.Namespace))
	}
	if err := fs.Parse(args); err != nil {
		in.readErr = fmt.Errorf("its arguments: %w", err)
		return
	}
	in.cfg = c
}

// needConfig is the failure of a check that cannot go on without the
// injector's arguments, or nil when they are known.
func (in *install) needConfig(what string) *Result {
	if in.deployment != nil && in.readErr == nil {
		return nil
	}
	r := fail("cannot tell %s without the injector's arguments: %s", what, apiProblem("Deployment "+in.o.Namespace+"/"+in.o.Name, in.readErr))
	return &r
}

// webhookConfig fetches the MutatingWebhookConfiguration once.
func (in *install) webhookConfig(ctx context.Context) (*admissionregv1.MutatingWebhookConfiguration, error) {
	if in.mwc == nil && in.mwcErr == nil {
		in.mwc, in.mwcErr = in.o.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, in.cfg.WebhookConfig, metav1.GetOptions{})
	}
	return in.mwc, in.mwcErr
}

// apiProblem turns an API error into what to do about it.
func apiProblem(what string, err error) string {
	switch {
	case apierrors.IsNotFound(err):
		return what + " not found"
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("cannot read %s: forbidden (run the check as a user who may read it)", what)
	default:
		return fmt.Sprintf("cannot read %s: %v", what, err)
	}
}

func ok(format string, a ...any) Result   { return Result{OK: true, Message: fmt.Sprintf(format, a...)} }
func fail(format string, a ...any) Result { return Result{Message: fmt.Sprintf(format, a...)} }

// days formats a duration as whole days, or hours under a week.
func days(d time.Duration) string {
	if d < 7*24*time.Hour {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}
