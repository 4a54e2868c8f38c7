package jwtauth

import (
	"context"
	"time"
)

// Run reloads the key files when their content changes, until ctx is done.
//
// It polls (every 2 s) and compares file contents rather than watching
// with inotify: Kubernetes updates a Secret volume by swapping a symlink
// (..data) to a new directory, which a watch on the file itself never
// sees, and a copied file may keep its mtime and size. Key files are a few
// KB, so reading them every few seconds costs nothing, and comparing bytes
// catches every change however it was made. Call Run once.
//
// A new key set replaces the old one atomically. A change that fails to
// load (a half-written file, a bad key) keeps the old keys, is logged and
// counted in tether_jwt_key_reload_errors_total once per distinct content,
// and is retried on every poll until the files are fixed. It returns nil
// (a lifecycle.Part).
func (v *Verifier) Run(ctx context.Context) error {
	t := time.NewTicker(v.pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			v.reload()
		}
	}
}

// reload is one poll: read, compare, parse, swap.
func (v *Verifier) reload() {
	files, err := readKeyFiles(v.cfg)
	if err != nil {
		// A file missing for a moment (mid-rotation) or unreadable: keep
		// the old keys. Report each distinct error once.
		v.reloadFailed(&keyFiles{hmac: []byte("read error: " + err.Error())}, err)
		return
	}
	if files.equal(v.loaded) {
		v.failed = nil // a bad change was reverted
		return
	}
	if files.equal(v.failed) {
		return
	}
	ks, err := parseKeyFiles(v.cfg, files)
	if err != nil {
		v.reloadFailed(files, err)
		return
	}
	v.keys.Store(ks)
	v.loaded, v.failed = files, nil
	v.log.Info("jwt: key files reloaded", "publicKeys", len(ks.public), "hmac", ks.hmac != nil)
}

func (v *Verifier) reloadFailed(files *keyFiles, err error) {
	if files.equal(v.failed) {
		return
	}
	v.failed = files
	v.reloadErrors.Inc()
	v.log.Error("jwt: key files changed but could not be loaded; keeping the previous keys", "err", err)
}
