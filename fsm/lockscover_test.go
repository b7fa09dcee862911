package fsm

import "testing"

// TestLocksCover: held locks cover wanted ones by name or by their whole
// level, in a mode at least as strong.
func TestLocksCover(t *testing.T) {
	x := func(level string, names ...string) LockDecl {
		return LockDecl{Level: level, Names: names, Exclusive: true}
	}
	s := func(level string, names ...string) LockDecl { return LockDecl{Level: level, Names: names} }
	for _, tc := range []struct {
		name       string
		held, want []LockDecl
		covered    bool
	}{
		{"nothing wanted", nil, nil, true},
		{"same", []LockDecl{x(LockInstance, "i1"), s(LockNode, "n1", "n2")}, []LockDecl{x(LockInstance, "i1"), s(LockNode, "n2", "n1")}, true},
		{"a subset", []LockDecl{s(LockNode, "n1", "n2")}, []LockDecl{s(LockNode, "n1")}, true},
		{"exclusive covers shared", []LockDecl{x(LockNode, "n1")}, []LockDecl{s(LockNode, "n1")}, true},
		{"shared does not cover exclusive", []LockDecl{s(LockNode, "n1")}, []LockDecl{x(LockNode, "n1")}, false},
		{"another name", []LockDecl{x(LockNode, "n1")}, []LockDecl{x(LockNode, "n3")}, false},
		{"one name more", []LockDecl{x(LockNode, "n1")}, []LockDecl{x(LockNode, "n1", "n3")}, false},
		{"whole level covers names", []LockDecl{x(LockNode)}, []LockDecl{x(LockNode, "n3")}, true},
		{"names do not cover the whole level", []LockDecl{x(LockNode, "n1", "n2")}, []LockDecl{x(LockNode)}, false},
		{"another level", []LockDecl{x(LockInstance, "n1")}, []LockDecl{x(LockNode, "n1")}, false},
		{"names over two declarations", []LockDecl{x(LockNode, "n1"), x(LockNode, "n2")}, []LockDecl{x(LockNode, "n1", "n2")}, true},
	} {
		if got := LocksCover(tc.held, tc.want); got != tc.covered {
			t.Errorf("%s: LocksCover = %v, want %v", tc.name, got, tc.covered)
		}
	}
}
