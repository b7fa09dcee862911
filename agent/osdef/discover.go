package osdef

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/oob"
)

// DefaultSearchPath is where a node looks for OS definitions unless
// configured otherwise (gntd --os-search-path): Ganeti's /srv/ganeti/os,
// Debian's /usr/share/ganeti/os (ganeti-os-noop and other packages), and
// gnt's /etc/gnt/os. The first directory that holds a name wins.
var DefaultSearchPath = []string{"/srv/ganeti/os", "/usr/share/ganeti/os", "/etc/gnt/os"}

// MaxOSes bounds the OS definitions one node reports; more is reported as
// an error of the search path, naming the limit.
const MaxOSes = 256

// Scripts of an OS definition.
const (
	ScriptCreate = "create"
	ScriptImport = "import"
	ScriptExport = "export"
	ScriptRename = "rename"
	ScriptVerify = "verify"
)

// Text files of an OS definition.
const (
	FileAPIVersion = "ganeti_api_version"
	FileVariants   = "variants.list"
	FileParameters = "parameters.list"
)

// Errors of Lookup; returned errors wrap them.
var (
	// ErrUnknown: no OS of that name in the search path.
	ErrUnknown = errors.New("unknown OS")
	// ErrInvalid: the OS exists but is not valid on this node.
	ErrInvalid = errors.New("invalid OS")
	// ErrVariant: the variant is not one the OS lists (or the OS lists
	// variants and none was given, or lists none and one was).
	ErrVariant = errors.New("unsupported OS variant")
)

// Config is where a node finds OS definitions and how it runs them.
type Config struct {
	// SearchPath lists absolute directories; nil means DefaultSearchPath.
	SearchPath []string
	// Owner is the uid that may own the scripts besides root: the uid
	// the gntd runs as (see oob.Whitelist).
	Owner int
	// Timeout bounds one script run (0: DefaultTimeout); MaxOutput bounds
	// what is kept of its output (0: DefaultMaxOutput).
	Timeout   time.Duration
	MaxOutput int
}

// Default bounds of a script run.
const (
	DefaultTimeout   = 30 * time.Minute
	DefaultMaxOutput = 64 << 10
)

// Path is the search path in effect.
func (c Config) Path() []string {
	if c.SearchPath == nil {
		return DefaultSearchPath
	}
	return c.SearchPath
}

// CheckSearchPath refuses a search path with a relative, unclean or
// repeated directory.
func CheckSearchPath(path []string) error {
	for i, d := range path {
		switch {
		case !filepath.IsAbs(d):
			return fmt.Errorf("OS search path: %q is not an absolute directory", d)
		case filepath.Clean(d) != d:
			return fmt.Errorf("OS search path: %q is not a clean path", d)
		case slices.Contains(path[:i], d):
			return fmt.Errorf("OS search path: %q is listed twice", d)
		}
	}
	return nil
}

// OS is one OS definition as found on a node.
type OS struct {
	Name string `json:"name"`
	// Path is its directory.
	Path  string `json:"path"`
	Valid bool   `json:"valid"`
	// Error says why it is not valid.
	Error       string   `json:"error,omitempty"`
	APIVersions []int    `json:"api_versions"`
	Variants    []string `json:"variants"`
	Parameters  []Param  `json:"parameters"`
	// Version is the API version gnt speaks with it (0 when invalid).
	Version int `json:"version,omitempty"`
	// searchDir is the search-path directory it was found in (the
	// whitelist directory of its scripts).
	searchDir string
}

// Names lists the names instances may give it: "os+variant" for each
// variant, or the bare name when it lists none.
func (o OS) Names() []string {
	if len(o.Variants) == 0 {
		return []string{o.Name}
	}
	out := make([]string, len(o.Variants))
	for i, v := range o.Variants {
		out[i] = o.Name + "+" + v
	}
	return out
}

// CheckVariant refuses a variant the OS does not list (Ganeti's
// CheckOSVariant): an OS with variants needs one of them, an OS without
// takes none.
func (o OS) CheckVariant(variant string) error {
	switch {
	case len(o.Variants) == 0 && variant != "":
		return fmt.Errorf("%w: OS %s has no variants, %q given", ErrVariant, o.Name, variant)
	case len(o.Variants) == 0:
		return nil
	case variant == "":
		return fmt.Errorf("%w: OS %s needs a variant (%s+VARIANT), one of: %s", ErrVariant, o.Name, o.Name, strings.Join(o.Variants, ", "))
	case !slices.Contains(o.Variants, variant):
		return fmt.Errorf("%w: OS %s has no variant %q; its variants: %s", ErrVariant, o.Name, variant, strings.Join(o.Variants, ", "))
	}
	return nil
}

// Report is what a node has in its search path.
type Report struct {
	SearchPath []string `json:"search_path"`
	// OSes are sorted by name; a name shadowed by an earlier directory
	// of the path is not listed.
	OSes []OS `json:"oses"`
	// Errors are the search-path directories that could not be read
	// (a missing directory is no error), and the limit when reached.
	Errors []string `json:"errors,omitempty"`
}

// Discover reads the search path. It never fails: what is wrong is in the
// report.
func (c Config) Discover() Report {
	rep := Report{SearchPath: slices.Clone(c.Path())}
	if err := CheckSearchPath(rep.SearchPath); err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		return rep
	}
	seen := map[string]bool{}
	for _, dir := range rep.SearchPath {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", dir, unwrapPath(err)))
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if seen[name] || strings.HasPrefix(name, ".") {
				continue
			}
			p := filepath.Join(dir, name)
			fi, err := os.Stat(p) // an OS dir may be a symlink
			if err != nil || !fi.IsDir() {
				continue
			}
			if len(rep.OSes) == MaxOSes {
				rep.Errors = append(rep.Errors, fmt.Sprintf("more than %d OS definitions in the search path; %s and later ones are not listed", MaxOSes, p))
				break
			}
			seen[name] = true
			rep.OSes = append(rep.OSes, c.load(dir, name))
		}
	}
	sort.Slice(rep.OSes, func(i, j int) bool { return rep.OSes[i].Name < rep.OSes[j].Name })
	return rep
}

// Lookup finds the OS an instance names ("os" or "os+variant"), valid,
// with the variant checked.
func (c Config) Lookup(name string) (OS, error) {
	osName, variant := SplitName(name)
	if err := CheckOSName(osName); err != nil {
		return OS{}, fmt.Errorf("%w: %v", ErrUnknown, err)
	}
	if err := CheckSearchPath(c.Path()); err != nil {
		return OS{}, fmt.Errorf("%w: %v", ErrUnknown, err)
	}
	for _, dir := range c.Path() {
		fi, err := os.Stat(filepath.Join(dir, osName))
		if err != nil || !fi.IsDir() {
			continue
		}
		o := c.load(dir, osName)
		if !o.Valid {
			return o, fmt.Errorf("%w: %s (%s): %s", ErrInvalid, osName, o.Path, o.Error)
		}
		return o, o.CheckVariant(variant)
	}
	return OS{}, fmt.Errorf("%w: no OS %s in the search path %s", ErrUnknown, osName, strings.Join(c.Path(), ":"))
}

func (c Config) whitelist(searchDir string) oob.Whitelist {
	return oob.Whitelist{Dir: searchDir, Owner: c.Owner, Kind: "OS script", DirKind: "OS search-path directory"}
}

// load reads and checks one OS directory.
func (c Config) load(searchDir, name string) OS {
	o := OS{Name: name, Path: filepath.Join(searchDir, name), searchDir: searchDir,
		APIVersions: []int{}, Variants: []string{}, Parameters: []Param{}}
	if err := c.check(&o); err != nil {
		o.Error = err.Error()
		o.Version = 0
		return o
	}
	o.Valid = true
	return o
}

func (c Config) check(o *OS) error {
	if err := CheckOSName(o.Name); err != nil {
		return err
	}
	data, present, err := readText(o.Path, FileAPIVersion)
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("no %s file", FileAPIVersion)
	}
	if o.APIVersions, err = ParseAPIVersions(data); err != nil {
		return err
	}
	max := slices.Max(o.APIVersions)
	if o.Version, err = NegotiateVersion(o.APIVersions); err != nil {
		return err
	}
	scripts := []string{ScriptCreate, ScriptExport, ScriptImport, ScriptRename}
	if max >= 15 {
		data, present, err := readText(o.Path, FileVariants)
		if err != nil {
			return err
		}
		if present {
			if o.Variants, err = ParseVariants(data); err != nil {
				return err
			}
		}
	}
	if max >= 20 {
		scripts = append(scripts, ScriptVerify)
		data, present, err := readText(o.Path, FileParameters)
		if err != nil {
			return err
		}
		if !present {
			return fmt.Errorf("no %s file (API version 20 needs one; it may be empty)", FileParameters)
		}
		if o.Parameters, err = ParseParameters(data); err != nil {
			return err
		}
	}
	wl := c.whitelist(o.searchDir)
	for _, s := range scripts {
		if err := wl.Check(filepath.Join(o.Path, s)); err != nil {
			return err
		}
	}
	return nil
}

// readText reads one text file of an OS dir, bounded; present is false
// when it does not exist.
func readText(dir, file string) (data []byte, present bool, err error) {
	p := filepath.Join(dir, file)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v", file, unwrapPath(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v", file, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", file)
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v", file, err)
	}
	if len(data) > MaxFileBytes {
		return nil, false, fmt.Errorf("%s is larger than %d bytes", file, MaxFileBytes)
	}
	return data, true, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
