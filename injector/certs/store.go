package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Store holds the current serving certificate. Readers never block.
type Store struct {
	cur atomic.Pointer[loaded]
}

type loaded struct {
	pair KeyPair
	cert *tls.Certificate
}

// Set installs a key pair; it is a no-op when the pair is unchanged.
func (s *Store) Set(kp KeyPair) (changed bool, err error) {
	if old := s.cur.Load(); old != nil && bytes.Equal(old.pair.CertPEM, kp.CertPEM) && bytes.Equal(old.pair.KeyPEM, kp.KeyPEM) {
		return false, nil
	}
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return false, fmt.Errorf("serving key pair: %w", err)
	}
	s.cur.Store(&loaded{pair: kp, cert: &c})
	return true, nil
}

// Ready reports whether a certificate has been loaded.
func (s *Store) Ready() bool { return s.cur.Load() != nil }

// Current returns the loaded key pair (zero before the first Set).
func (s *Store) Current() KeyPair {
	if l := s.cur.Load(); l != nil {
		return l.pair
	}
	return KeyPair{}
}

// GetCertificate is the tls.Config hook.
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l := s.cur.Load()
	if l == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return l.cert, nil
}

// TLSConfig is a server configuration serving the Store's certificate.
func (s *Store) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.GetCertificate}
}

// DirWatcher loads tls.crt and tls.key from a directory (a mounted Secret
// that cert-manager renews) and reloads them when their content changes.
// Polling content rather than watching inodes copes with the kubelet's
// symlink swaps and needs no extra dependency.
type DirWatcher struct {
	Dir      string
	Interval time.Duration // default 10s
	Store    *Store
	Log      *slog.Logger
}

// Load reads the pair once.
func (d *DirWatcher) Load() error {
	var kp KeyPair
	var err error
	if kp.CertPEM, err = os.ReadFile(filepath.Join(d.Dir, "tls.crt")); err != nil {
		return err
	}
	if kp.KeyPEM, err = os.ReadFile(filepath.Join(d.Dir, "tls.key")); err != nil {
		return err
	}
	changed, err := d.Store.Set(kp)
	if err != nil {
		return err
	}
	if changed {
		d.Log.Info("serving certificate loaded", "dir", d.Dir)
	}
	return nil
}

// Run reloads on change until ctx is done. A bad pair (the two files
// caught mid-update) keeps the previous one and is retried next tick. It
// returns nil (a lifecycle.Part).
func (d *DirWatcher) Run(ctx context.Context) error {
	iv := d.Interval
	if iv <= 0 {
		iv = 10 * time.Second
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := d.Load(); err != nil {
				d.Log.Warn("reloading serving certificate", "dir", d.Dir, "err", err)
			}
		}
	}
}
