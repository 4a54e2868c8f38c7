package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzResponse feeds a backend's raw answer to a round trip: whatever it
// is, the round trip ends (the backend then closes), nothing panics, a
// body read without error has its declared length, and a connection goes
// back to the pool only with nothing left unread on it.
//
//	go test -run '^$' -fuzz FuzzResponse ./sidecar/upstream/
func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nraw",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok",
		"garbage\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		tr := New(Options{MaxHeaderBytes: 4 << 10, Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go func() {
				defer server.Close()
				server.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
					return
				}
				io.WriteString(server, answer)
			}()
			return client, nil
		}})
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("POST", "http://backend:8000/v1/x", strings.NewReader("{}"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body.Close()
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.ContentLength >= 0 && int64(len(body)) != resp.ContentLength {
			t.Fatalf("read %d bytes of a body of %d", len(body), resp.ContentLength)
		}
		// A pooled connection has given its buffers back, and with them
		// nothing unread (body.end pools only a connection whose reader
		// holds nothing after the response).
		if c := tr.popIdle("backend:8000"); c != nil && c.br != nil {
			t.Fatalf("a pooled connection holds its reader (%d unread bytes)", c.br.Buffered())
		}
	})
}
