package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The harness's default binary paths follow the versions pinned in
// build-kube.sh; a bump of one without the other would make the tests look
// for binaries that make kube-tools never builds.
func TestVersionsMatchBuildScript(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "tools", "build-kube.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, want := range []string{
		"KUBE_VERSION=${KUBE_VERSION:-" + KubeVersion + "}",
		"ETCD_VERSION=${ETCD_VERSION:-" + EtcdVersion + "}",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("build-kube.sh does not pin %q; update cluster.KubeVersion/EtcdVersion or the script", want)
		}
	}
}

func TestBinariesFromEnv(t *testing.T) {
	t.Setenv("TETHER_KUBE_APISERVER", "/x/kube-apiserver")
	t.Setenv("TETHER_ETCD", "")
	t.Setenv("TETHER_TOOLS", "/cache")
	a, e := Binaries()
	if a != "/x/kube-apiserver" || e != filepath.Join("/cache", "etcd-"+EtcdVersion, "etcd") {
		t.Fatalf("Binaries() = %q, %q", a, e)
	}
}
