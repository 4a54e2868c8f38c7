package responses

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// watchAll reads stream through Watch in reads of at most chunk bytes and
// returns what came out, the ids found, and how many bytes had been
// returned to the reader when found was called.
func watchAll(t testing.TB, ct, stream string, chunk int) (out string, ids []string, deliveredAtFound int) {
	var delivered int
	deliveredAtFound = -1
	var src io.Reader = strings.NewReader(stream)
	if chunk > 0 {
		src = &chunked{r: src, n: chunk}
	}
	w := Watch(io.NopCloser(src), ct, func(id string) {
		ids = append(ids, id)
		deliveredAtFound = delivered
	})
	var buf bytes.Buffer
	p := make([]byte, 4096)
	for {
		n, err := w.Read(p)
		buf.Write(p[:n])
		delivered += n
		if err != nil {
			break
		}
	}
	w.Close()
	return buf.String(), ids, deliveredAtFound
}

type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

const createdEvent = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_abc\",\"object\":\"response\",\"output\":[{\"id\":\"msg_1\"}]}}\n\n"

func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name, ct, stream, want string
	}{
		{"json", "application/json", `{"id":"resp_1","object":"response","output":[{"id":"msg_x"}]}`, "resp_1"},
		{"json object after id", "application/json; charset=utf-8", `{"object":"response","id":"resp_2"}`, "resp_2"},
		{"json not a response", "application/json", `{"id":"chatcmpl-1","object":"chat.completion"}`, ""},
		{"json error", "application/json", `{"error":{"message":"x"}}`, ""},
		{"sse", "text/event-stream", createdEvent + "event: response.completed\ndata: {}\n\n", "resp_abc"},
		{"sse type in data only, type last", "text/event-stream",
			"data: {\"response\":{\"id\":\"resp_3\"},\"type\":\"response.created\"}\n\n", "resp_3"},
		{"sse CRLF, comment, split data", "text/event-stream",
			": keep-alive\r\n\r\nevent:response.created\r\ndata: {\"response\":\r\ndata: {\"id\":\"resp_4\"}}\r\n\r\n", "resp_4"},
		{"sse CR only", "text/event-stream", "event: response.created\rdata: {\"response\":{\"id\":\"resp_5\"}}\r\r", "resp_5"},
		{"sse another event first", "text/event-stream",
			"event: ping\ndata: {\"response\":{\"id\":\"resp_no\"}}\n\n" + createdEvent, "resp_abc"},
		{"sse created without id", "text/event-stream", "event: response.created\ndata: {\"response\":{}}\n\n", ""},
		{"sse unterminated event", "text/event-stream", strings.TrimSuffix(createdEvent, "\n\n"), ""},
		{"sse chat stream", "text/event-stream", "data: {\"id\":\"chatcmpl-1\"}\n\ndata: [DONE]\n\n", ""},
		{"other content type", "text/plain", `{"id":"resp_1","object":"response"}`, ""},
	} {
		for _, chunk := range []int{0, 1, 7} {
			out, ids, _ := watchAll(t, tc.ct, tc.stream, chunk)
			if out != tc.stream {
				t.Fatalf("%s/%d: the body changed: %q", tc.name, chunk, out)
			}
			if len(ids) != 1 || ids[0] != tc.want {
				t.Errorf("%s/%d: found %q, want once %q", tc.name, chunk, ids, tc.want)
			}
		}
	}
}

// The id is bound before the bytes that complete it (JSON) or end its
// event (SSE) are returned to the reader.
func TestWatchFindsBeforeDelivery(t *testing.T) {
	stream := createdEvent + strings.Repeat("event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n", 50)
	_, ids, at := watchAll(t, "text/event-stream", stream, 1)
	if end := len(createdEvent); len(ids) != 1 || at >= end {
		t.Fatalf("found %q with %d bytes delivered; the event ends at byte %d", ids, at, end)
	}
	doc := `{"object":"response","id":"resp_9","output":[]}`
	_, ids, at = watchAll(t, "application/json", doc, 1)
	if end := strings.Index(doc, `resp_9"`) + len(`resp_9"`); len(ids) != 1 || at >= end {
		t.Fatalf("found %q with %d bytes delivered; the id ends at byte %d", ids, at, end)
	}
}

// A stream without response.created among its first MaxEvents events is
// not watched further.
func TestWatchGivesUp(t *testing.T) {
	stream := strings.Repeat("data: {}\n\n", MaxEvents) + createdEvent
	out, ids, at := watchAll(t, "text/event-stream", stream, 0)
	if out != stream || len(ids) != 1 || ids[0] != "" || at > len(stream)-len(createdEvent) {
		t.Fatalf("found %q at %d", ids, at)
	}
}

// An answer cut short reports no id, once, at its error.
func TestWatchError(t *testing.T) {
	var ids []string
	w := Watch(io.NopCloser(iotest.ErrReader(io.ErrUnexpectedEOF)), "application/json", func(id string) { ids = append(ids, id) })
	io.ReadAll(w)
	w.Close()
	if len(ids) != 1 || ids[0] != "" {
		t.Fatalf("found %q", ids)
	}
}

// FuzzWatch: whatever a backend sends, the body passes unchanged, found
// is called exactly once with "" or a valid id, and the result does not
// depend on how the body was split into reads.
func FuzzWatch(f *testing.F) {
	f.Add([]byte(createdEvent), true, 3)
	f.Add([]byte("event: response.created\r\ndata: {\"response\":{\"id\":\"r\\u0065sp\"}}\r\n\r\n"), true, 1)
	f.Add([]byte(`{"id":"resp_1","object":"response"}`), false, 5)
	f.Add([]byte("data:\ndata\n\n:x\r\r"), true, 2)
	f.Fuzz(func(t *testing.T, stream []byte, sse bool, chunk int) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		chunk = chunk%64 + 1
		if chunk < 1 {
			chunk += 64
		}
		outWhole, idsWhole, _ := watchAll(t, ct, string(stream), 0)
		outPieces, idsPieces, _ := watchAll(t, ct, string(stream), chunk)
		if outWhole != string(stream) || outPieces != string(stream) {
			t.Fatal("the body changed")
		}
		if len(idsWhole) != 1 || len(idsPieces) != 1 {
			t.Fatalf("found called %d and %d times", len(idsWhole), len(idsPieces))
		}
		if idsWhole[0] != idsPieces[0] {
			t.Fatalf("whole %q, in reads of %d: %q", idsWhole[0], chunk, idsPieces[0])
		}
		if id := idsWhole[0]; id != "" && !validID(id) {
			t.Fatalf("invalid id %q", id)
		}
	})
}
