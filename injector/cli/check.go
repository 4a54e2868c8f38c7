package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherproxy/tether/injector/check"
)

const checkUsage = `Usage: tether-injector check [--kubeconfig FILE] [flags]

Reports what is wrong with a tether install, one line per check, OK or
FAIL with what to do; exit status 1 when a check fails. Checks, in order:

  injector      the injector's Deployment: its arguments (they say where
                everything else is) and ready replicas
  webhook       the MutatingWebhookConfiguration: every entry points at the
                injector's Service with a caBundle; the Service has ready
                endpoints
  certificate   the serving certificate (self-managed Secret, or the one
                cert-manager writes) is trusted by every entry's caBundle
                for the name the API server dials; expiry of it and its CA
  admission     a dry-run pod, created through the API server, gets the
                sidecar (nothing is stored); with --call-webhook an
                AdmissionReview is sent to the webhook's Service directly
                instead (from inside the cluster: the chart's helm test)
  namespaces    which namespaces are labelled tether.dev/injection=enabled
  pods          pods there that ask for the sidecar but have none
  rbac          the injector's service account may do what its flags need
  sidecar-rbac  the service accounts of injected pods may watch pods

The user of the kubeconfig needs to read those objects (including the
certificate Secret), create SubjectAccessReviews and dry-run pods: a
cluster administrator.

Flags:
`

// runCheck is `tether-injector check`.
func runCheck(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tether-injector check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, checkUsage)
		fs.PrintDefaults()
	}
	o := check.Options{}
	var kubeconfig, kubeContext, checks string
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster config)")
	fs.StringVar(&kubeContext, "context", "", "kubeconfig context (default: the current one)")
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&o.Namespace, n, "tether-system", "the injector's namespace")
	}
	fs.StringVar(&o.Name, "name", "tether-injector", "the injector's Deployment (the chart names its Service, webhook configuration and RBAC the same)")
	fs.StringVar(&checks, "checks", "", "comma-separated checks to run (default: all): "+strings.Join(check.All, ","))
	fs.BoolVar(&o.CallWebhook, "call-webhook", false, "admission: send an AdmissionReview to the webhook's Service instead of a dry-run pod through the API server (needs the cluster's DNS and network)")
	fs.DurationVar(&o.MinValidity, "min-validity", 7*24*time.Hour, "a certificate that expires sooner fails")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "time limit of each check")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tether-injector check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if checks != "" {
		o.Checks = strings.Split(checks, ",")
		if err := check.Known(o.Checks); err != nil {
			fmt.Fprintf(stderr, "tether-injector check: --checks: %v\n", err)
			return exitUsage
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "tether-injector check: kubeconfig: %v\n", err)
		return exitUsage
	}
	rc.UserAgent, rc.Timeout = "tether-injector-check", o.Timeout
	if o.Client, err = kubernetes.NewForConfig(rc); err != nil {
		fmt.Fprintf(stderr, "tether-injector check: %v\n", err)
		return exitUsage
	}
	results := check.Run(context.Background(), o)
	failed := 0
	for _, r := range results {
		fmt.Fprintln(stdout, r)
		if !r.OK {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d checks failed\n", failed, len(results))
		return exitProblems
	}
	fmt.Fprintf(stdout, "all %d checks passed\n", len(results))
	return exitOK
}
