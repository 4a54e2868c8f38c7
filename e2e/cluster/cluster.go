// Package cluster runs a real Kubernetes control plane for end-to-end
// tests: etcd and kube-apiserver as child processes on 127.0.0.1, built
// from the Go module proxy by e2e/tools/build-kube.sh (make kube-tools).
// There is no kubelet, scheduler or controller manager: the test plays the
// kubelet by writing pod status (MakeReady, SetNotReady), and the
// processes a kubelet would run (modelsim backends, tether sidecars) are
// started by the test on loopback addresses (127.0.0.2, 127.0.0.3, … are
// routable on Linux without setup).
//
// Everything a Cluster starts or writes is removed in t.Cleanup.
package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Pinned control-plane versions; they must match e2e/tools/build-kube.sh
// (TestVersionsMatchBuildScript checks).
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.7.3"
)

// ServiceClusterIPRange is the apiserver's service range. Nothing routes
// it (there is no kube-proxy); it only has to be valid.
const ServiceClusterIPRange = "10.96.0.0/16"

// startTimeout bounds one start of the control plane. A warm start takes
// about 3 s; the bound is generous because the machine is shared.
const startTimeout = 2 * time.Minute

// Cluster is a running etcd + kube-apiserver pair.
type Cluster struct {
	// URL is the apiserver's https://127.0.0.1:PORT.
	URL string

	dir        string
	pki        *pki
	cfg        *rest.Config
	client     kubernetes.Interface
	kubeconfig string
	etcd       *Process
	apiserver  *Process
	// egress refuses, records and reports any apiserver request that
	// would leave loopback.
	egress         *egressGuard
	egressExpected bool
}

// Binaries returns the kube-apiserver and etcd paths: $TETHER_KUBE_APISERVER
// and $TETHER_ETCD, or the tool cache that make kube-tools fills.
func Binaries() (apiserver, etcd string) {
	tools := os.Getenv("TETHER_TOOLS")
	if tools == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		tools = filepath.Join(cache, "tether")
	}
	apiserver = os.Getenv("TETHER_KUBE_APISERVER")
	if apiserver == "" {
		apiserver = filepath.Join(tools, "kube-"+KubeVersion, "kube-apiserver")
	}
	etcd = os.Getenv("TETHER_ETCD")
	if etcd == "" {
		etcd = filepath.Join(tools, "etcd-"+EtcdVersion, "etcd")
	}
	return apiserver, etcd
}

// Start runs a fresh control plane for t and waits until /readyz answers
// ok. A missing binary fails the test naming make kube-tools.
func Start(t testing.TB) *Cluster {
	t.Helper()
	apiserverBin, etcdBin := Binaries()
	for _, b := range []string{apiserverBin, etcdBin} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("control-plane binary %s is missing: run make kube-tools (or set TETHER_KUBE_APISERVER / TETHER_ETCD)", b)
		}
	}
	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatalf("generating certificates: %v", err)
	}
	guard, err := newEgressGuard()
	if err != nil {
		t.Fatalf("egress guard: %v", err)
	}
	c := &Cluster{dir: dir, pki: p, egress: guard}
	t.Cleanup(func() { guard.close(); c.checkEgress(t) })

	// Ports are picked free and then handed to the binaries, so another
	// process may take one in between: retry the start a few times.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = c.start(t, etcdBin, apiserverBin, attempt); lastErr == nil {
			break
		}
		t.Logf("control plane start attempt %d: %v", attempt+1, lastErr)
		c.stopProcesses()
	}
	if lastErr != nil {
		t.Fatalf("starting the control plane: %v", lastErr)
	}
	t.Cleanup(c.stopProcesses)
	return c
}

func (c *Cluster) start(t testing.TB, etcdBin, apiserverBin string, attempt int) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	etcdClient, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return err
	}
	etcdPeer, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	c.etcd, err = startProcess("etcd", etcdBin, []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(c.dir, fmt.Sprintf("etcd-%d", attempt)),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--unsafe-no-fsync", // throwaway data: no need to wait for the disk
		"--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, c.etcd, http.DefaultClient, etcdURL+"/health", `"health":"true"`); err != nil {
		return fmt.Errorf("etcd: %w\n%s", err, c.etcd.Tail(20))
	}

	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return err
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	c.apiserver, err = startProcess("kube-apiserver", apiserverBin, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.pki.certFile,
		"--tls-private-key-file=" + c.pki.keyFile,
		"--client-ca-file=" + c.pki.caFile,
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + c.pki.saKeyFile,
		"--service-account-signing-key-file=" + c.pki.saKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		// With a loopback advertise address the endpoint reconciler fails.
		"--endpoint-reconciler-type=none",
		// No controller manager creates service accounts' tokens.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + filepath.Join(c.dir, "certs"),
		"--v=0",
	}, c.egress.env())
	if err != nil {
		return err
	}
	c.cfg = &rest.Config{
		Host:            c.URL,
		BearerToken:     c.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCert},
		QPS:             200,
		Burst:           400,
	}
	if c.client, err = kubernetes.NewForConfig(c.cfg); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("kube-apiserver: %w\n%s", err, c.apiserver.Tail(30))
	}
	c.kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	return writeKubeconfig(c.kubeconfig, c.URL, c.pki.caCert, c.pki.adminToken)
}

func (c *Cluster) waitReady(ctx context.Context) error {
	for {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		select {
		case <-c.apiserver.Done():
			return fmt.Errorf("exited before ready: %v", c.apiserver.Err())
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %v", startTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitHTTP polls url until its body contains want or the process exits.
func waitHTTP(ctx context.Context, p *Process, hc *http.Client, url, want string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			var b strings.Builder
			_, _ = io.Copy(&b, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(b.String(), want) {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(b.String()))
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before ready: %v", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v", url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) stopProcesses() {
	// The apiserver first, so it does not spend its shutdown retrying etcd.
	for _, p := range []*Process{c.apiserver, c.etcd} {
		if p != nil {
			p.Stop()
		}
	}
}

// RESTConfig is an admin (system:masters) client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// KubeconfigPath is an admin kubeconfig file, for child processes
// (tether-sidecar --kubeconfig, helm, the injector).
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// AdminToken is the bearer token of the system:masters user.
func (c *Cluster) AdminToken() string { return c.pki.adminToken }

// CACert is the PEM of the CA that signed the apiserver's serving certificate.
func (c *Cluster) CACert() []byte { return append([]byte(nil), c.pki.caCert...) }

// Dir is a scratch directory removed with the cluster.
func (c *Cluster) Dir() string { return c.dir }

func writeKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e", Namespace: "default"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}
