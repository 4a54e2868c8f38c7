package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBinaryShippedFromImage: the shipped binaries come from their
// images' unpacked filesystems, the others from bin/.
func TestBinaryShippedFromImage(t *testing.T) {
	rootfs, bin := t.TempDir(), t.TempDir()
	want := map[string]string{
		"tether-sidecar":  filepath.Join(rootfs, "tether-sidecar", "tether-sidecar"),
		"tether-injector": filepath.Join(rootfs, "tether-injector", "tether-injector"),
		"modelsim":        filepath.Join(bin, "modelsim"),
	}
	for _, p := range want {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A bin/tether-sidecar of make build is not what ships: never used.
	if err := os.WriteFile(filepath.Join(bin, "tether-sidecar"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_ROOTFS", rootfs)
	t.Setenv("TETHER_BIN", bin)
	for name, p := range want {
		if got := Binary(t, name); got != p {
			t.Errorf("Binary(%s) = %s, want %s", name, got, p)
		}
	}
}
