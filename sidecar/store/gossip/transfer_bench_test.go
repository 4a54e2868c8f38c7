package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store/storebench"
	"github.com/tetherproxy/tether/sidecar/threads"
)

var transferBindings = flag.Int("transfer-bindings", 100_000, "BenchmarkStateTransfer: bindings the ring's one member holds")

// The environment of BenchmarkStateTransfer's joiner process (TestMain
// runs joinAndReport instead of the tests when joinAddrEnv is set).
const (
	joinAddrEnv     = "TETHER_BENCH_JOIN_ADDR"
	joinKeyEnv      = "TETHER_BENCH_JOIN_KEY"
	joinBindingsEnv = "TETHER_BENCH_JOIN_BINDINGS"
)

// BenchmarkStateTransfer: a replica joins a ring whose one member holds
// -transfer-bindings bindings, as a new router replica of a rollout does,
// with production timers and an encrypted ring. The joiner is a process of
// its own, so each side's CPU is its own: s/join is the time until it is
// synced and holds them all (its /readyz would turn ready), giver-cpu-s
// and joiner-cpu-s what each spent meanwhile, per chunk size of the giver
// (Options.ChunkBytes; chunks paced at the default ChunkRate).
func BenchmarkStateTransfer(b *testing.B) {
	n := *transferBindings
	keyFile := filepath.Join(b.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, chunk := range []int{32 << 10, 128 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			holder, err := transferNode("holder", "", keyFile, n, chunk)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = holder.Close() })
			if err := storebench.Fill(holder, 0, n, time.Hour); err != nil {
				b.Fatal(err)
			}
			for !holder.Synced() { // its startup grace: nobody pulls from a member before
				time.Sleep(10 * time.Millisecond)
			}
			var took, giver, joiner time.Duration
			for b.Loop() {
				c0, start := threads.ProcessCPU(), time.Now()
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), joinAddrEnv+"="+holder.selfAddr, joinKeyEnv+"="+keyFile, joinBindingsEnv+"="+strconv.Itoa(n))
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("joiner: %v\n%s", err, out)
				}
				took += time.Since(start)
				giver += threads.ProcessCPU() - c0
				var ns int64
				if _, err := fmt.Sscanf(string(out), "joiner cpu ns %d", &ns); err != nil {
					b.Fatalf("joiner's report %q: %v", out, err)
				}
				joiner += time.Duration(ns)
			}
			per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(per(took), "s/join")
			b.ReportMetric(per(giver), "giver-cpu-s/join")
			b.ReportMetric(per(joiner), "joiner-cpu-s/join")
		})
	}
}

// transferNode starts a store with production timers on an encrypted
// ring, joining join unless it is empty.
func transferNode(name, join, keyFile string, n, chunk int) (*Store, error) {
	cfg := &config.GossipStore{Bind: "127.0.0.1:0", Discovery: config.PeersStatic, MaxEntries: 2 * n, SecretKeyFile: keyFile}
	if join != "" {
		cfg.Join = []string{join}
	}
	return New(context.Background(), cfg, Options{NodeName: name, ChunkBytes: chunk})
}

// joinAndReport is the joiner process: it joins the ring at addr, waits
// until it is synced and holds every binding, and prints its CPU time.
func joinAndReport(addr string) int {
	n, err := strconv.Atoi(os.Getenv(joinBindingsEnv))
	if err != nil {
		fmt.Println("bindings:", err)
		return 1
	}
	s, err := transferNode("joiner", addr, os.Getenv(joinKeyEnv), n, 0)
	if err != nil {
		fmt.Println("join:", err)
		return 1
	}
	defer s.Close()
	for deadline := time.Now().Add(5 * time.Minute); !(s.Synced() && s.Len() >= n); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Printf("holds %d of %d bindings after 5 minutes (synced %v)\n", s.Len(), n, s.Synced())
			return 1
		}
	}
	fmt.Printf("joiner cpu ns %d\n", threads.ProcessCPU().Nanoseconds())
	return 0
}
