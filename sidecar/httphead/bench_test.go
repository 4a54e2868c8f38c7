package httphead

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// The heads of bench hop's traffic: the load generator's request and a
// modelsim answer.
const (
	benchRequest  = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:40123\r\nContent-Type: application/json\r\nX-Session-ID: 7f3a9c2e-0001\r\nContent-Length: 96\r\n\r\n"
	benchResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Modelsim-Id: sim-1\r\nDate: Thu, 03 Dec 2026 21:40:00 GMT\r\nContent-Length: 312\r\n\r\n"
)

// BenchmarkRequest: httphead against http.ReadRequest on the same head.
//
//	go test -run '^$' -bench . -benchmem ./sidecar/httphead/
func BenchmarkRequest(b *testing.B) {
	raw := []byte(benchRequest)
	b.Run("httphead", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := Request(raw); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("httphead-reused", func(b *testing.B) { // a connection's, as the sidecar parses
		b.ReportAllocs()
		var p Requests
		for b.Loop() {
			if _, _, ok := p.Request(raw); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("net/http", func(b *testing.B) {
		netHTTP(b, raw, func(br *bufio.Reader) error {
			_, err := http.ReadRequest(br)
			return err
		})
	})
}

func BenchmarkResponse(b *testing.B) {
	raw := []byte(benchResponse)
	req, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", nil)
	b.Run("httphead", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := Response(raw, req); !ok {
				b.Fatal("declined")
			}
		}
	})
	for _, listed := range []bool{false, true} {
		name := "httphead-reused"
		if listed {
			name = "httphead-listed" // as the sidecar parses its backends' answers
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			p := Responses{Listed: listed}
			for b.Loop() {
				if _, _, ok := p.Response(raw, req); !ok {
					b.Fatal("declined")
				}
			}
		})
	}
	b.Run("net/http", func(b *testing.B) {
		netHTTP(b, raw, func(br *bufio.Reader) error {
			_, err := http.ReadResponse(br, req)
			return err
		})
	})
}

// netHTTP measures read (net/http's reader) on raw, from a reader reset
// for each message as a connection's would be.
func netHTTP(b *testing.B, raw []byte, read func(*bufio.Reader) error) {
	b.ReportAllocs()
	src := bytes.NewReader(raw)
	br := bufio.NewReader(src)
	for b.Loop() {
		src.Reset(raw)
		br.Reset(src)
		if err := read(br); err != nil {
			b.Fatal(err)
		}
	}
}
