// Package app wires tether-injector: flags, the Kubernetes client, the
// certificate source, the RoleBinding controller and the two listeners
// (TLS for the webhook, plain HTTP for probes and metrics), all run as
// parts of one lifecycle.Run. main.go is a thin shell around it (and the
// only reader of POD_NAMESPACE), and tests (or an e2e harness) run it
// in-process.
package app

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/rbac"
	"github.com/tetherproxy/tether/injector/webhook"
	"github.com/tetherproxy/tether/sidecar/buildinfo"
	"github.com/tetherproxy/tether/sidecar/config"
)

// Version is recorded in the pods' tether.dev/status annotation and tags
// the default sidecar image: the build's version (see sidecar/buildinfo,
// stamped by the Makefile).
var Version = buildinfo.Get().Version

// Config is everything the injector is told at start.
type Config struct {
	// Listen is the webhook's TLS address; AdminListen serves /healthz,
	// /readyz and /metrics over plain HTTP.
	Listen      string
	AdminListen string

	// Certificates: CertDir (tls.crt, tls.key kept by cert-manager) or
	// SelfManaged.
	CertDir           string
	SelfManaged       bool
	SecretName        string
	ServiceName       string
	ExtraSANs         stringList
	WebhookConfig     string
	Webhooks          stringList
	CALifetime        time.Duration
	CertLifetime      time.Duration
	CertCheckInterval time.Duration

	// Namespace is the injector's own: where the Secret lives, and never injected.
	Namespace string

	// ManageRBAC binds SidecarClusterRole in every labelled namespace.
	ManageRBAC         bool
	SidecarClusterRole string
	SidecarRoleBinding string
	// ModelServerClusterRole (get/list/watch Kthena ModelServers) is bound,
	// with RoleBinding ModelServerRoleBinding, only to the accounts of
	// injected pods annotated tether.dev/model-server; "" binds it nowhere.
	ModelServerClusterRole string
	ModelServerRoleBinding string

	Kubeconfig string

	// Sidecar defaults.
	SidecarImage        string
	SidecarPullPolicy   string
	SidecarCPURequest   string
	SidecarMemRequest   string
	SidecarCPULimit     string
	SidecarMemLimit     string
	NativeSidecar       bool
	PreStopSleep        time.Duration
	DefaultStore        string
	RedisAddress        string
	RedisPasswordSecret string
	RedisUsername       string
	RedisTLS            bool
	RedisCASecret       string
	GossipKeySecret     string
	ExcludedNamespaces  stringList
	PrometheusScrape    bool

	LogLevel string
}

// DefaultConfig is the configuration with every flag at its default, for
// running the injector in-process (set Listen, a certificate source and
// the sidecar image, then app.New).
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("tether-injector", flag.ContinueOnError), "")
	return c
}

// RegisterFlags binds every field to a flag on fs, with its default.
// podNamespace (main reads the downward-API env POD_NAMESPACE) is the
// default of --namespace when set.
func (c *Config) RegisterFlags(fs *flag.FlagSet, podNamespace string) {
	ns := podNamespace
	if ns == "" {
		ns = "tether-system"
	}
	fs.StringVar(&c.Listen, "listen", ":9443", "webhook HTTPS address (serves "+webhook.PathMutate+" and "+webhook.PathOptIn+")")
	fs.StringVar(&c.AdminListen, "admin-listen", ":8080", "plain HTTP address of /healthz, /readyz and /metrics (empty: off)")
	fs.StringVar(&c.CertDir, "cert-dir", "", "directory with tls.crt and tls.key, reloaded on change (cert-manager mode)")
	fs.BoolVar(&c.SelfManaged, "self-managed-certs", false, "generate the CA and serving certificate, keep them in --secret-name, patch the caBundle of --webhook-config")
	fs.StringVar(&c.SecretName, "secret-name", "tether-injector-tls", "Secret (in --namespace) holding the self-managed certificates")
	fs.StringVar(&c.ServiceName, "service-name", "tether-injector", "the webhook Service; the serving certificate is for <service>.<namespace>.svc")
	fs.Var(&c.ExtraSANs, "extra-san", "extra IP or DNS name in the self-managed serving certificate (repeatable or comma-separated; 127.0.0.1 for a URL client config)")
	fs.StringVar(&c.WebhookConfig, "webhook-config", "tether-injector", "MutatingWebhookConfiguration whose caBundle is kept current (self-managed mode)")
	fs.Var(&c.Webhooks, "webhook", "name of a webhook entry to patch (repeatable; default: every entry of --webhook-config)")
	fs.DurationVar(&c.CALifetime, "ca-lifetime", certs.DefaultCALifetime, "lifetime of the self-managed CA (renewed at two thirds)")
	fs.DurationVar(&c.CertLifetime, "cert-lifetime", certs.DefaultCertLifetime, "lifetime of the self-managed serving certificate (renewed at two thirds)")
	fs.DurationVar(&c.CertCheckInterval, "cert-check-interval", certs.DefaultInterval, "how often the Secret and caBundle are checked (self-managed mode)")
	fs.StringVar(&c.Namespace, "namespace", ns, "the injector's namespace (from $POD_NAMESPACE when set)")
	fs.BoolVar(&c.ManageRBAC, "manage-rbac", true, "bind --sidecar-cluster-role, in every namespace labelled "+inject.NamespaceLabel+"="+inject.NamespaceLabelValue+", to the service accounts its injected pods run as")
	fs.StringVar(&c.SidecarClusterRole, "sidecar-cluster-role", "tether-sidecar", "ClusterRole (get/list/watch pods) the sidecars are bound to")
	fs.StringVar(&c.SidecarRoleBinding, "sidecar-role-binding", rbac.DefaultBindingName, "name of the RoleBinding kept in each labelled namespace (the chart's RBAC lets the injector touch only this name)")
	fs.StringVar(&c.ModelServerClusterRole, "model-server-cluster-role", rbac.DefaultModelServerBindingName, "ClusterRole (get/list/watch Kthena modelservers) bound only to the service accounts of injected pods annotated "+rbac.ModelServerAnnotation+" (empty: never bound)")
	fs.StringVar(&c.ModelServerRoleBinding, "model-server-role-binding", rbac.DefaultModelServerBindingName, "name of the RoleBinding of --model-server-cluster-role in each namespace that has such pods")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&c.SidecarImage, "sidecar-image", "ghcr.io/tetherproxy/tether-sidecar:"+Version, "sidecar image, repository:tag")
	fs.StringVar(&c.SidecarPullPolicy, "sidecar-image-pull-policy", "IfNotPresent", "sidecar imagePullPolicy: Always, IfNotPresent or Never")
	fs.StringVar(&c.SidecarCPURequest, "sidecar-cpu-request", "50m", "sidecar CPU request (empty: none)")
	fs.StringVar(&c.SidecarMemRequest, "sidecar-memory-request", "64Mi", "sidecar memory request (empty: none)")
	fs.StringVar(&c.SidecarCPULimit, "sidecar-cpu-limit", "", "sidecar CPU limit (empty: none)")
	fs.StringVar(&c.SidecarMemLimit, "sidecar-memory-limit", "256Mi", "sidecar memory limit (empty: none)")
	fs.BoolVar(&c.NativeSidecar, "native-sidecar", true, "inject a native sidecar (init container, restartPolicy Always; Kubernetes 1.29+); false: the first plain container")
	fs.DurationVar(&c.PreStopSleep, "prestop-sleep", 15*time.Second, "plain-container sidecars: keep serving this long after the pod is asked to stop, while the router drains (whole seconds; 0: no preStop hook)")
	fs.StringVar(&c.DefaultStore, "default-store", "memory", "store of pods without tether.dev/store: memory, gossip or redis")
	fs.StringVar(&c.RedisAddress, "redis-address", "", "Redis host:port for redis-store pods without tether.dev/redis-address")
	fs.StringVar(&c.RedisPasswordSecret, "redis-password-secret", "", "Secret (key \"password\") mounted into redis-store pods without tether.dev/redis-password-secret")
	fs.StringVar(&c.RedisUsername, "redis-username", "", "Redis ACL user of redis-store pods without tether.dev/redis-username")
	fs.BoolVar(&c.RedisTLS, "redis-tls", false, "TLS to Redis for redis-store pods without tether.dev/redis-tls")
	fs.StringVar(&c.RedisCASecret, "redis-ca-secret", "", "Secret (key \"ca.crt\") whose CA verifies Redis's certificate, mounted into redis-store pods with TLS on and without tether.dev/redis-ca-secret (empty: the system roots)")
	fs.StringVar(&c.GossipKeySecret, "gossip-key-secret", "tether-gossip-key", "Secret (key \"key\") mounted into gossip-store pods without tether.dev/gossip-key-secret (empty: every gossip pod must name one)")
	fs.Var(&c.ExcludedNamespaces, "exclude-namespace", "namespace never injected, besides kube-system and --namespace (repeatable)")
	fs.BoolVar(&c.PrometheusScrape, "sidecar-prometheus-scrape", false, "add prometheus.io/scrape, port and path for the sidecar's admin port to pods without tether.dev/prometheus-scrape")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
}

// injectOptions turns the sidecar flags into inject.Options.
func (c *Config) injectOptions() (inject.Options, error) {
	o := inject.Options{
		Image:               c.SidecarImage,
		ImagePullPolicy:     corev1.PullPolicy(c.SidecarPullPolicy),
		PlainContainer:      !c.NativeSidecar,
		PreStopSleep:        c.PreStopSleep,
		Version:             Version,
		Store:               config.StoreBackend(c.DefaultStore),
		RedisAddress:        c.RedisAddress,
		RedisPasswordSecret: c.RedisPasswordSecret,
		RedisUsername:       c.RedisUsername,
		RedisTLS:            c.RedisTLS,
		RedisCASecret:       c.RedisCASecret,
		GossipKeySecret:     c.GossipKeySecret,
		ExcludedNamespaces:  append([]string{"kube-system", c.Namespace}, c.ExcludedNamespaces...),
		PrometheusScrape:    c.PrometheusScrape,
	}
	switch o.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever, "":
	default:
		return o, fmt.Errorf("--sidecar-image-pull-policy: %q is not Always, IfNotPresent or Never", c.SidecarPullPolicy)
	}
	for _, r := range []struct {
		flag, v string
		list    *corev1.ResourceList
		name    corev1.ResourceName
	}{
		{"sidecar-cpu-request", c.SidecarCPURequest, &o.Resources.Requests, corev1.ResourceCPU},
		{"sidecar-memory-request", c.SidecarMemRequest, &o.Resources.Requests, corev1.ResourceMemory},
		{"sidecar-cpu-limit", c.SidecarCPULimit, &o.Resources.Limits, corev1.ResourceCPU},
		{"sidecar-memory-limit", c.SidecarMemLimit, &o.Resources.Limits, corev1.ResourceMemory},
	} {
		if r.v == "" {
			continue
		}
		q, err := resource.ParseQuantity(r.v)
		if err != nil {
			return o, fmt.Errorf("--%s: %w", r.flag, err)
		}
		if *r.list == nil {
			*r.list = corev1.ResourceList{}
		}
		(*r.list)[r.name] = q
	}
	return o, nil
}

// Validate checks the configuration without binding or connecting
// anything (the chart's tests run it on the rendered arguments).
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	o, err := c.injectOptions()
	if err != nil {
		return err
	}
	_, err = inject.New(o)
	return err
}

func (c *Config) validate() error {
	switch {
	case c.SelfManaged && c.CertDir != "":
		return errors.New("set --cert-dir or --self-managed-certs, not both")
	case !c.SelfManaged && c.CertDir == "":
		return errors.New("no certificate source: set --cert-dir (cert-manager) or --self-managed-certs")
	case c.SelfManaged && (c.SecretName == "" || c.ServiceName == "" || c.WebhookConfig == "" || c.Namespace == ""):
		return errors.New("--self-managed-certs needs --secret-name, --service-name, --webhook-config and --namespace")
	case c.ManageRBAC && (c.SidecarClusterRole == "" || c.SidecarRoleBinding == ""):
		return errors.New("--manage-rbac needs --sidecar-cluster-role and --sidecar-role-binding")
	case c.ManageRBAC && c.ModelServerClusterRole != "" && c.ModelServerRoleBinding == "":
		return errors.New("--model-server-cluster-role needs --model-server-role-binding")
	case c.ManageRBAC && c.ModelServerClusterRole != "" && c.ModelServerRoleBinding == c.SidecarRoleBinding:
		return errors.New("--model-server-role-binding must differ from --sidecar-role-binding (each role has its own binding)")
	case c.Listen == "":
		return errors.New("--listen is required")
	}
	return nil
}

// needsKube reports whether any part talks to the API server.
func (c *Config) needsKube() bool { return c.SelfManaged || c.ManageRBAC }

// stringList is a repeatable, comma-splitting flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}
