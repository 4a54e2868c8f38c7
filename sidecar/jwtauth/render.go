package jwtauth

import (
	"bytes"
	"encoding/json"
)

// render turns a claim decoded with json.Number into a session key. The
// rendering is deterministic so two replicas (or two versions of tether)
// derive the same key from the same token:
//   - strings as they are;
//   - numbers exactly as written in the token ("1e3" stays "1e3", not 1000),
//     since re-formatting a float could merge or split sessions;
//   - booleans as true/false;
//   - arrays and objects as compact JSON with object keys sorted and no
//     HTML escaping.
//
// found is false for an absent claim, null, "", [] and {}: none of them
// tells one user from another, and using them would pin every such user
// to one backend.
func render(v any) (s string, found bool) {
	switch t := v.(type) {
	case nil:
		return "", false
	case string:
		return t, t != ""
	case json.Number:
		return string(t), true
	case bool:
		if t {
			return "true", true
		}
		return "false", true
	case []any:
		if len(t) == 0 {
			return "", false
		}
	case map[string]any:
		if len(t) == 0 {
			return "", false
		}
	}
	// encoding/json writes map keys sorted and json.Number verbatim.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", false
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), true
}
