package osdef

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of the text files of an OS definition.
const (
	// MaxFileBytes bounds each text file (ganeti_api_version,
	// variants.list, parameters.list).
	MaxFileBytes = 64 << 10
	// MaxVariants and MaxParameters bound the entries of variants.list and
	// parameters.list.
	MaxVariants   = 256
	MaxParameters = 256
	// MaxVariantLen and MaxParamNameLen bound a variant and a parameter
	// name; MaxDescriptionLen a parameter's description.
	MaxVariantLen     = 64
	MaxParamNameLen   = 64
	MaxDescriptionLen = 1024
	// MaxAPIVersion bounds a version number in ganeti_api_version.
	MaxAPIVersion = 1000
)

// APIVersions are the OS API versions gnt speaks, newest first: 20 (Ganeti
// 2.2 and later: parameters.list, verify, OSP_*), 15 (Ganeti 2.1:
// variants.list, OS_VARIANT) and 10 (Ganeti 2.0).
var APIVersions = []int{20, 15, 10}

// Param is one line of parameters.list.
type Param struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// lines splits a text file into its lines, refusing what is too large or
// not UTF-8 text. Trailing "\r" and surrounding blanks are dropped.
func lines(file string, data []byte) ([]string, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s is %d bytes; at most %d", file, len(data), MaxFileBytes)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s is not UTF-8 text", file)
	}
	if i := strings.IndexByte(string(data), 0); i >= 0 {
		return nil, fmt.Errorf("%s contains a NUL byte (offset %d)", file, i)
	}
	out := strings.Split(string(data), "\n")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out, nil
}

// ParseAPIVersions parses ganeti_api_version: one version number per
// line, newest first; blank lines are ignored. At least one version, no
// version twice.
func ParseAPIVersions(data []byte) ([]int, error) {
	const file = "ganeti_api_version"
	ls, err := lines(file, data)
	if err != nil {
		return nil, err
	}
	var out []int
	for i, l := range ls {
		if l == "" {
			continue
		}
		v, err := strconv.Atoi(l)
		if err != nil || v <= 0 || v > MaxAPIVersion {
			return nil, fmt.Errorf("%s line %d: %q is not an API version (a number from 1 to %d)", file, i+1, clip(l), MaxAPIVersion)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("%s line %d: version %d is listed twice", file, i+1, v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no API version", file)
	}
	return out, nil
}

// NegotiateVersion picks the newest version both the OS and gnt speak.
func NegotiateVersion(osVersions []int) (int, error) {
	for _, v := range APIVersions {
		if slices.Contains(osVersions, v) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("API version(s) %s not supported; gnt speaks %s", joinInts(osVersions), joinInts(APIVersions))
}

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// ParseVariants parses variants.list: one variant per line; blank lines
// and lines starting with '#' are ignored. A variant is 1 to MaxVariantLen
// letters, digits, '_', '.' and '-', starting with a letter or digit
// (no '+': it separates the variant from the OS's name). No variant twice,
// at most MaxVariants.
func ParseVariants(data []byte) ([]string, error) {
	const file = "variants.list"
	ls, err := lines(file, data)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, l := range ls {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if err := CheckVariant(l); err != nil {
			return nil, fmt.Errorf("%s line %d: %v", file, i+1, err)
		}
		if slices.Contains(out, l) {
			return nil, fmt.Errorf("%s line %d: variant %q is listed twice", file, i+1, l)
		}
		if len(out) == MaxVariants {
			return nil, fmt.Errorf("%s lists more than %d variants", file, MaxVariants)
		}
		out = append(out, l)
	}
	return out, nil
}

// CheckVariant refuses a string that cannot be a variant.
func CheckVariant(v string) error {
	if v == "" || len(v) > MaxVariantLen {
		return fmt.Errorf("variant %q must be 1 to %d characters", clip(v), MaxVariantLen)
	}
	if !nameChars(v, "_.-") {
		return fmt.Errorf("variant %q is not letters, digits, '_', '.' and '-' starting with a letter or digit", clip(v))
	}
	return nil
}

// ParseParameters parses parameters.list: one parameter per line, its
// name then its description, separated by blanks; blank lines and lines
// starting with '#' are ignored. A name is 1 to MaxParamNameLen letters,
// digits and '_' starting with a letter (it becomes the variable
// OSP_<NAME>), unique regardless of case; the description may be empty
// and is at most MaxDescriptionLen bytes. At most MaxParameters.
func ParseParameters(data []byte) ([]Param, error) {
	const file = "parameters.list"
	ls, err := lines(file, data)
	if err != nil {
		return nil, err
	}
	var out []Param
	for i, l := range ls {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, desc, _ := strings.Cut(strings.ReplaceAll(l, "\t", " "), " ")
		desc = strings.TrimSpace(desc)
		if name == "" || len(name) > MaxParamNameLen || !isLetter(name[0]) || !nameChars(name, "_") {
			return nil, fmt.Errorf("%s line %d: %q is not a parameter name (1 to %d letters, digits and '_', starting with a letter)", file, i+1, clip(name), MaxParamNameLen)
		}
		if len(desc) > MaxDescriptionLen {
			return nil, fmt.Errorf("%s line %d: the description of %s is %d bytes; at most %d", file, i+1, name, len(desc), MaxDescriptionLen)
		}
		for _, p := range out {
			if strings.EqualFold(p.Name, name) {
				return nil, fmt.Errorf("%s line %d: parameter %q is listed twice (names are upper-cased into OSP_%s)", file, i+1, name, strings.ToUpper(name))
			}
		}
		if len(out) == MaxParameters {
			return nil, fmt.Errorf("%s lists more than %d parameters", file, MaxParameters)
		}
		out = append(out, Param{Name: name, Description: desc})
	}
	return out, nil
}

// SplitName splits "os+variant" into the OS's name and the variant ("" for
// none).
func SplitName(name string) (osName, variant string) {
	osName, variant, _ = strings.Cut(name, "+")
	return osName, variant
}

// CheckOSName refuses a string that cannot name an OS directory: 1 to
// MaxOSNameLen letters, digits, '_', '.' and '-', starting with a letter or
// digit.
func CheckOSName(name string) error {
	if name == "" || len(name) > MaxOSNameLen {
		return fmt.Errorf("OS name %q must be 1 to %d characters", clip(name), MaxOSNameLen)
	}
	if !nameChars(name, "_.-") {
		return fmt.Errorf("OS name %q is not letters, digits, '_', '.' and '-' starting with a letter or digit", clip(name))
	}
	return nil
}

// MaxOSNameLen bounds an OS directory's name.
const MaxOSNameLen = 64

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// nameChars: letters, digits and the extra characters, the first a letter
// or digit.
func nameChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c), isDigit(c):
		case i > 0 && strings.IndexByte(extra, c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}

// clip shortens what an error quotes.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
