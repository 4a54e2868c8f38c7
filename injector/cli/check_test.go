package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/injector/cli"
)

// TestCheckUsage: bad arguments exit 2 before any API call; the checks
// themselves run against a real API server in e2e/check_test.go.
func TestCheckUsage(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--checks=webhook,bogus"}, `--checks: unknown check "bogus" (checks: injector, webhook, certificate, admission, namespaces, pods, rbac, sidecar-rbac)`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}, "kubeconfig:"},
		{[]string{"--kubeconfig=" + empty}, "kubeconfig:"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		var out, errb bytes.Buffer
		t.Setenv("KUBERNETES_SERVICE_HOST", "") // never the in-cluster config
		code, ok := cli.Main(append([]string{"check"}, c.args...), nil, &out, &errb)
		if !ok || code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
