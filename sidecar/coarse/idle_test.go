package coarse

import (
	"net"
	"slices"
	"testing"
	"time"
)

// The deadline is set on the first use, left while at least D is ahead,
// moved to 3/2 D ahead once less is, and set afresh after Forget; a
// zero D sets none.
func TestIdleDeadline(t *testing.T) {
	const d = 10 * time.Second
	base := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	i := IdleDeadline{D: d}
	steps := []struct {
		at     time.Duration // after base
		forget bool          // Forget before this use
		set    bool
		want   time.Duration // the deadline after base, when set
	}{
		{at: 0, set: true, want: 15 * time.Second},
		{at: time.Second, set: false},
		{at: 5 * time.Second, set: false}, // exactly D left
		{at: 5*time.Second + 1, set: true, want: 20*time.Second + 1},
		{at: 6 * time.Second, set: false},
		{at: 7 * time.Second, forget: true, set: true, want: 22 * time.Second},
		{at: time.Hour, set: true, want: time.Hour + 15*time.Second}, // long past it
	}
	for _, s := range steps {
		if s.forget {
			i.Forget()
		}
		got, set := i.Next(base.Add(s.at))
		if set != s.set || set && !got.Equal(base.Add(s.want)) {
			t.Fatalf("Next(base+%v) = base+%v, %v; want base+%v, %v", s.at, got.Sub(base), set, s.want, s.set)
		}
	}
	off := IdleDeadline{}
	if _, set := off.Next(base); set {
		t.Fatal("a zero D set a deadline")
	}
}

// recordingConn records the writes and write deadlines it is given.
type recordingConn struct {
	net.Conn
	writes    []int
	deadlines int
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, len(p))
	return len(p), nil
}

func (c *recordingConn) SetWriteDeadline(time.Time) error {
	c.deadlines++
	return nil
}

// Write passes a large write in steps of WriteStep, each with the bound
// ahead of it (here one deadline serves all: no time passes); without a
// bound it writes at once and sets no deadline.
func TestIdleDeadlineWritesInSteps(t *testing.T) {
	p := make([]byte, 3*WriteStep+100)
	c := &recordingConn{}
	d := IdleDeadline{D: time.Minute}
	if n, err := d.Write(c, p); n != len(p) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if want := []int{WriteStep, WriteStep, WriteStep, 100}; !slices.Equal(c.writes, want) || c.deadlines != 1 {
		t.Errorf("writes %v with %d deadlines set, want %v with 1", c.writes, c.deadlines, want)
	}
	c = &recordingConn{}
	off := IdleDeadline{}
	off.Write(c, p)
	if len(c.writes) != 1 || c.deadlines != 0 {
		t.Errorf("without a bound: writes %v with %d deadlines set, want one write and none", c.writes, c.deadlines)
	}
}
