package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Topology is how the config's addresses are read.
type Topology string

const (
	// Single is one node: `address`.
	Single Topology = "single"
	// Sentinel is `addresses` of Sentinels plus `masterName`: the client
	// asks them for the current master and follows failovers.
	Sentinel Topology = "sentinel"
	// Cluster is `addresses` without `masterName`: seed nodes of a Redis
	// Cluster (one seed is enough; the client learns the rest).
	Cluster Topology = "cluster"
)

// TopologyOf tells which kind of deployment cfg describes.
func TopologyOf(cfg *config.RedisStore) Topology {
	switch {
	case cfg.MasterName != "":
		return Sentinel
	case len(cfg.Addresses) > 0:
		return Cluster
	default:
		return Single
	}
}

// universalOptions maps the config to go-redis options. The per-operation
// timeout bounds every step of a call (dial, write, read, pool wait) and is
// also set as a context deadline on each call, so the request never waits
// longer than timeout on Redis.
func universalOptions(cfg *config.RedisStore, password string) (*redis.UniversalOptions, error) {
	top := TopologyOf(cfg)
	addrs := cfg.Addresses
	if top == Single {
		addrs = []string{cfg.Address}
	}
	if len(addrs) == 0 || addrs[0] == "" {
		return nil, errors.New("store.redis: address or addresses required")
	}
	if top == Cluster && cfg.DB != 0 {
		return nil, fmt.Errorf("store.redis: db %d: Redis Cluster has only db 0", cfg.DB)
	}
	timeout := cfg.Timeout.Duration
	if timeout <= 0 {
		timeout = config.DefaultRedisTimeout
	}
	o := &redis.UniversalOptions{
		Addrs:      addrs,
		MasterName: cfg.MasterName,
		// A single seed under `addresses` is still a Cluster.
		IsClusterMode: top == Cluster,
		DB:            cfg.DB,
		Username:      cfg.Username,
		Password:      password,
		// No CLIENT SETNAME / SETINFO on connect: a least-privilege ACL
		// user (see the README) has no CLIENT permissions.
		DisableIdentity: true,

		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		// One dial attempt per call: a retried dial cannot fit in the budget.
		DialerRetries: 1,
		// One immediate retry, within the same deadline, so a pooled
		// connection that Redis closed (a restart) costs no failed call.
		// Every operation is idempotent (see scripts.go), so a retry after
		// an unseen reply is safe.
		MaxRetries:      1,
		MinRetryBackoff: -1,
		MaxRetryBackoff: -1,
		// Only plain commands: no maintenance-notification handshake.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if top == Sentinel {
		// Sentinels usually share the data nodes' credentials in managed
		// setups; a separate Sentinel password is not in the schema yet.
		o.SentinelUsername = cfg.Username
		o.SentinelPassword = password
	}
	if cfg.TLS {
		// System roots unless caFile (the bundle's where the system has
		// none); go-redis sets ServerName from each node's host.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile == "" {
			useFallbackRoots()
		} else {
			roots, err := readCAFile(cfg.CAFile)
			if err != nil {
				return nil, err
			}
			o.TLSConfig.RootCAs = roots
		}
	}
	return o, nil
}

// readCAFile reads the PEM certificates of caFile into a pool that
// replaces the system roots. It is read once, at start: a new CA takes a
// restart (a rolling one, while the old CA still signs Redis's
// certificate, has no downtime).
func readCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store.redis.caFile: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("store.redis.caFile %s: no PEM certificate in it", path)
	}
	return roots, nil
}

// readPassword reads passwordFile, dropping the trailing newline that
// editors and `kubectl create secret --from-file` leave.
func readPassword(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("store.redis: passwordFile: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// startupError turns the first PING's failure into the message an operator
// needs: which address, and whether it is the network or the credentials.
func startupError(cfg *config.RedisStore, err error) error {
	if isAuthError(err) {
		user := cfg.Username
		if user == "" {
			user = "default"
		}
		if strings.HasPrefix(err.Error(), "NOPERM") {
			return fmt.Errorf("store.redis: user %q lacks a permission the store needs (see the README's ACL): %w", user, err)
		}
		return fmt.Errorf("store.redis: authentication failed for user %q: %w", user, err)
	}
	addr := cfg.Address
	if addr == "" {
		addr = strings.Join(cfg.Addresses, ",")
	}
	if isCertError(err) {
		roots := "the system roots"
		if cfg.CAFile != "" {
			roots = "store.redis.caFile " + cfg.CAFile
		}
		return fmt.Errorf("store.redis: the TLS certificate of %s is not verified by %s: %w", addr, roots, err)
	}
	return fmt.Errorf("store.redis: cannot reach %s: %w", addr, netCause{err})
}

// isCertError reports a TLS certificate that did not verify: a wrong CA or
// server name, which no retry fixes.
func isCertError(err error) bool {
	var ve *tls.CertificateVerificationError
	return errors.As(err, &ve)
}

func isAuthError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "ERR AUTH", "ERR invalid password", "ERR invalid username-password"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// netCause prints the innermost cause of a dial error ("connection
// refused" rather than "dial tcp 127.0.0.1:6379: connect: connection
// refused", since the message already names the address) and still
// unwraps to the full error.
type netCause struct{ err error }

func (c netCause) Unwrap() error { return c.err }

func (c netCause) Error() string {
	err := c.err
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
		var sys *os.SyscallError
		if errors.As(err, &sys) {
			err = sys.Err
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer (timeout)"
	}
	return err.Error()
}

// startupPing checks that Redis answers and accepts the credentials.
// Network errors are retried until startupTimeout (Redis may be starting
// next to us); a refused login or an unverified
// certificate is final at once.
func startupPing(ctx context.Context, c redis.UniversalClient, startupTimeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	var err error
	for {
		// Each try is bounded by the client's per-operation timeouts.
		err = c.Ping(ctx).Err()
		if err == nil || isAuthError(err) || isCertError(err) {
			return err
		}
		var re redis.Error
		if errors.As(err, &re) && !isUnavailable(re) {
			return err // Redis answered with something else: retrying will not help
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
