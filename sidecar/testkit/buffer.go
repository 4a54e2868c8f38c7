package testkit

import (
	"bufio"
	"bytes"
	"strings"
	"sync"
)

// maxBuffer bounds a SyncBuffer, so a chatty process cannot eat a test's
// memory: past it, the oldest half is dropped (at a line boundary).
var maxBuffer = 32 << 20

// SyncBuffer is a log sink that tests read while a server, a store or a
// child process writes to it. It is safe for concurrent use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len()+len(p) > maxBuffer {
		keep := b.buf.Bytes()[b.buf.Len()/2:]
		if i := bytes.IndexByte(keep, '\n'); i >= 0 {
			keep = keep[i+1:]
		}
		b.buf = *bytes.NewBuffer(append([]byte(nil), keep...))
	}
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count is how often substr occurs in what was written.
func (b *SyncBuffer) Count(substr string) int { return strings.Count(b.String(), substr) }

// Lines are the complete lines written so far: a trailing line without
// its newline is still being written and is left out.
func (b *SyncBuffer) Lines() []string {
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	var ls []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		ls = append(ls, sc.Text())
	}
	if len(data) > 0 && data[len(data)-1] != '\n' && len(ls) > 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}
