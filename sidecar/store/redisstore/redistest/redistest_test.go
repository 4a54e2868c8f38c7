package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t, "--requirepass", "pw")
	if _, err := s.Do("PING"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without auth: %v", err)
	}
	port := s.Port
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("answers after Kill")
	}
	s.Kill() // idempotent
	s.Restart()
	if s.Port != port {
		t.Fatalf("port changed %d → %d", port, s.Port)
	}
	if _, err := s.Do("PING"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING after Restart: %v (arguments lost?)", err)
	}
}

func TestDoReplies(t *testing.T) {
	s := Start(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, ""},
		{[]string{"HSET", "h", "a", "1", "b", ""}, "2"},
		{[]string{"HGETALL", "h"}, "a\n1\nb\n"},
	} {
		if got, err := s.Do(tc.args...); err != nil || got != tc.want {
			t.Errorf("%v = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil {
		t.Error("error reply not returned as an error")
	}
}

// fakeTB records Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingBinaryFailsWithMakeTarget(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f)
	}()
	<-done
	if want := "redis-server not found: run `make deps-redis`"; f.msg != want {
		t.Fatalf("message %q, want %q", f.msg, want)
	}
}
