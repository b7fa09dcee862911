package iallocator

import (
	"fmt"
	"strings"
)

// Failure is one allocator of a list that did not answer usably.
type Failure struct {
	Name string
	Err  error
}

// ListError is the failure of every allocator of a list, each with its
// reason, in the list's order.
type ListError struct {
	Failures []Failure
}

func (e *ListError) Error() string {
	if len(e.Failures) == 1 {
		f := e.Failures[0]
		if f.Name == Builtin {
			return f.Err.Error() // as it always was: the built-in alone
		}
		return fmt.Sprintf("iallocator %s: %v", f.Name, f.Err)
	}
	parts := make([]string, len(e.Failures))
	for k, f := range e.Failures {
		parts[k] = fmt.Sprintf("%s: %v", f.Name, f.Err)
	}
	return fmt.Sprintf("every iallocator of the list failed (%s)", strings.Join(parts, "; "))
}

// Unwrap returns the last allocator's error, so that the error code of
// a built-in allocator that came last (insufficient resources, ...) is
// kept.
func (e *ListError) Unwrap() error {
	if len(e.Failures) == 0 {
		return nil
	}
	return e.Failures[len(e.Failures)-1].Err
}

// Try runs the allocators of names in order until one answers: run is
// called with each name until it returns no error; the answer and the
// name that gave it are returned. When a run fails and another
// allocator follows, logf (if set) says so, naming both. When every run
// fails, the error is a *ListError naming each allocator and its reason.
func Try[T any](names []string, run func(name string) (T, error), logf func(format string, args ...any)) (T, string, error) {
	var zero T
	if len(names) == 0 {
		return zero, "", fmt.Errorf("no iallocator to try (the list is empty)")
	}
	var le ListError
	for k, n := range names {
		v, err := run(n)
		if err == nil {
			return v, n, nil
		}
		le.Failures = append(le.Failures, Failure{Name: n, Err: err})
		if k+1 < len(names) && logf != nil {
			logf("iallocator %s failed: %v; trying %s next", n, err, names[k+1])
		}
	}
	return zero, "", &le
}

// Resolve is the allocator list an opcode's iallocator asks for: the
// opcode's own, or, when it gives none, the cluster's default list, or
// Builtin when that is empty too.
func Resolve(opcode, clusterDefault string) ([]string, error) {
	s := opcode
	if s == "" {
		s = clusterDefault
	}
	if s == "" {
		return []string{Builtin}, nil
	}
	return ParseList(s)
}
