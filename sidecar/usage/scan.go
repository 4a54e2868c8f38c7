// Package usage reads the token usage an OpenAI-compatible model server
// reports (usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens)
// from the response bytes as the proxy forwards them: the JSON body of a
// completion, or the usage chunk of a server-sent event stream. It is how
// the sidecar measures each session's prefix-cache reuse on the backend it
// chose.
//
// The scanner never holds the response: it looks at each byte at most
// once, through a small JSON state machine (skipping the bodies of strings
// and what lies below the top level by searches), and keeps only the bytes
// of a top-level "usage" object (at most maxUsageBytes), so its memory is
// bounded whatever the backend sends, and malformed input only means no
// usage is found.
package usage

import (
	"bytes"
	"encoding/json"
)

// maxUsageBytes bounds the "usage" object kept for parsing. vLLM's and
// SGLang's are under 300 bytes; a larger one is not a usage report we
// understand and is ignored.
const maxUsageBytes = 2048

// maxKeyBytes bounds the top-level key being read; only "usage" matters.
const maxKeyBytes = 8

// Usage is what a response reported. Cached is meaningful only when
// HasCached: servers report cached tokens only when asked to (vLLM
// --enable-prompt-tokens-details, SGLang --enable-cache-report).
type Usage struct {
	PromptTokens int64
	CachedTokens int64
	HasCached    bool
}

// Scanner finds the last top-level "usage" object in a JSON document, or in
// the data lines of an SSE stream (each line one document). The zero
// Scanner scans a plain JSON body; Reset chooses the mode.
type Scanner struct {
	stream bool

	// SSE line state.
	lineStart bool // at the first byte of a line
	prefix    int  // bytes of "data:" matched at the start of this line
	inData    bool // this line is a data line: its bytes are JSON

	// JSON state.
	depth     int
	object    bool // the document is an object (its top-level strings alternate key, value)
	inString  bool
	escaped   bool
	isKey     bool // the string being read is a key of the top-level object
	expectKey bool // at depth 1, the next string is a key
	key       [maxKeyBytes]byte
	keyLen    int  // -1: longer than maxKeyBytes or escaped, not "usage"
	wantValue bool // the last top-level key was "usage"; its value comes next
	capturing bool
	capDepth  int
	buf       []byte
	// inline backs buf, so that capturing a usage object (vLLM's and
	// SGLang's are under 300 bytes) allocates nothing.
	inline [384]byte

	found bool
	last  Usage
}

// Reset prepares the scanner for a new response; stream says whether it
// is an SSE stream (Content-Type text/event-stream).
func (s *Scanner) Reset(stream bool) {
	buf := s.buf[:0]
	*s = Scanner{stream: stream, lineStart: true}
	if cap(buf) > len(s.inline) {
		s.buf = buf // grown past inline once: keep it
	} else {
		s.buf = s.inline[:0]
	}
}

// Usage returns the last usage object the response carried that held
// prompt_tokens.
func (s *Scanner) Usage() (Usage, bool) { return s.last, s.found }

var dataPrefix = []byte("data:")

// Write scans p. It never fails and never keeps p.
func (s *Scanner) Write(p []byte) {
	if !s.stream {
		s.scanJSON(p)
		return
	}
	for len(p) > 0 {
		if s.inData {
			// A JSON string cannot hold a raw newline, so a data line ends
			// at the first one.
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.scanJSON(p)
				return
			}
			s.scanJSON(p[:i])
			s.endLine()
			p = p[i+1:]
			continue
		}
		c := p[0]
		p = p[1:]
		switch {
		case c == '\n':
			s.endLine()
		case s.lineStart || s.prefix > 0:
			if s.prefix < len(dataPrefix) && c == dataPrefix[s.prefix] {
				s.prefix++
				s.lineStart = false
				if s.prefix == len(dataPrefix) {
					s.inData = true
					s.resetJSON()
				}
				continue
			}
			s.prefix, s.lineStart = 0, false
		}
	}
}

func (s *Scanner) endLine() {
	s.inData, s.prefix, s.lineStart = false, 0, true
}

func (s *Scanner) resetJSON() {
	s.depth, s.object, s.inString, s.escaped, s.isKey, s.expectKey = 0, false, false, false, false, false
	s.wantValue, s.capturing, s.keyLen = false, false, 0
	s.buf = s.buf[:0]
}

// scanJSON advances the JSON state machine over p. It tracks only what
// finding a top-level "usage" object needs: nesting depth, strings (so
// brackets inside them do not count), and which strings are top-level keys.
// Most of a response is skipped by searches rather than walked byte by
// byte: a string value's body, and anything nested below the top-level
// object outside strings (where only quotes and brackets count). A usage
// object is kept as slices of p, not byte by byte.
func (s *Scanner) scanJSON(p []byte) {
	from := 0 // where the usage object's bytes not yet kept begin in p
	for i := 0; i < len(p); i++ {
		if s.inString {
			if !s.escaped && (!s.isKey || s.keyLen < 0) {
				// A string value's body (most of a completion's bytes),
				// or a key too long to be "usage": jump to its next quote
				// or backslash.
				j := quoteOrBackslash(p[i:])
				if j < 0 {
					break
				}
				i += j
			}
			c := p[i]
			switch {
			case s.escaped:
				s.escaped = false
				s.keyLen = -1 // an escaped key is never the plain "usage"
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
				if s.isKey {
					s.isKey = false
					s.wantValue = s.keyLen == len("usage") && string(s.key[:s.keyLen]) == "usage"
				}
			case s.isKey && s.keyLen >= 0:
				if s.keyLen < maxKeyBytes {
					s.key[s.keyLen] = c
					s.keyLen++
				} else {
					s.keyLen = -1
				}
			}
			continue
		}
		if s.depth > 1 {
			// Below the top-level object, outside strings, only quotes
			// and brackets change the state.
			for i < len(p) && !structural[p[i]] {
				i++
			}
			if i == len(p) {
				break
			}
		}
		c := p[i]
		switch c {
		case '"':
			s.inString = true
			if s.depth == 1 && s.expectKey {
				s.isKey, s.expectKey, s.keyLen = true, false, 0
			} else if s.depth == 1 {
				s.wantValue = false // a string value
			}
		case '{', '[':
			if s.depth == 1 && s.wantValue && c == '{' && !s.capturing {
				s.capturing, s.capDepth = true, s.depth
				s.buf, from = s.buf[:0], i
			}
			s.depth++
			if s.depth == 1 {
				s.object = c == '{'
				s.expectKey = s.object
			}
		case '}', ']':
			s.depth--
			if s.capturing && s.depth == s.capDepth {
				s.capturing = false
				if s.keep(p[from : i+1]) {
					s.parse()
				}
			}
			if s.depth == 1 {
				s.wantValue = false
			}
		case ',':
			if s.depth == 1 {
				s.expectKey, s.wantValue = s.object, false
			}
		case ':', ' ', '\t', '\r', '\n':
		default:
			// A scalar value: a top-level "usage" that is not an object
			// is not a report.
			if s.depth == 1 {
				s.wantValue = false
			}
		}
	}
	if s.capturing && !s.keep(p[from:]) {
		s.capturing = false
	}
}

// structural marks the bytes that change the state below the top level,
// outside strings.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// keep adds b to the usage object being read, or gives up on an object
// larger than maxUsageBytes (false).
func (s *Scanner) keep(b []byte) bool {
	if len(s.buf)+len(b) > maxUsageBytes {
		s.buf = s.buf[:0]
		return false
	}
	s.buf = append(s.buf, b...)
	return true
}

// report is the part of a usage object tether reads. Pointers tell an
// absent field from a zero. The Responses API names the same counts
// input_tokens and input_tokens_details.
type report struct {
	PromptTokens        *int64   `json:"prompt_tokens"`
	PromptTokensDetails *details `json:"prompt_tokens_details"`
	InputTokens         *int64   `json:"input_tokens"`
	InputTokensDetails  *details `json:"input_tokens_details"`
}

type details struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

func (s *Scanner) parse() {
	c, ok := fastCounts(s.buf)
	if !ok {
		c, ok = jsonCounts(s.buf)
	}
	s.buf = s.buf[:0]
	if !ok {
		return
	}
	prompt, details := c.prompt, c.promptDetails
	if !prompt.set {
		prompt, details = c.input, c.inputDetails
	}
	if !prompt.set || prompt.v < 0 {
		return
	}
	u := Usage{PromptTokens: prompt.v}
	if details.set && details.cached.set && details.cached.v >= 0 {
		u.CachedTokens, u.HasCached = min(details.cached.v, u.PromptTokens), true
	}
	s.last, s.found = u, true
}

// jsonCounts reads a usage object with encoding/json; ok false when it
// is not JSON or a field tether reads has another type.
func jsonCounts(b []byte) (counts, bool) {
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return counts{}, false
	}
	of := func(v *int64) count {
		if v == nil {
			return count{}
		}
		return count{set: true, v: *v}
	}
	detailsOf := func(d *details) detailsCounts {
		if d == nil {
			return detailsCounts{}
		}
		return detailsCounts{set: true, cached: of(d.CachedTokens)}
	}
	return counts{
		prompt: of(r.PromptTokens), input: of(r.InputTokens),
		promptDetails: detailsOf(r.PromptTokensDetails), inputDetails: detailsOf(r.InputTokensDetails),
	}, true
}

// quoteOrBackslash is the index of the first '"' or '\\' in p, or -1.
// Most strings of a response are short (keys, ids, roles, finish
// reasons): a plain loop over the first bytes finds their end before
// a vectorised search has started. Past those, two vectorised byte
// searches, where bytes.IndexAny builds a set on every call (1% of a
// streamed event's CPU).
func quoteOrBackslash(p []byte) int {
	const short = 16
	for i, c := range p[:min(len(p), short)] {
		if c == '"' || c == '\\' {
			return i
		}
	}
	if len(p) <= short {
		return -1
	}
	rest := p[short:]
	q := bytes.IndexByte(rest, '"')
	head := rest
	if q >= 0 {
		head = rest[:q]
	}
	if b := bytes.IndexByte(head, '\\'); b >= 0 {
		return short + b
	}
	if q < 0 {
		return -1
	}
	return short + q
}
