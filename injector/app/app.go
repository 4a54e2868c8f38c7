package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/rbac"
	"github.com/tetherproxy/tether/injector/webhook"
	"github.com/tetherproxy/tether/sidecar/buildinfo"
	"github.com/tetherproxy/tether/sidecar/kubeclient"
	"github.com/tetherproxy/tether/sidecar/lifecycle"
)

// App is a configured injector with its listeners bound.
type App struct {
	cfg      Config
	log      *slog.Logger
	client   kubernetes.Interface
	store    *certs.Store
	gatherer prometheus.Gatherer
	handler  *webhook.Handler
	tlsLn    net.Listener
	adminLn  net.Listener
}

// New checks cfg, builds the parts and binds both listeners (so the
// addresses are known before Run, with port 0 in tests). client may be
// nil: one is built from --kubeconfig or the in-cluster config when the
// certificates or RBAC need the API. reg must also be a Gatherer to serve
// /metrics (a *prometheus.Registry is).
func New(cfg Config, client kubernetes.Interface, log *slog.Logger, reg prometheus.Registerer) (*App, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts, err := cfg.injectOptions()
	if err != nil {
		return nil, err
	}
	inj, err := inject.New(opts)
	if err != nil {
		return nil, err
	}
	h, err := webhook.New(inj, log, reg)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(buildinfo.Collector()); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if client == nil && cfg.needsKube() {
		if client, err = kubeclient.New(cfg.Kubeconfig, "tether-injector"); err != nil {
			return nil, err
		}
	}
	a := &App{cfg: cfg, log: log, client: client, store: &certs.Store{}, handler: h}
	// tether_injector_certificate_expiry_timestamp_seconds, for alerts.
	if err := reg.Register(a.store.Collector()); err != nil {
		return nil, err
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		a.gatherer = g
	}
	if a.tlsLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	if cfg.AdminListen != "" {
		if a.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			a.tlsLn.Close()
			return nil, fmt.Errorf("--admin-listen: %w", err)
		}
	}
	return a, nil
}

// WebhookAddr is the bound TLS address.
func (a *App) WebhookAddr() net.Addr { return a.tlsLn.Addr() }

// AdminAddr is the bound admin address (nil when off).
func (a *App) AdminAddr() net.Addr {
	if a.adminLn == nil {
		return nil
	}
	return a.adminLn.Addr()
}

// Certificates is the serving certificate source (for tests).
func (a *App) Certificates() *certs.Store { return a.store }

// Run serves until ctx is done, then drains and returns. Every part runs
// in one lifecycle.Run: a part that fails stops the others and its error
// is returned; on stop the listeners drain before the certificate and
// RoleBinding loops end.
func (a *App) Run(ctx context.Context) error {
	// Certificates first: the TLS listener answers only once one is loaded.
	var loops lifecycle.Group
	if a.cfg.SelfManaged {
		sm := &certs.SelfManaged{
			Client: a.client, Namespace: a.cfg.Namespace, SecretName: a.cfg.SecretName,
			ServiceName: a.cfg.ServiceName, ExtraSANs: a.cfg.ExtraSANs,
			WebhookConfig: a.cfg.WebhookConfig, Webhooks: a.cfg.Webhooks,
			CALifetime: a.cfg.CALifetime, CertLifetime: a.cfg.CertLifetime,
			Interval: a.cfg.CertCheckInterval, Store: a.store, Log: a.log,
		}
		loops = append(loops, lifecycle.Part{Name: "certificates", Run: sm.Run})
	} else {
		dw := &certs.DirWatcher{Dir: a.cfg.CertDir, Store: a.store, Log: a.log}
		if err := dw.Load(); err != nil {
			a.closeListeners()
			return fmt.Errorf("--cert-dir: %w", err)
		}
		loops = append(loops, lifecycle.Part{Name: "certificates", Run: dw.Run})
	}
	if a.cfg.ManageRBAC {
		b := &rbac.Binder{Client: a.client, ClusterRole: a.cfg.SidecarClusterRole, BindingName: a.cfg.SidecarRoleBinding,
			ModelServerClusterRole: a.cfg.ModelServerClusterRole, ModelServerBindingName: a.cfg.ModelServerRoleBinding, Log: a.log}
		loops = append(loops, lifecycle.Part{Name: "rbac", Run: b.Run})
	}

	mux := http.NewServeMux()
	mux.Handle(webhook.PathMutate, a.handler)
	mux.Handle(webhook.PathOptIn, a.handler)
	a.health(mux)
	tlsSrv := a.server(mux)
	tlsSrv.TLSConfig = a.store.TLSConfig()
	servers := lifecycle.Group{lifecycle.HTTPServer("webhook", tlsSrv, func() error { return tlsSrv.ServeTLS(a.tlsLn, "", "") }, drainTimeout, a.log)}
	if a.adminLn != nil {
		admin := http.NewServeMux()
		a.health(admin)
		if a.gatherer != nil {
			admin.Handle("/metrics", promhttp.HandlerFor(a.gatherer, promhttp.HandlerOpts{}))
		}
		adminSrv := a.server(admin)
		servers = append(servers, lifecycle.HTTPServer("admin", adminSrv, func() error { return adminSrv.Serve(a.adminLn) }, drainTimeout, a.log))
	}
	a.log.Info("tether-injector running", "webhook", a.tlsLn.Addr().String(), "version", Version,
		"selfManagedCerts", a.cfg.SelfManaged, "manageRBAC", a.cfg.ManageRBAC)

	err := lifecycle.Run(ctx, nil, loops, servers)
	a.log.Info("tether-injector stopped", "err", err)
	return err
}

// drainTimeout bounds how long in-flight admission reviews may finish on
// shutdown (the API server's own webhook timeout is at most 30 s, and
// typically 10 s).
const drainTimeout = 10 * time.Second

func (a *App) closeListeners() {
	a.tlsLn.Close()
	if a.adminLn != nil {
		a.adminLn.Close()
	}
}

func (a *App) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
}

// health: /healthz is the process; /readyz needs a serving certificate.
func (a *App) health(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.store.Ready() {
			http.Error(w, "no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}
