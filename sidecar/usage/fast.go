package usage

// A usage object as servers write it — lower-case keys without escapes,
// integer counts, a flat details object — is read here without
// encoding/json, whose reflection was 4% of the sidecar's CPU on a
// stream of small completions (README "The hop's cost"). Anything else
// (a key that differs from a known one only in case, escapes, duplicate
// counts, fractions, arrays, deep nesting) makes fastCounts give up, and
// encoding/json decides: the two agree on every input fastCounts accepts
// (FuzzFastCounts).

// count is an integer field: set when the object held a number for it.
type count struct {
	set bool
	v   int64
}

// detailsCounts is a *_tokens_details object: set when present and not null.
type detailsCounts struct {
	set    bool
	cached count
}

// counts are the fields of a usage object tether reads (report's).
type counts struct {
	prompt, input               count
	promptDetails, inputDetails detailsCounts
}

// maxFastDepth bounds the nesting fastCounts walks through in fields it
// skips; deeper goes to encoding/json.
const maxFastDepth = 8

// fastParser walks b from i.
type fastParser struct {
	b []byte
	i int
}

// fastCounts reads the usage object in b; ok false: not the common shape
// (or not JSON), encoding/json must decide.
func fastCounts(b []byte) (c counts, ok bool) {
	p := fastParser{b: b}
	var seen [4]bool
	ok = p.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return p.once(&seen[0]) && p.count(&c.prompt)
		case "input_tokens":
			return p.once(&seen[1]) && p.count(&c.input)
		case "prompt_tokens_details":
			return p.once(&seen[2]) && p.details(&c.promptDetails)
		case "input_tokens_details":
			return p.once(&seen[3]) && p.details(&c.inputDetails)
		}
		return p.skip(1)
	})
	p.space()
	return c, ok && p.i == len(p.b)
}

// once marks a known key seen; a second one goes to encoding/json, which
// lets the last win (and merges objects).
func (p *fastParser) once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips space and reports whether the next byte is c, consuming it.
func (p *fastParser) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field after each key's colon
// to read its value. Keys must be plain: lower-case ASCII without escapes
// (encoding/json matches field names case-insensitively, with Unicode
// folding).
func (p *fastParser) object(field func(key []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		key, ok := p.string(true)
		if !ok || !p.next(':') || !field(key) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// string reads a string without escapes or control characters; a key
// also without upper-case or non-ASCII letters.
func (p *fastParser) string(key bool) ([]byte, bool) {
	if !p.next('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		case key && (c >= 0x80 || 'A' <= c && c <= 'Z'):
			return nil, false
		}
	}
	return nil, false
}

// count reads an integer that fits int64, or null (left unset).
func (p *fastParser) count(c *count) bool {
	p.space()
	if p.literal("null") {
		return true
	}
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var v int64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		d := int64(p.b[p.i] - '0')
		if v > (1<<63-1-d)/10 {
			return false // past int64 (its minimum too): encoding/json's error
		}
		v = v*10 + d
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 1 && p.b[start] == '0' {
		return false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return false // not an integer: encoding/json's type error
		}
	}
	if neg {
		v = -v
	}
	*c = count{set: true, v: v}
	return true
}

// details reads a details object's cached_tokens, or null.
func (p *fastParser) details(d *detailsCounts) bool {
	p.space()
	if p.literal("null") {
		return true
	}
	d.set = true
	seen := false
	return p.object(func(key []byte) bool {
		if string(key) == "cached_tokens" {
			return p.once(&seen) && p.count(&d.cached)
		}
		return p.skip(2)
	})
}

// literal consumes word if it is next.
func (p *fastParser) literal(word string) bool {
	if len(p.b)-p.i >= len(word) && string(p.b[p.i:p.i+len(word)]) == word {
		p.i += len(word)
		return true
	}
	return false
}

// skip reads a value of a field tether does not read: a string, number,
// literal or object of them (arrays go to encoding/json).
func (p *fastParser) skip(depth int) bool {
	p.space()
	if p.i == len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.string(false)
		return ok
	case c == '{':
		if depth == maxFastDepth {
			return false
		}
		return p.object(func([]byte) bool { return p.skip(depth + 1) })
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return p.literal("true") || p.literal("false") || p.literal("null")
}

// number reads a JSON number: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (p *fastParser) number() bool {
	if p.b[p.i] == '-' {
		p.i++
	}
	start := p.i
	if n := p.digits(); n == 0 || n > 1 && p.b[start] == '0' {
		return false // none, or a leading zero
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

func (p *fastParser) digits() int {
	start := p.i
	for p.i < len(p.b) && isDigit(p.b[p.i]) {
		p.i++
	}
	return p.i - start
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
