package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
)

// unsyncedStore is a store that has not received its ring's state.
type unsyncedStore struct{ store.Store }

func (unsyncedStore) Synced() bool { return false }

// Readiness waits for a gossip ring's state unless
// store.gossip.requireAtStartup is false.
func TestGossipRequireAtStartup(t *testing.T) {
	for _, c := range []struct {
		require string
		ready   bool
	}{{"", false}, {"requireAtStartup: true,", false}, {"requireAtStartup: false,", true}} {
		cfg, err := config.Parse([]byte(`
store: {backend: gossip, gossip: {` + c.require + ` insecure: true}}
pools: [{name: p, sessionSticky: {sources: [{type: Header, name: X}]}, backends: {static: ["127.0.0.1:1"]}}]
`))
		if err != nil {
			t.Fatal(err)
		}
		mem, _ := memory.New(context.Background(), &config.MemoryStore{MaxEntries: 10}, memory.Options{SweepInterval: time.Hour})
		s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), Deps{Store: unsyncedStore{mem}})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.synced(); got != c.ready {
			t.Errorf("gossip {%s}: ready %v while the ring's state has not arrived, want %v", c.require, got, c.ready)
		}
		s.close()
	}
}
