package responses

import (
	"io"
	"mime"

	"github.com/tetherproxy/tether/sidecar/jsonscan"
)

// MaxEvents is how many server-sent events a stream may open with before
// its response.created: the event is the first one vLLM and OpenAI send,
// so a stream without it in the first MaxEvents is not watched further.
const MaxEvents = 16

var (
	jsonPaths = jsonscan.MustCompile("id", "object")        // a response object
	ssePaths  = jsonscan.MustCompile("type", "response.id") // an event that carries one
)

// Watch returns body, read through unchanged, that learns the id of the
// response it carries: the "id" of a JSON response object, or the
// response.id of a stream's response.created event. found is called once,
// from Read, before the bytes that complete the id (or the event) are
// returned, so a client never holds an id that tether has not bound yet;
// it is called with "" when the body ends (EOF, error or Close) without
// one. Memory is bounded (jsonscan's stack and captures, an event name)
// and no byte is held back. Bodies other than JSON or an event stream are
// returned as they are, and found("") is called at once.
func Watch(body io.ReadCloser, contentType string, found func(id string)) io.ReadCloser {
	mt, _, _ := mime.ParseMediaType(contentType)
	w := &watcher{body: body, found: found}
	switch mt {
	case "application/json":
		w.feed = (&jsonWatch{s: jsonPaths.NewScanner(MaxIDBytes)}).feed
	case "text/event-stream":
		w.feed = (&sseWatch{s: ssePaths.NewScanner(MaxIDBytes), atLineStart: true}).feed
	default:
		found("")
		return body
	}
	return w
}

type watcher struct {
	body  io.ReadCloser
	found func(string)
	// feed reads the next bytes and returns the id once it is complete
	// ("" before), and whether to stop watching without one.
	feed func([]byte) (id string, giveUp bool)
	done bool
}

func (w *watcher) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	if !w.done {
		if n > 0 {
			if id, giveUp := w.feed(p[:n]); id != "" {
				w.finish(id)
			} else if giveUp {
				w.finish("")
			}
		}
		if err != nil {
			w.finish("")
		}
	}
	return n, err
}

func (w *watcher) finish(id string) {
	if !w.done {
		w.done = true
		w.found(id)
	}
}

func (w *watcher) Close() error {
	w.finish("")
	return w.body.Close()
}

// jsonWatch reads a JSON answer: a response object has a top-level
// "object": "response" and its "id".
type jsonWatch struct{ s *jsonscan.Scanner }

func (j *jsonWatch) feed(b []byte) (string, bool) {
	j.s.Write(b)
	id, obj := j.s.Value(0), j.s.Value(1)
	if id.Kind == jsonscan.String && !id.TooLong && obj.Kind == jsonscan.String && obj.Str == "response" && validID(id.Str) {
		return id.Str, false
	}
	return "", j.s.Failed() || j.s.Done()
}

// sseWatch reads a server-sent event stream line by line (LF, CRLF or CR
// ends a line; a blank line ends an event), feeding the data lines of
// each event to a JSON scanner and keeping its event name.
type sseWatch struct {
	s           *jsonscan.Scanner
	atLineStart bool
	afterCR     bool // a CR ended the last line: a LF next belongs to it
	inName      bool // reading the field name
	name        [8]byte
	nameLen     int // bytes of the field name; len(name)+1 when longer
	field       byte
	skipSpace   bool   // one space after the colon is not part of the value
	dataLines   int    // data lines of this event so far
	event       []byte // the event field's value, up to maxEventName
	events      int
}

const maxEventName = 64

// Field kinds.
const (
	fieldOther byte = iota
	fieldData
	fieldEvent
)

const created = "response.created"

func (w *sseWatch) feed(b []byte) (string, bool) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if w.afterCR {
			w.afterCR = false
			if c == '\n' {
				continue
			}
		}
		if c == '\n' || c == '\r' {
			w.afterCR = c == '\r'
			if id, giveUp := w.endLine(); id != "" || giveUp {
				return id, giveUp
			}
			continue
		}
		if w.atLineStart {
			w.atLineStart, w.inName, w.nameLen, w.field = false, true, 0, fieldOther
		}
		if w.inName {
			if c == ':' {
				w.beginValue()
				continue
			}
			if w.nameLen < len(w.name) {
				w.name[w.nameLen] = c
			}
			w.nameLen = min(w.nameLen+1, len(w.name)+1)
			continue
		}
		if w.skipSpace {
			w.skipSpace = false
			if c == ' ' {
				continue
			}
		}
		switch w.field {
		case fieldData:
			// Feed the run up to the line's end in one call.
			j := i
			for j < len(b) && b[j] != '\n' && b[j] != '\r' {
				j++
			}
			w.s.Write(b[i:j])
			i = j - 1
		case fieldEvent:
			if len(w.event) < maxEventName {
				w.event = append(w.event, c)
			}
		}
	}
	return "", false
}

// beginValue decides the field whose name was read.
func (w *sseWatch) beginValue() {
	w.inName, w.skipSpace = false, true
	switch string(w.name[:min(w.nameLen, len(w.name))]) {
	case "data":
		if w.nameLen == 4 {
			w.field = fieldData
			if w.dataLines > 0 {
				w.s.Write([]byte{'\n'}) // data lines join with LF: JSON whitespace
			}
			w.dataLines++
		}
	case "event":
		if w.nameLen == 5 {
			w.field, w.event = fieldEvent, w.event[:0]
		}
	}
}

// endLine ends a line; a blank one dispatches the event.
func (w *sseWatch) endLine() (string, bool) {
	if w.inName {
		// A line without a colon is a field with an empty value; only
		// "data" matters, and an empty data line adds nothing but a LF.
		w.beginValue()
	}
	blank := w.atLineStart
	w.atLineStart, w.inName, w.field = true, false, fieldOther
	if !blank {
		return "", false
	}
	if w.dataLines == 0 && len(w.event) == 0 {
		return "", false // blank lines between events
	}
	typ, id := w.s.Value(0), w.s.Value(1)
	isCreated := string(w.event) == created || (typ.Kind == jsonscan.String && typ.Str == created)
	if isCreated && w.s.Done() && id.Kind == jsonscan.String && !id.TooLong && validID(id.Str) {
		return id.Str, false
	}
	w.events++
	w.s.Reset()
	w.event, w.dataLines = w.event[:0], 0
	return "", w.events >= MaxEvents
}
