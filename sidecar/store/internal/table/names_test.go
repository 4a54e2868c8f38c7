package table

import "testing"

func TestNames(t *testing.T) {
	var n Names
	if n.Intern("") != 0 || n.Name(0) != "" || n.Len() != 0 {
		t.Fatal("the empty name is not ID 0")
	}
	a, b := n.Intern("a"), n.Intern("b")
	if a == b || n.Intern("a") != a || n.Name(a) != "a" || n.Name(b) != "b" || n.Len() != 2 {
		t.Fatalf("a=%d b=%d len %d", a, b, n.Len())
	}
	n.Release(a) // one of two references
	if n.Name(a) != "a" {
		t.Fatal("a freed while referenced")
	}
	n.Release(a)
	if n.Len() != 1 {
		t.Fatalf("a not freed: len %d", n.Len())
	}
	if c := n.Intern("c"); c != a || n.Name(c) != "c" {
		t.Fatalf("freed ID not reused: c=%d", c)
	}
	n.Release(0) // no-op
}
