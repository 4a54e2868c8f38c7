// Package redisstore is the Redis-backed store.Store: bindings shared by
// every router replica through one Redis (single node, Sentinel or
// Cluster), with a sliding TTL kept by Redis itself.
//
// Layout: one binding is one hash <keyPrefix>:<key> with the fields pod,
// prefillPod, created and gen, and the binding TTL as the key's TTL. The key
// is the caller's store key (session.StoreKey), never the raw session key.
// Every operation touches one key, so Cluster needs no hash tags and keys
// spread over all slots.
//
// Fail-open: at run time every Redis error or timeout is returned to the
// caller, which balances without stickiness; it is counted, logged at most
// once per LogInterval, and fed to a circuit breaker that, once open, answers
// store.ErrUnavailable without touching the network.
package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
)

// ErrBreakerOpen is returned (wrapped) while the breaker refuses calls. It
// wraps store.ErrUnavailable.
var ErrBreakerOpen = fmt.Errorf("redis breaker open: %w", store.ErrUnavailable)

// Options carry what the config does not: where metrics and logs go, and
// the failure handling's tuning (zero fields take the defaults).
type Options struct {
	// Reg receives the store's metrics; nil: unregistered.
	Reg prometheus.Registerer
	// Log receives the store's logs; nil: discarded.
	Log *slog.Logger

	// BreakerThreshold is how many consecutive failures open the breaker
	// (default 5).
	BreakerThreshold int
	// BreakerMinBackoff is how long the breaker stays open the first time
	// (default 1s); each failed probe doubles it up to BreakerMaxBackoff
	// (default 30s).
	BreakerMinBackoff time.Duration
	BreakerMaxBackoff time.Duration
	// LogInterval is the least time between two error log lines (default
	// 5s); the lines in between are counted in the next one's suppressed.
	LogInterval time.Duration
	// StartupTimeout is how long New retries an unreachable Redis before
	// giving up (default 5s). An authentication failure ends it at once.
	// With requireAtStartup: false, New tries once and starts degraded.
	StartupTimeout time.Duration
	// ReconnectInterval is the first pause between the background PINGs
	// of a store that started degraded; it doubles up to 5s (default
	// 250ms).
	ReconnectInterval time.Duration

	// hooks and dialer let this package's tests count round trips.
	hooks  []redis.Hook
	dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (o *Options) setDefaults() {
	if o.BreakerThreshold <= 0 {
		o.BreakerThreshold = 5
	}
	if o.BreakerMinBackoff <= 0 {
		o.BreakerMinBackoff = time.Second
	}
	if o.BreakerMaxBackoff < o.BreakerMinBackoff {
		o.BreakerMaxBackoff = max(30*time.Second, o.BreakerMinBackoff)
	}
	if o.LogInterval <= 0 {
		o.LogInterval = 5 * time.Second
	}
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = 5 * time.Second
	}
	if o.ReconnectInterval <= 0 {
		o.ReconnectInterval = 250 * time.Millisecond
	}
}

// Store is a store.Store on Redis.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration
	br      *breaker
	errLog  *rateLog
	log     *slog.Logger
	m       *metrics
	seen    *memory.Store // the bindings this replica has seen (seen.go)

	closeOnce sync.Once
	closeErr  error
	// stopReconnect ends the background reconnection of a store that
	// started degraded; reconnected is closed when it has ended.
	stopReconnect context.CancelFunc
	reconnected   chan struct{}
}

var _ store.Store = (*Store)(nil)

// New connects to Redis as cfg describes and PINGs it (retrying for
// StartupTimeout, or until ctx ends), so that a wrong address or password
// stops the sidecar before it listens, with an error naming the address
// and the cause.
func New(ctx context.Context, cfg *config.RedisStore, opts Options) (*Store, error) {
	opts.setDefaults()
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	password, err := readPassword(cfg.PasswordFile)
	if err != nil {
		return nil, err
	}
	uo, err := universalOptions(cfg, password)
	if err != nil {
		return nil, err
	}
	uo.Dialer = opts.dialer
	m, err := newMetrics(opts.Reg)
	if err != nil {
		return nil, fmt.Errorf("store.redis: metrics: %w", err)
	}
	routeLibraryLog(log)

	c := redis.NewUniversalClient(uo)
	for _, h := range opts.hooks {
		c.AddHook(h)
	}
	startup := opts.StartupTimeout
	if !cfg.Required() {
		startup = uo.ReadTimeout // one try: the store starts degraded instead of waiting
	}
	pingErr := startupPing(ctx, c, startup)
	if pingErr != nil && (cfg.Required() || isAuthError(pingErr) || isCertError(pingErr)) {
		// A refused login or an unverified certificate is a wrong
		// configuration, not an outage: it stops the sidecar even with
		// requireAtStartup: false.
		_ = c.Close()
		return nil, startupError(cfg, pingErr)
	}

	s := &Store{
		c:       c,
		prefix:  cmp.Or(cfg.KeyPrefix, config.DefaultRedisKeyPrefix) + ":",
		timeout: uo.ReadTimeout,
		log:     log,
		errLog:  &rateLog{log: log, interval: opts.LogInterval},
		m:       m,
		seen:    newSeen(),
	}
	s.br = newBreaker(opts.BreakerThreshold, opts.BreakerMinBackoff, opts.BreakerMaxBackoff, s.breakerChanged)
	if pingErr != nil {
		s.startDegraded(cfg, pingErr, opts.ReconnectInterval)
		return s, nil
	}
	log.Info("redis store connected", "topology", string(TopologyOf(cfg)), "addresses", addrList(cfg), "db", cfg.DB, "timeout", s.timeout)
	return s, nil
}

// startDegraded serves without stickiness from the start (the breaker held
// open, tether_store_breaker_open 1) and PINGs Redis in the background
// until it answers, then closes the breaker: stickiness resumes without a
// restart. It is what requireAtStartup: false does when Redis is down.
func (s *Store) startDegraded(cfg *config.RedisStore, cause error, interval time.Duration) {
	s.br.hold()
	s.m.open.Set(1)
	s.log.Warn("redis unreachable at start; serving without stickiness and reconnecting in the background (store.redis.requireAtStartup: false)",
		"err", startupError(cfg, cause).Error())
	ctx, cancel := context.WithCancel(context.Background())
	s.stopReconnect, s.reconnected = cancel, make(chan struct{})
	go func() {
		defer close(s.reconnected)
		wait := interval
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			pctx, pcancel := context.WithTimeout(ctx, s.timeout)
			err := s.c.Ping(pctx).Err()
			pcancel()
			if err == nil {
				s.br.done(success) // closes it: breakerChanged logs and clears the gauge
				return
			}
			s.errLog.warn("redis still unreachable; serving without stickiness", "err", err)
			wait = min(2*wait, 5*time.Second)
		}
	}()
}

func addrList(cfg *config.RedisStore) string {
	if cfg.Address != "" {
		return cfg.Address
	}
	return strings.Join(cfg.Addresses, ",")
}

// Lookup reads the binding and slides its expiry in one round trip: a
// MULTI/HMGET/PEXPIRE/EXEC transaction sent as one pipeline, atomic on the
// server and never more than one exchange (unlike EVALSHA, which needs a
// second when the script cache was flushed).
func (s *Store) Lookup(ctx context.Context, key string, ttl time.Duration) (store.Binding, bool, error) {
	var (
		b     store.Binding
		found bool
	)
	start := time.Now()
	err := s.do(ctx, opLookup, func(ctx context.Context) error {
		k := s.prefix + key
		pipe := s.c.TxPipeline()
		hm := pipe.HMGet(ctx, k, bindingFields...)
		pipe.PExpire(ctx, k, ms(ttl))
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		var err error
		b, found, err = parseFields(hm.Val())
		return err
	})
	if err != nil || !found {
		return store.Binding{}, false, err
	}
	// PEXPIRE counted from when Redis ran it; start is no later, so the
	// binding never outlives what we report.
	b.ExpiresAt = start.Add(ms(ttl))
	s.see(key, b, ttl)
	return b, true, nil
}

// Create commits b unless key holds a binding, atomically (createScript),
// and returns the binding that holds. A zero b.Created is set to now.
func (s *Store) Create(ctx context.Context, key string, b store.Binding, ttl time.Duration) (store.Binding, error) {
	start := time.Now()
	if b.Created.IsZero() {
		b.Created = start
	}
	var (
		created bool
		winner  store.Binding
		pttl    int64
	)
	err := s.do(ctx, opCreate, func(ctx context.Context) error {
		v, err := createScript.Run(ctx, s.c, []string{s.prefix + key},
			b.Pod, b.PrefillPod, strconv.FormatInt(b.Created.UnixNano(), 10),
			strconv.FormatUint(b.Gen, 10), ms(ttl).Milliseconds()).Result()
		if err != nil {
			return err
		}
		created, winner, pttl, err = parseCreate(v)
		return err
	})
	if err != nil {
		return store.Binding{}, err
	}
	if created {
		b.ExpiresAt = start.Add(ms(ttl))
		s.see(key, b, ttl)
		return b, nil
	}
	winner.ExpiresAt = expiry(start, pttl)
	left := ttl // a binding without an expiry (another tool's) is seen for a TTL
	if !winner.ExpiresAt.IsZero() {
		left = time.Until(winner.ExpiresAt)
	}
	s.see(key, winner, left)
	return winner, nil
}

// CompareAndDelete deletes key's binding only while it still matches old
// (deleteScript).
func (s *Store) CompareAndDelete(ctx context.Context, key string, old store.Binding) (bool, error) {
	var deleted bool
	err := s.do(ctx, opDelete, func(ctx context.Context) error {
		n, err := deleteScript.Run(ctx, s.c, []string{s.prefix + key},
			old.Pod, old.PrefillPod, strconv.FormatUint(old.Gen, 10)).Int64()
		deleted = n == 1
		return err
	})
	if deleted {
		s.seen.CompareAndDelete(ctx, key, old)
	}
	return deleted, err
}

// Peek reads the binding and its remaining TTL without refreshing it.
func (s *Store) Peek(ctx context.Context, key string) (store.Binding, bool, error) {
	var (
		b     store.Binding
		found bool
	)
	start := time.Now()
	err := s.do(ctx, opPeek, func(ctx context.Context) error {
		k := s.prefix + key
		pipe := s.c.TxPipeline()
		hm := pipe.HMGet(ctx, k, bindingFields...)
		pt := pipe.PTTL(ctx, k)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		var err error
		if b, found, err = parseFields(hm.Val()); found {
			// go-redis reports PTTL's -1/-2 as durations of -1/-2 ns.
			p := pt.Val()
			if p > 0 {
				p /= time.Millisecond
			}
			b.ExpiresAt = expiry(start, int64(p))
		}
		return err
	})
	if err != nil || !found {
		return store.Binding{}, false, err
	}
	return b, true, nil
}

// Close stops a background reconnection and closes the connections. It
// is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stopReconnect != nil {
			s.stopReconnect()
			<-s.reconnected
		}
		s.closeErr = s.c.Close()
		s.seen.Close()
	})
	return s.closeErr
}

// do runs one operation under the breaker, the per-operation deadline and
// the error accounting.
func (s *Store) do(ctx context.Context, op string, fn func(context.Context) error) error {
	if !s.br.allow() {
		s.m.errors.WithLabelValues(backend, op).Inc()
		return fmt.Errorf("store.redis: %s: %w", op, ErrBreakerOpen)
	}
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	start := time.Now()
	err := fn(opCtx)
	cancel()
	s.m.duration.WithLabelValues(backend, op).Observe(time.Since(start).Seconds())

	o := classify(ctx, err)
	s.br.done(o)
	if err == nil {
		return nil
	}
	s.m.errors.WithLabelValues(backend, op).Inc()
	if o == neutral {
		return fmt.Errorf("store.redis: %s: %w", op, err)
	}
	s.errLog.warn("redis store error; serving without stickiness", "op", op, "err", err)
	if o == failure {
		return fmt.Errorf("store.redis: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("store.redis: %s: %w", op, err)
}

// classify says what an operation's result tells about Redis. parent is
// the caller's context: when the caller gave up, nothing was learned.
func classify(parent context.Context, err error) outcome {
	switch {
	case err == nil:
		return success
	case errors.Is(parent.Err(), context.Canceled):
		return neutral
	}
	var re redis.Error
	if errors.As(err, &re) && !isUnavailable(re) {
		// Redis answered (WRONGTYPE, a script error …): it is up.
		return success
	}
	return failure
}

// isUnavailable reports whether an error reply means Redis is not serving
// (loading, failing over, cluster down, a refused login) rather than
// rejecting one command.
func isUnavailable(re redis.Error) bool {
	msg := re.Error()
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOAUTH", "WRONGPASS", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (s *Store) breakerChanged(open bool, backoff time.Duration) {
	if open {
		s.m.open.Set(1)
		s.log.Warn("redis breaker open: serving without stickiness", "retry_in", backoff)
		return
	}
	s.m.open.Set(0)
	s.log.Info("redis breaker closed: stickiness resumed")
}

// ms rounds a TTL to what PEXPIRE takes: whole milliseconds, at least one
// (PEXPIRE 0 would delete the key).
func ms(d time.Duration) time.Duration {
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// expiry turns a PTTL reply (ms; -1 no expiry, -2 no key) into ExpiresAt.
func expiry(from time.Time, pttl int64) time.Time {
	if pttl < 0 {
		return time.Time{}
	}
	return from.Add(time.Duration(pttl) * time.Millisecond)
}

// libLog sends go-redis's own log lines (it prints every failed dial to
// stderr by default) to the first store's logger at debug level: the store
// already counts and logs failures, rate-limited and structured.
var libLog sync.Once

func routeLibraryLog(log *slog.Logger) {
	libLog.Do(func() { redis.SetLogger(slogAdapter{log}) })
}

type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	a.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
