package jsonscan

import (
	"encoding/json"
	"unicode/utf8"
)

// Kind is the JSON type of a value.
type Kind uint8

// Kinds. Absent is the zero value: the path is not in the document.
const (
	Absent Kind = iota
	String
	Number
	True
	False
	Null
	Object
	Array
)

// Value is what a document holds at a path.
type Value struct {
	Kind Kind
	// Str is a String value, unescaped as encoding/json does (invalid
	// UTF-8 becomes U+FFFD); empty when TooLong.
	Str string
	// TooLong marks a String over the scanner's limit, which is not kept.
	TooLong bool
}

// MaxDepth is the deepest nesting accepted, as in encoding/json.
const MaxDepth = 10000

type state uint8

const (
	stValue      state = iota // a value is expected
	stKeyOrEnd                // after '{'
	stKey                     // after ',' in an object
	stColon                   // after a key
	stAfter                   // after a value
	stValueOrEnd              // after '['
	stString                  // inside a string
	stEscape                  // after '\' in a string
	stUnicode                 // in the 4 hex digits of \u
	stMinus                   // after a number's '-'
	stZero                    // after a number's leading 0
	stInt                     // in the integer digits
	stDot                     // after the '.'
	stFrac                    // in the fraction digits
	stE                       // after 'e' or 'E'
	stESign                   // after the exponent's sign
	stExp                     // in the exponent digits
	stLiteral                 // in true, false or null
	stEnd                     // after the top-level value
	stError
)

// frame is an open container. node is the Paths node of an object on
// some path, -1 for every other container.
type frame struct {
	object bool
	node   int32
}

// Scanner reads one document, given in pieces to Write. It is not safe
// for concurrent use; Reset readies it for another document.
type Scanner struct {
	p     *Paths
	limit int
	vals  []Value

	st    state
	stack []frame
	// pending is the node of the value about to start (a key on some
	// path was just read, or the top level): -1 when off every path.
	pending int32
	// object reports whether the top-level value is an object.
	object bool

	// The string being read: a key to match, a value to keep, or neither.
	strIsKey bool   // the string is an object key
	strKey   bool   // the string is a key of an on-path object
	strLeaf  int32  // the path index a value string is kept for, or -1
	strCap   bool   // bytes are being captured into buf
	strOver  bool   // the capture passed its bound
	strPlain bool   // no escapes and only ASCII so far
	buf      []byte // the captured raw string, quotes included
	hex      int    // \u digits still to read
	lit      string // the rest of the literal being read
	litKind  Kind
	numLeaf  int32 // the path index a number is recorded for, or -1
	keyChild int32 // the child node the last key named, or -1
}

// NewScanner returns a Scanner of p's paths that keeps String values of
// at most limit bytes (longer ones are reported TooLong).
func (p *Paths) NewScanner(limit int) *Scanner {
	s := &Scanner{p: p, limit: limit, vals: make([]Value, len(p.paths))}
	s.Reset()
	return s
}

// Reset forgets the document read so far.
func (s *Scanner) Reset() {
	clear(s.vals)
	s.st, s.stack, s.pending, s.object = stValue, s.stack[:0], 0, false
	s.strCap, s.buf, s.numLeaf = false, s.buf[:0], -1
}

// Value returns the value at path index i as read so far: a String is
// there once its closing quote was read, an Object or Array once it opened.
func (s *Scanner) Value(i int) Value { return s.vals[i] }

// Done reports whether a complete, valid document was read. Trailing
// whitespace may follow; anything else makes it invalid.
func (s *Scanner) Done() bool {
	switch s.st {
	case stEnd:
		return true
	case stZero, stInt, stFrac, stExp: // a top-level number ends at EOF
		return len(s.stack) == 0
	}
	return false
}

// Failed reports whether the input so far is not JSON.
func (s *Scanner) Failed() bool { return s.st == stError }

// IsObject reports whether the document read is a complete, valid JSON object.
func (s *Scanner) IsObject() bool { return s.object && s.Done() }

// Scan reads a whole document into a new Scanner.
func (p *Paths) Scan(doc []byte, limit int) *Scanner {
	s := p.NewScanner(limit)
	s.Write(doc)
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Write reads the next piece of the document. Input after an error or
// after the end of the document (other than whitespace) is not JSON.
func (s *Scanner) Write(b []byte) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch s.st {
		case stString:
			// The bulk of a document is string content: skip it in a
			// tight loop unless it is being captured.
			j := i
			for j < len(b) && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 {
				j++
			}
			if s.strCap {
				s.capture(b[i:j])
				if s.strPlain {
					for _, x := range b[i:j] {
						if x >= utf8.RuneSelf {
							s.strPlain = false
							break
						}
					}
				}
			}
			if j == len(b) {
				return
			}
			i, c = j, b[j]
			switch {
			case c == '"':
				s.capture(b[i : i+1])
				s.endString()
			case c == '\\':
				s.capture(b[i : i+1])
				s.strPlain = false
				s.st = stEscape
			default:
				s.st = stError // a control character
			}
		case stEscape:
			s.capture(b[i : i+1])
			switch c {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.st = stString
			case 'u':
				s.st, s.hex = stUnicode, 4
			default:
				s.st = stError
			}
		case stUnicode:
			if !isHex(c) {
				s.st = stError
				break
			}
			s.capture(b[i : i+1])
			if s.hex--; s.hex == 0 {
				s.st = stString
			}
		case stValue:
			if !isSpace(c) {
				s.beginValue(c, b[i:i+1])
			}
		case stValueOrEnd:
			switch {
			case isSpace(c):
			case c == ']':
				s.endContainer()
			default:
				s.beginValue(c, b[i:i+1])
			}
		case stKeyOrEnd, stKey:
			switch {
			case isSpace(c):
			case c == '"':
				s.beginKey()
			case c == '}' && s.st == stKeyOrEnd:
				s.endContainer()
			default:
				s.st = stError
			}
		case stColon:
			switch {
			case isSpace(c):
			case c == ':':
				s.st, s.pending = stValue, s.keyChild
			default:
				s.st = stError
			}
		case stAfter:
			s.after(c)
		case stMinus:
			switch {
			case c == '0':
				s.st = stZero
			case c >= '1' && c <= '9':
				s.st = stInt
			default:
				s.st = stError
			}
		case stZero, stInt:
			switch {
			case c >= '0' && c <= '9' && s.st == stInt:
			case c == '.':
				s.st = stDot
			case c == 'e' || c == 'E':
				s.st = stE
			default:
				s.endNumber(c)
			}
		case stDot:
			if c < '0' || c > '9' {
				s.st = stError
				break
			}
			s.st = stFrac
		case stFrac:
			switch {
			case c >= '0' && c <= '9':
			case c == 'e' || c == 'E':
				s.st = stE
			default:
				s.endNumber(c)
			}
		case stE:
			switch {
			case c == '+' || c == '-':
				s.st = stESign
			case c >= '0' && c <= '9':
				s.st = stExp
			default:
				s.st = stError
			}
		case stESign:
			if c < '0' || c > '9' {
				s.st = stError
				break
			}
			s.st = stExp
		case stExp:
			if c < '0' || c > '9' {
				s.endNumber(c)
			}
		case stLiteral:
			if c != s.lit[0] {
				s.st = stError
				break
			}
			if s.lit = s.lit[1:]; s.lit == "" {
				s.endValue(s.litKind)
			}
		case stEnd:
			if !isSpace(c) {
				s.st = stError
			}
		case stError:
			return
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// leafOf returns the path index of the pending value, or -1, and clears
// every value recorded under its node: a repeated key counts with its
// last occurrence.
func (s *Scanner) leafOf() int32 {
	if s.pending < 0 {
		return -1
	}
	n := &s.p.nodes[s.pending]
	for _, i := range n.under {
		s.vals[i] = Value{}
	}
	return n.leaf
}

// beginValue starts the value whose first byte is c.
func (s *Scanner) beginValue(c byte, first []byte) {
	topLevel := len(s.stack) == 0
	leaf := s.leafOf()
	switch c {
	case '{':
		if topLevel {
			s.object = true
		}
		s.record(leaf, Object)
		s.push(true, s.pending)
		s.st = stKeyOrEnd
	case '[':
		s.record(leaf, Array)
		s.push(false, -1)
		s.st, s.pending = stValueOrEnd, -1 // arrays are not descended into
	case '"':
		s.beginString(false, false, leaf)
		s.capture(first)
	case '-':
		s.numLeaf, s.st = leaf, stMinus
	case '0':
		s.numLeaf, s.st = leaf, stZero
	case 't':
		s.numLeaf, s.lit, s.litKind, s.st = leaf, "rue", True, stLiteral
	case 'f':
		s.numLeaf, s.lit, s.litKind, s.st = leaf, "alse", False, stLiteral
	case 'n':
		s.numLeaf, s.lit, s.litKind, s.st = leaf, "ull", Null, stLiteral
	default:
		if c >= '1' && c <= '9' {
			s.numLeaf, s.st = leaf, stInt
			return
		}
		s.st = stError
	}
}

func (s *Scanner) record(leaf int32, k Kind) {
	if leaf >= 0 {
		s.vals[leaf] = Value{Kind: k}
	}
}

func (s *Scanner) push(object bool, node int32) {
	if len(s.stack) >= MaxDepth {
		s.st = stError
		return
	}
	s.stack = append(s.stack, frame{object: object, node: node})
}

// beginKey starts a key; it is captured when its object is on a path.
func (s *Scanner) beginKey() {
	top := s.stack[len(s.stack)-1]
	s.beginString(true, top.node >= 0, -1)
	if s.strKey {
		s.buf = append(s.buf, '"')
	}
}

func (s *Scanner) beginString(isKey, key bool, leaf int32) {
	s.st, s.strIsKey, s.strKey, s.strLeaf = stString, isKey, key, leaf
	s.strCap = key || leaf >= 0
	s.strOver, s.strPlain, s.buf = false, true, s.buf[:0]
}

// capture appends raw string bytes within the capture's bound: a value
// of limit bytes takes at most 6*limit+2 raw bytes (\u escapes), a key
// that can name a path at most 6*maxName+2.
func (s *Scanner) capture(b []byte) {
	if !s.strCap || s.strOver {
		return
	}
	bound := 6*s.limit + 2
	if s.strKey {
		bound = 6*s.p.maxName + 2
	}
	if len(s.buf)+len(b) > bound {
		s.strOver = true
		return
	}
	s.buf = append(s.buf, b...)
}

func (s *Scanner) endString() {
	if s.strIsKey {
		s.st, s.keyChild = stColon, -1
		if s.strKey && !s.strOver {
			if name, ok := s.unquote(); ok {
				if c, found := s.p.nodes[s.stack[len(s.stack)-1].node].children[name]; found {
					s.keyChild = c
				}
			}
		}
		s.strCap = false
		return
	}
	if s.strLeaf >= 0 {
		v := Value{Kind: String, TooLong: true}
		if !s.strOver {
			if str, ok := s.unquote(); ok && len(str) <= s.limit {
				v = Value{Kind: String, Str: str}
			}
		}
		s.vals[s.strLeaf] = v
	}
	s.strCap = false
	s.endValue(Absent)
}

// unquote decodes the captured string literal exactly as encoding/json.
func (s *Scanner) unquote() (string, bool) {
	if s.strPlain {
		return string(s.buf[1 : len(s.buf)-1]), true
	}
	var str string
	if err := json.Unmarshal(s.buf, &str); err != nil {
		return "", false
	}
	return str, true
}

// endNumber ends a number at c, the first byte after it.
func (s *Scanner) endNumber(c byte) {
	s.endValue(Number)
	if s.st != stError {
		if s.st == stEnd {
			if !isSpace(c) {
				s.st = stError
			}
			return
		}
		s.after(c)
	}
}

// endValue ends a scalar (k is its kind for the pending path; Absent
// when already recorded).
func (s *Scanner) endValue(k Kind) {
	if k != Absent && s.numLeaf >= 0 {
		s.vals[s.numLeaf] = Value{Kind: k}
	}
	s.numLeaf = -1
	if len(s.stack) == 0 {
		s.st = stEnd
		return
	}
	s.st = stAfter
}

func (s *Scanner) endContainer() {
	s.stack = s.stack[:len(s.stack)-1]
	s.endValue(Absent)
}

// after reads the byte after a value inside a container.
func (s *Scanner) after(c byte) {
	if isSpace(c) {
		s.st = stAfter
		return
	}
	top := s.stack[len(s.stack)-1]
	switch {
	case c == ',' && top.object:
		s.st = stKey
	case c == ',':
		s.st, s.pending = stValue, -1
	case c == '}' && top.object, c == ']' && !top.object:
		s.endContainer()
	default:
		s.st = stError
	}
}
