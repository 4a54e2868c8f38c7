package sim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestAdmissionIsFIFO(t *testing.T) {
	a := &admission{max: 1}
	if err := a.acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	granted := make(chan string, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"first", "second"} {
		wg.Go(func() {
			if a.acquire(t.Context()) == nil {
				granted <- name
			}
		})
		// The next waiter starts only once this one is queued.
		testkit.Eventually(t, 20*time.Second, name+" queued", func() bool { _, w := a.counts(); return w == i+1 })
	}
	a.release()
	if got := <-granted; got != "first" {
		t.Fatalf("granted %s first", got)
	}
	if r, w := a.counts(); r != 1 || w != 1 {
		t.Fatalf("counts %d running %d waiting", r, w)
	}
	a.release()
	if got := <-granted; got != "second" {
		t.Fatalf("granted %s second", got)
	}
	a.release()
	wg.Wait()
	if r, w := a.counts(); r != 0 || w != 0 {
		t.Fatalf("counts %d running %d waiting", r, w)
	}
}

// Waiters that give up while slots are being handed around leave the counts
// exact: none is lost, none is leaked.
func TestAdmissionCancellationKeepsCounts(t *testing.T) {
	a := &admission{max: 3}
	var wg sync.WaitGroup
	for i := range 200 {
		ctx, cancel := context.WithCancel(t.Context())
		wg.Go(func() {
			if i%3 == 0 {
				go cancel()
			}
			if a.acquire(ctx) == nil {
				if r, _ := a.counts(); r > 3 {
					t.Errorf("%d running, max 3", r)
				}
				a.release()
			}
			cancel()
		})
	}
	wg.Wait()
	if r, w := a.counts(); r != 0 || w != 0 {
		t.Fatalf("counts %d running %d waiting", r, w)
	}
}
