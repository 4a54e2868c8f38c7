package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Modelsim is a simulated model server process (bin/modelsim).
type Modelsim struct {
	*Process
	// Addr is its listen address, host:port.
	Addr string
	// ID is what it reports in X-Modelsim-Id.
	ID string
}

// StartModelsim runs bin/modelsim on addr (for example 127.0.0.5:8000) with
// identity id and waits until it answers /health. Extra flags go to args.
func StartModelsim(t testing.TB, addr, id string, args ...string) *Modelsim {
	t.Helper()
	bin := Binary(t, "modelsim")
	all := append([]string{"--listen", addr, "--id", id,
		// Fast simulated model: the e2e tests assert routing, not timing.
		"--prefill-per-token", "0s", "--decode-per-token", "0s"}, args...)
	p := StartProcess(t, "modelsim "+id, bin, all, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitHTTP(ctx, p, http.DefaultClient, "http://"+addr+"/health", ""); err != nil {
		t.Fatalf("modelsim %s on %s: %v\n%s", id, addr, err, p.Tail(20))
	}
	return &Modelsim{Process: p, Addr: addr, ID: id}
}

// SidecarSpec describes one tether-sidecar process, as the injector would
// run it in a router pod.
type SidecarSpec struct {
	// Name is the router pod's name (POD_NAME) and the process's log name.
	Name string
	// Namespace is POD_NAMESPACE.
	Namespace string
	// IP is POD_IP, a 127.0.0.x address.
	IP string
	// Config is the sidecar configuration (YAML), written to a file.
	Config string
	// Kubeconfig is passed as --kubeconfig when set.
	Kubeconfig string
	// Admin is the config's admin address, polled for /readyz.
	Admin string
	// Env is added to the process environment.
	Env []string
}

// Sidecar is a running tether-sidecar.
type Sidecar struct {
	*Process
	Spec SidecarSpec
}

// StartSidecar writes the config, starts tether-sidecar (from its image:
// see Binary) and waits for its /readyz (stores and discovery synced).
func StartSidecar(t testing.TB, s SidecarSpec) *Sidecar {
	t.Helper()
	sc := startSidecar(t, s)
	if err := sc.WaitReady(time.Minute); err != nil {
		t.Fatalf("sidecar %s: %v\n%s", s.Name, err, sc.Tail(40))
	}
	return sc
}

// StartSidecarNoWait starts a sidecar without waiting for readiness.
func StartSidecarNoWait(t testing.TB, s SidecarSpec) *Sidecar {
	t.Helper()
	return startSidecar(t, s)
}

func startSidecar(t testing.TB, s SidecarSpec) *Sidecar {
	t.Helper()
	bin := Binary(t, "tether-sidecar")
	cfg := filepath.Join(t.TempDir(), "tether.yaml")
	if err := os.WriteFile(cfg, []byte(s.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg}
	if s.Kubeconfig != "" {
		args = append(args, "--kubeconfig", s.Kubeconfig)
	}
	env := append([]string{"POD_NAMESPACE=" + s.Namespace, "POD_NAME=" + s.Name, "POD_IP=" + s.IP}, s.Env...)
	return &Sidecar{Process: StartProcess(t, "sidecar "+s.Name, bin, args, env), Spec: s}
}

// WaitReady polls the admin /readyz until it answers 200.
func (s *Sidecar) WaitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return waitHTTP(ctx, s.Process, http.DefaultClient, "http://"+s.Spec.Admin+"/readyz", "")
}

// AccessLog is the subset of the sidecar's access-log line the tests read.
type AccessLog struct {
	Msg         string `json:"msg"`
	Pool        string `json:"pool"`
	Decision    string `json:"decision"`
	SelectedPod string `json:"selected_pod"`
	PrefillPod  string `json:"prefill_pod"`
	Status      int    `json:"status"`
	KeyHash     string `json:"key_hash"`
	Retried     bool   `json:"retried"`
	StoreError  bool   `json:"store_error"`
}

// AccessLogs parses the JSON lines of the sidecar's output that carry a
// selected_pod or a status (the access-log lines).
func (s *Sidecar) AccessLogs() []AccessLog {
	var out []AccessLog
	for _, l := range s.Lines() {
		if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"selected_pod"`) {
			continue
		}
		var a AccessLog
		if json.Unmarshal([]byte(l), &a) == nil {
			out = append(out, a)
		}
	}
	return out
}
