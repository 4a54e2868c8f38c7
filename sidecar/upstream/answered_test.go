package upstream

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// A round trip whose first wait ran out with the backend's answer
// already in the socket (its goroutine run only after the deadline, as
// in a sidecar behind on its own queue) reads the answer as it is,
// registering nothing for its context's cancelation; one whose answer
// has not begun registers and waits for it.
func TestAnAnswerThereWhenTheFirstWaitEndsIsReadWithoutRegistering(t *testing.T) {
	for _, queued := range []bool{true, false} {
		nc, backend := testkit.LoopbackPair(t)
		tr := newTransport(Options{})
		c := newConn(tr, backend.LocalAddr().String(), nc)
		defer c.discard()

		const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		if queued {
			io.WriteString(backend, answer)
			testkit.Eventually(t, 5*time.Second, "the answer in the socket", c.answered)
		} else {
			go func() {
				time.Sleep(20 * time.Millisecond)
				io.WriteString(backend, answer)
			}()
		}
		req, _ := http.NewRequest("GET", "http://"+backend.LocalAddr().String()+"/", nil)
		w := watch{ctx: context.Background(), c: c, stop: unwatched}
		resp, err := c.awaitResponse(req, hooks{}, &w, time.Now().Add(5*time.Second), true)
		if err != nil {
			t.Fatalf("queued %v: %v", queued, err)
		}
		if resp.StatusCode != 200 || resp.ContentLength != 2 {
			t.Fatalf("queued %v: status %d, length %d", queued, resp.StatusCode, resp.ContentLength)
		}
		if registered := w.c == nil; registered == queued {
			t.Errorf("answer queued %v: registered for the context's cancelation %v, want %v", queued, registered, !queued)
		}
		w.stop()
	}
}
