package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetherproxy/tether/sidecar/config"
)

func TestUniversalOptions(t *testing.T) {
	timeout := config.Duration{Duration: 75 * time.Millisecond}
	for _, tc := range []struct {
		name string
		cfg  config.RedisStore
		top  Topology
	}{
		{"single", config.RedisStore{Address: "redis:6379", DB: 3, Username: "u", Timeout: timeout}, Single},
		{"sentinel", config.RedisStore{Addresses: []string{"s1:26379", "s2:26379"}, MasterName: "mymaster", DB: 2, Username: "u", TLS: true, Timeout: timeout}, Sentinel},
		{"cluster", config.RedisStore{Addresses: []string{"c1:6379", "c2:6379", "c3:6379"}, Username: "u", TLS: true, Timeout: timeout}, Cluster},
		{"cluster with one seed", config.RedisStore{Addresses: []string{"c1:6379"}, Timeout: timeout}, Cluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TopologyOf(&tc.cfg); got != tc.top {
				t.Fatalf("TopologyOf = %s, want %s", got, tc.top)
			}
			o, err := universalOptions(&tc.cfg, "pw")
			if err != nil {
				t.Fatal(err)
			}
			wantAddrs := tc.cfg.Addresses
			if tc.top == Single {
				wantAddrs = []string{tc.cfg.Address}
			}
			if !slices.Equal(o.Addrs, wantAddrs) || o.MasterName != tc.cfg.MasterName || o.DB != tc.cfg.DB ||
				o.Username != tc.cfg.Username || o.Password != "pw" || o.IsClusterMode != (tc.top == Cluster) {
				t.Fatalf("options %+v do not match %+v", o, tc.cfg)
			}
			if tc.top == Sentinel && (o.SentinelUsername != "u" || o.SentinelPassword != "pw") {
				t.Errorf("sentinel credentials %q/%q", o.SentinelUsername, o.SentinelPassword)
			}
			if (o.TLSConfig != nil) != tc.cfg.TLS {
				t.Fatalf("TLSConfig %v with tls=%v", o.TLSConfig, tc.cfg.TLS)
			}
			if o.TLSConfig != nil && (o.TLSConfig.MinVersion != tls.VersionTLS12 || o.TLSConfig.RootCAs != nil || o.TLSConfig.InsecureSkipVerify) {
				t.Errorf("TLS config %+v: want TLS 1.2+ with the system roots", o.TLSConfig)
			}
			for name, d := range map[string]time.Duration{"dial": o.DialTimeout, "read": o.ReadTimeout, "write": o.WriteTimeout, "pool": o.PoolTimeout} {
				if d != 75*time.Millisecond {
					t.Errorf("%s timeout %s, want the configured 75ms", name, d)
				}
			}
			if !o.ContextTimeoutEnabled {
				t.Error("ContextTimeoutEnabled off: the per-call deadline would be ignored")
			}

			// And go-redis builds the client kind we mean.
			c := redis.NewUniversalClient(o)
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			if isCluster != (tc.top == Cluster) {
				t.Fatalf("client %T for %s", c, tc.top)
			}
			if tc.top == Sentinel {
				f := o.Failover()
				if f.MasterName != "mymaster" || !slices.Equal(f.SentinelAddrs, tc.cfg.Addresses) || f.DB != 2 || f.TLSConfig == nil {
					t.Fatalf("failover options %+v", f)
				}
			}
			if tc.top == Cluster {
				co := o.Cluster()
				if !slices.Equal(co.Addrs, tc.cfg.Addresses) || co.Username != tc.cfg.Username || co.Password != "pw" {
					t.Fatalf("cluster options %+v", co)
				}
			}
		})
	}
}

func TestUniversalOptionsErrors(t *testing.T) {
	if _, err := universalOptions(&config.RedisStore{Addresses: []string{"c1:6379"}, DB: 1}, ""); err == nil || !strings.Contains(err.Error(), "db 1") {
		t.Fatalf("cluster with db 1: %v", err)
	}
	if _, err := universalOptions(&config.RedisStore{}, ""); err == nil {
		t.Fatal("no address accepted")
	}
	// The default timeout applies when the config was not defaulted.
	o, err := universalOptions(&config.RedisStore{Address: "a:1"}, "")
	if err != nil || o.ReadTimeout != config.DefaultRedisTimeout {
		t.Fatalf("default timeout: %v %v", o.ReadTimeout, err)
	}
}

func TestReadPassword(t *testing.T) {
	p := t.TempDir() + "/pw"
	for content, want := range map[string]string{"s3cret\n": "s3cret", "s3cret\r\n": "s3cret", "s3cret": "s3cret", " sp ace \n\n": " sp ace "} {
		os.WriteFile(p, []byte(content), 0o600)
		if got, err := readPassword(p); err != nil || got != want {
			t.Errorf("readPassword(%q) = %q, %v; want %q", content, got, err, want)
		}
	}
	if got, err := readPassword(""); got != "" || err != nil {
		t.Errorf("no file: %q %v", got, err)
	}
}

func TestStartupErrorMessages(t *testing.T) {
	cfg := &config.RedisStore{Address: "10.0.0.1:6379"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Net: "tcp", Err: &timeoutErr{}})
	for _, tc := range []struct {
		cfg  *config.RedisStore
		err  error
		want string
	}{
		{cfg, refused, "store.redis: cannot reach 10.0.0.1:6379: connection refused"},
		{cfg, timeout, "store.redis: cannot reach 10.0.0.1:6379: i/o timeout"},
		{&config.RedisStore{Addresses: []string{"a:1", "b:2"}}, errors.New("boom"), "store.redis: cannot reach a:1,b:2: boom"},
		{&config.RedisStore{Address: "a:1", Username: "x"}, proto("WRONGPASS invalid username-password pair"), `store.redis: authentication failed for user "x": WRONGPASS invalid username-password pair`},
		{&config.RedisStore{Address: "a:1"}, proto("NOPERM this user has no permissions to run the 'ping' command"), `store.redis: user "default" lacks a permission the store needs (see the README's ACL): NOPERM this user has no permissions to run the 'ping' command`},
	} {
		got := startupError(tc.cfg, tc.err)
		if got.Error() != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s does not wrap the cause", got)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// proto builds a Redis error reply as go-redis returns it.
type proto string

func (p proto) Error() string { return string(p) }
func (proto) RedisError()     {}
