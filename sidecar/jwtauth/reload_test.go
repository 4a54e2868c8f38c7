package jwtauth

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// runVerifier starts Run with a fast poll and stops it when the test ends.
func runVerifier(t *testing.T, v *Verifier) {
	v.pollEvery = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// replace writes a file the way careful tools do: a temp file renamed
// over the old one, so a reader never sees half a key.
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadPEM(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	path := writeFile(t, dir, "key.pem", pemPublic(t, &k.rsa.PublicKey))
	v, reg := newVerifier(t, &config.JWT{PublicKeyFiles: []string{path}, Algorithms: []string{"RS256"}})
	runVerifier(t, v)
	tok1 := sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")
	tok2 := sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "")
	accepts := func(tok string) bool { _, ok := v.Claim(tok, "sub"); return ok }
	if !accepts(tok1) || accepts(tok2) {
		t.Fatal("before rotation: want key 1 only")
	}

	replace(t, path, pemPublic(t, &k.rsa2.PublicKey))
	testkit.Eventually(t, 10*time.Second, "rotation to key 2", func() bool { return accepts(tok2) })
	if accepts(tok1) {
		t.Fatal("after rotation: key 1 still accepted")
	}

	// A broken rotation keeps the working keys and is counted once.
	replace(t, path, []byte("-----BEGIN PUBLIC KEY-----\ngarbage\n"))
	testkit.Eventually(t, 10*time.Second, "reload error counted", func() bool {
		return testkit.Metric(t, reg, "tether_jwt_key_reload_errors_total") == 1
	})
	time.Sleep(50 * time.Millisecond) // several more polls of the same bad file
	if n := testkit.Metric(t, reg, "tether_jwt_key_reload_errors_total"); n != 1 {
		t.Fatalf("reload errors = %v after repeated polls of one bad file, want 1", n)
	}
	if !accepts(tok2) {
		t.Fatal("after a failed reload: previous key lost")
	}

	// A file that disappears is an error too, and keeps the keys.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "missing file counted", func() bool {
		return testkit.Metric(t, reg, "tether_jwt_key_reload_errors_total") == 2
	})
	if !accepts(tok2) {
		t.Fatal("after a missing file: previous key lost")
	}

	// Fixed: the next good content loads.
	replace(t, path, pemPublic(t, &k.rsa.PublicKey))
	testkit.Eventually(t, 10*time.Second, "rotation back to key 1", func() bool { return accepts(tok1) })
}

// TestReloadSecretVolume rotates an HMAC secret the way the kubelet
// updates a Secret volume: the file is a symlink through ..data, and the
// ..data symlink is swapped atomically to a new timestamped directory.
func TestReloadSecretVolume(t *testing.T) {
	dir := t.TempDir()
	write := func(ts, s string) {
		if err := os.MkdirAll(filepath.Join(dir, ts), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, ts), "secret", []byte(s))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	secret2 := "fedcba9876543210fedcba9876543210"
	write("..2024_01_01", secret)
	path := filepath.Join(dir, "secret")
	if err := os.Symlink("..data/secret", path); err != nil {
		t.Fatal(err)
	}
	v, _ := newVerifier(t, &config.JWT{HMACSecretFile: path, Algorithms: []string{"HS256"}})
	runVerifier(t, v)
	tok1 := sign(t, jwt.SigningMethodHS256, []byte(secret), claims(nil), "")
	tok2 := sign(t, jwt.SigningMethodHS256, []byte(secret2), claims(nil), "")
	accepts := func(tok string) bool { _, ok := v.Claim(tok, "sub"); return ok }
	if !accepts(tok1) || accepts(tok2) {
		t.Fatal("before rotation: want secret 1 only")
	}
	write("..2024_01_02", secret2)
	testkit.Eventually(t, 10*time.Second, "rotation to secret 2", func() bool { return accepts(tok2) })
	if accepts(tok1) {
		t.Fatal("after rotation: secret 1 still accepted")
	}
}

// TestReloadJWKSUnderLoad verifies while keys rotate, for the race detector.
func TestReloadJWKSUnderLoad(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	path := writeFile(t, dir, "jwks.json", jwks(t, jwkOf(t, &k.ec.PublicKey, "1")))
	v, _ := newVerifier(t, &config.JWT{JWKSFile: path, Algorithms: []string{"ES256"}})
	runVerifier(t, v)
	tok := sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "1")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				v.Claim(tok, "sub")
			}
		}
	}()
	for i := range 5 {
		replace(t, path, jwks(t, jwkOf(t, &k.ec.PublicKey, "1"), jwkOf(t, &k.ec2.PublicKey, string(rune('a'+i)))))
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	if _, ok := v.Claim(tok, "sub"); !ok {
		t.Fatal("key 1 lost across rotations that kept it")
	}
}
