package redisstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// privateCA is a certificate authority of the test's own, as a company's
// private CA would be: no system root knows it.
type privateCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newPrivateCA(t *testing.T, name string) *privateCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &privateCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serverFiles writes a certificate for 127.0.0.1 signed by ca, and its key,
// into dir.
func (ca *privateCA) serverFiles(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "redis"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key")
	writeTestFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeTestFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return certFile, keyFile
}

func writeTestFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// A Redis whose certificate comes from a private CA: store.redis.caFile
// verifies it (the store works over TLS); without it, or with another CA,
// the sidecar refuses to start at once (no retry fixes a certificate),
// naming the certificate problem, even with requireAtStartup: false.
func TestTLSWithPrivateCA(t *testing.T) {
	dir := t.TempDir()
	ca := newPrivateCA(t, "tether test private CA")
	certFile, keyFile := ca.serverFiles(t, dir)
	tlsPort := freeTCPPort(t)
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no")
	caFile := filepath.Join(dir, "ca.crt")
	writeTestFile(t, caFile, ca.pem)
	otherCA := filepath.Join(dir, "other.crt")
	writeTestFile(t, otherCA, newPrivateCA(t, "another CA").pem)

	tlsCfg := func(caFile string) *config.RedisStore {
		cfg := cfgFor(srv)
		cfg.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		// Generous: the first use of the system roots parses them.
		cfg.Timeout = config.Duration{Duration: 10 * time.Second}
		cfg.TLS, cfg.CAFile = true, caFile
		return cfg
	}

	e := newEnv(t, srv, tlsCfg(caFile), Options{})
	if _, err := e.s.Create(ctx, "k", store.Binding{Pod: "a", Gen: 1}, time.Minute); err != nil {
		t.Fatalf("Create over TLS: %v", err)
	}
	if b, ok, err := e.s.Lookup(ctx, "k", time.Minute); err != nil || !ok || b.Pod != "a" {
		t.Fatalf("Lookup over TLS: %+v %v %v", b, ok, err)
	}

	for name, f := range map[string]string{"system roots": "", "another CA": otherCA} {
		for _, required := range []bool{true, false} {
			cfg := tlsCfg(f)
			cfg.RequireAtStartup = &required
			_, err := New(ctx, cfg, Options{StartupTimeout: time.Minute})
			if err == nil || !strings.Contains(err.Error(), "TLS certificate of "+cfg.Address+" is not verified") {
				t.Fatalf("%s, requireAtStartup %v: New = %v, want a certificate verification error", name, required, err)
			}
		}
	}

	notPEM := filepath.Join(dir, "not.pem")
	writeTestFile(t, notPEM, []byte("not a certificate\n"))
	for f, want := range map[string]string{
		notPEM:                        "store.redis.caFile " + notPEM + ": no PEM certificate in it",
		filepath.Join(dir, "missing"): "store.redis.caFile: open",
	} {
		if _, err := New(ctx, tlsCfg(f), Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("caFile %s: New = %v, want %q", f, err, want)
		}
	}
}
