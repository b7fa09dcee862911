package netlimit

import "syscall"

// RaiseFileLimit raises the soft limit of open files (RLIMIT_NOFILE) to
// the hard limit when it is lower, and returns both as they are then.
// Raising the hard limit needs privileges and is not tried. (Go's os
// package already raises the soft limit at start on Linux; this makes sure
// of it and tells what it is.)
func RaiseFileLimit() (soft, hard uint64, err error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, err
	}
	if r.Cur < r.Max {
		want := r
		want.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return uint64(r.Cur), uint64(r.Max), err
		}
		r = want
	}
	return uint64(r.Cur), uint64(r.Max), nil
}
