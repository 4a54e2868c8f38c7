package redisstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
)

// aclRules is the least-privilege ACL the README documents: the key
// prefix and the commands the store sends, nothing else. Cluster also
// needs CLUSTER SLOTS to learn the topology.
var aclRules = []string{"on", ">pw", "resetkeys", "~tether:*", "-@all", "+ping",
	"+multi", "+exec", "+hmget", "+pexpire", "+pttl", "+evalsha", "+eval",
	"+hset", "+del"} // run inside the scripts

func TestLeastPrivilegeACL(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *redistest.Server
		extra []string
		cfg   func(*redistest.Server) *config.RedisStore
	}{
		{"single", func(t testing.TB) *redistest.Server { return redistest.Start(t) }, nil, cfgFor},
		{"cluster", redistest.StartCluster, []string{"+cluster|slots"}, func(s *redistest.Server) *config.RedisStore {
			c := cfgFor(s)
			c.Address, c.Addresses = "", []string{s.Addr}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			args := append([]string{"ACL", "SETUSER", "tether"}, aclRules...)
			if _, err := srv.Do(append(args, tc.extra...)...); err != nil {
				t.Fatal(err)
			}
			cfg := tc.cfg(srv)
			cfg.Username, cfg.PasswordFile = "tether", pw
			e := newEnv(t, srv, cfg, Options{BreakerThreshold: 1000})
			if _, err := e.s.Create(ctx, "k", binding("p", "", 0), time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := e.s.Lookup(ctx, "k", time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if _, _, err := e.s.Peek(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if ok, err := e.s.CompareAndDelete(ctx, "k", binding("p", "", 0)); !ok || err != nil {
				t.Fatal(ok, err)
			}
		})
	}
}
