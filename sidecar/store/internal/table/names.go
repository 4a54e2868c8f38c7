package table

// Names interns backend IDs: a binding holds a uint32 instead of a string
// (a 16-byte header and a pointer), and a store of a million bindings on a
// hundred backends keeps a hundred strings. Reference counts free a name
// once its last binding is gone, so backends that come and go (pods
// replaced on every rollout) do not accumulate. ID 0 is the empty string
// and is never counted. Not safe for concurrent use.
type Names struct {
	ids   map[string]uint32
	names []string
	refs  []uint32
	free  []uint32
}

// Intern returns s's ID and counts one more reference to it.
func (n *Names) Intern(s string) uint32 {
	if s == "" {
		return 0
	}
	if id, ok := n.ids[s]; ok {
		n.refs[id]++
		return id
	}
	if n.ids == nil {
		n.ids, n.names, n.refs = map[string]uint32{}, []string{""}, []uint32{0}
	}
	var id uint32
	if k := len(n.free); k > 0 {
		id = n.free[k-1]
		n.free = n.free[:k-1]
		n.names[id], n.refs[id] = s, 1
	} else {
		id = uint32(len(n.names))
		n.names = append(n.names, s)
		n.refs = append(n.refs, 1)
	}
	n.ids[s] = id
	return id
}

// Release drops one reference to id; the last one frees the name.
func (n *Names) Release(id uint32) {
	if id == 0 {
		return
	}
	if n.refs[id]--; n.refs[id] == 0 {
		delete(n.ids, n.names[id])
		n.names[id] = ""
		n.free = append(n.free, id)
	}
}

// Refs counts the references to s: the bindings that name it, when each
// binding interns each of its backends once.
func (n *Names) Refs(s string) int {
	if id, ok := n.ids[s]; ok {
		return int(n.refs[id])
	}
	return 0
}

// ID returns s's ID without counting a reference (0: s is not held).
func (n *Names) ID(s string) uint32 { return n.ids[s] }

// Name returns the string of id.
func (n *Names) Name(id uint32) string {
	if id == 0 {
		return ""
	}
	return n.names[id]
}

// Len counts the names held (the empty string excluded).
func (n *Names) Len() int { return len(n.ids) }
