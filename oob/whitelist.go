package oob

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultProgramsDir is the directory of the OOB helpers a gntd may run,
// unless configured otherwise (gntd --oob-programs-dir).
const DefaultProgramsDir = "/etc/gnt/oob-programs"

// ErrRefused is matched (errors.Is) by every refusal of Whitelist.Check.
var ErrRefused = errors.New("OOB helper refused")

// Whitelist is the directory of the OOB helpers a gntd may run, in the
// manner of the node agent's whitelisted diagnose and repair commands: the
// cluster configuration, which the API writes, only names a file; what may
// run as the gntd's user is decided on the machine, by whoever may write
// the directory.
//
// A helper is accepted when its path is absolute and clean (no "." or ".."
// elements, no repeated or trailing "/"), lies inside Dir, and leads to a
// regular file that is owned by root (or by Owner), not writable by group
// or others, and executable by its owner. Dir and every directory between
// it and the file must be owned likewise and not be writable by group or
// others. A symlink on the way is followed only while it stays inside Dir
// (Dir itself may be reached through symlinks).
//
// The agent's Commands is not reused: it resolves plain names and refuses
// every symlink, and this package imports no other package of the project.
//
// Between the check and the start of the helper the file could change;
// only root or Owner can change it then, and they can run anything anyway.
type Whitelist struct {
	// Dir is an absolute path; empty means DefaultProgramsDir.
	Dir string
	// Owner is the uid that may own the directory and the helpers besides
	// root: the uid the gntd runs as. Zero allows root only.
	Owner int
	// Kind names the files in messages ("OOB helper" when empty), and
	// DirKind the directory ("OOB programs directory" when empty): the
	// node agent checks OS scripts with the same rule.
	Kind, DirKind string
}

func (w Whitelist) kind() string {
	if w.Kind == "" {
		return "OOB helper"
	}
	return w.Kind
}

func (w Whitelist) dirKind() string {
	if w.DirKind == "" {
		return "OOB programs directory"
	}
	return w.DirKind
}

// DirPath is the whitelist directory, DefaultProgramsDir when Dir is empty.
func (w Whitelist) DirPath() string {
	if w.Dir == "" {
		return DefaultProgramsDir
	}
	return w.Dir
}

// Rule says in words what Check accepts.
func (w Whitelist) Rule() string {
	return fmt.Sprintf("an %s must be an absolute path inside %s, to a regular file owned by %s, "+
		"not writable by group or others and executable by its owner, reached through no symlink that leaves the directory",
		w.kind(), w.DirPath(), w.owners())
}

func (w Whitelist) owners() string {
	if w.Owner == 0 {
		return "root"
	}
	return fmt.Sprintf("root or uid %d (the user gntd runs as)", w.Owner)
}

// RefusedError is a refusal of Check: the path, what is wrong with it,
// and the rule.
type RefusedError struct {
	Kind string // what was refused: "OOB helper", "OS script"
	Path string
	Why  string
	Rule string
}

func (e *RefusedError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = "OOB helper"
	}
	return fmt.Sprintf("%s %q refused: %s (%s)", kind, e.Path, e.Why, e.Rule)
}

// Is makes every RefusedError match ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func (w Whitelist) refuse(path, format string, args ...any) error {
	return &RefusedError{Kind: w.kind(), Path: path, Why: fmt.Sprintf(format, args...), Rule: w.Rule()}
}

func (w Whitelist) ownerOK(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, false
	}
	uid := int(st.Uid)
	return uid, uid == 0 || uid == w.Owner
}

// checkDir checks one directory of the way (its real path, Lstat'ed).
func (w Whitelist) checkDir(path, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return w.refuse(path, "%s: %v", dir, unwrapPath(err))
	}
	if !fi.IsDir() {
		return w.refuse(path, "%s is not a directory", dir)
	}
	if uid, ok := w.ownerOK(fi); !ok {
		return w.refuse(path, "the directory %s is owned by uid %d", dir, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return w.refuse(path, "the directory %s is writable by group or others (mode %04o)", dir, fi.Mode().Perm())
	}
	return nil
}

// Check refuses (with a *RefusedError, errors.Is ErrRefused) a path that
// is not a whitelisted helper, and returns nil for one that is.
func (w Whitelist) Check(path string) error {
	dir := w.DirPath()
	switch {
	case path == "":
		return w.refuse(path, "the path is empty")
	case strings.IndexByte(path, 0) >= 0:
		return w.refuse(path, "the path contains a NUL byte")
	case !filepath.IsAbs(path):
		return w.refuse(path, "not an absolute path")
	case filepath.Clean(path) != path:
		return w.refuse(path, "not a clean path (it has \".\" or \"..\" elements or a repeated or trailing \"/\")")
	case !filepath.IsAbs(dir):
		return w.refuse(path, "the %s %q is not an absolute path", w.dirKind(), dir)
	}
	rel, ok := inside(filepath.Clean(dir), path)
	if !ok {
		return w.refuse(path, "not inside the %s %s", w.dirKind(), dir)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return w.refuse(path, "the %s %s: %v", w.dirKind(), dir, unwrapPath(err))
	}
	if err := w.checkDir(path, realDir); err != nil {
		return err
	}
	// Walk down from the real directory, one element at a time: each
	// directory on the way is checked, a symlink is resolved and must stay
	// inside, and so must the directories that lead to its target.
	cur := realDir
	elems := strings.Split(rel, string(filepath.Separator))
	for i, e := range elems {
		next := filepath.Join(cur, e)
		fi, err := os.Lstat(next)
		if err != nil {
			return w.refuse(path, "%s: %v", next, unwrapPath(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(next)
			if err != nil {
				return w.refuse(path, "the symlink %s: %v", next, unwrapPath(err))
			}
			trel, ok := inside(realDir, target)
			if !ok {
				return w.refuse(path, "the symlink %s leads to %s, outside the %s", next, target, w.dirKind())
			}
			// The directories from the real directory to the target.
			d := realDir
			tparts := strings.Split(trel, string(filepath.Separator))
			for _, p := range tparts[:len(tparts)-1] {
				d = filepath.Join(d, p)
				if err := w.checkDir(path, d); err != nil {
					return err
				}
			}
			next = target
			if fi, err = os.Lstat(next); err != nil {
				return w.refuse(path, "%s: %v", next, unwrapPath(err))
			}
		}
		if i < len(elems)-1 {
			if err := w.checkDir(path, next); err != nil {
				return err
			}
			cur = next
			continue
		}
		if fi.IsDir() {
			return w.refuse(path, "%s is a directory, not a regular file", next)
		}
		if !fi.Mode().IsRegular() {
			return w.refuse(path, "%s is not a regular file", next)
		}
		if uid, ok := w.ownerOK(fi); !ok {
			return w.refuse(path, "%s is owned by uid %d", next, uid)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return w.refuse(path, "%s is writable by group or others (mode %04o)", next, fi.Mode().Perm())
		}
		if fi.Mode().Perm()&0o100 == 0 {
			return w.refuse(path, "%s is not executable by its owner (mode %04o)", next, fi.Mode().Perm())
		}
	}
	return nil
}

// inside reports whether path lies strictly inside dir (both clean and
// absolute), and its path relative to dir.
func inside(dir, path string) (string, bool) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// unwrapPath drops the operation and path of a *fs.PathError, which the
// refusal names already.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
