package rpc

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gnt-cluster/gnt/fsm"
	"golang.org/x/crypto/bcrypt"
)

// AuthRealm is the realm of HTTP basic auth, and the one HA1 password
// hashes are computed with: Ganeti's, so its users files work unchanged.
const AuthRealm = "Ganeti Remote API"

// Limits of a users file.
const (
	MaxUsersFile      = 1 << 20 // bytes
	MaxPasswordLen    = 72      // bytes of a plain-text password: bcrypt's limit
	DefaultBcryptCost = bcrypt.DefaultCost
)

// UserEntry is one user as a users file (or an add/passwd request) gives
// it, before its password is hashed.
type UserEntry struct {
	Name string
	// Scheme is "cleartext" (Secret is the password) or fsm.SchemeHA1
	// (Secret is the lower-case hex H(A1)).
	Scheme string
	Secret string
	Read   bool
	Write  bool
}

// SchemeCleartext is the scheme of a password given in plain text.
const SchemeCleartext = "cleartext"

// UsersFileError is a users file refused because of one line.
type UsersFileError struct {
	Line   int // 1-based; 0 for the file as a whole
	Reason string
}

func (e *UsersFileError) Error() string {
	if e.Line == 0 {
		return "users file: " + e.Reason
	}
	return fmt.Sprintf("users file line %d: %s", e.Line, e.Reason)
}

// ParseUsersFile reads a users file in Ganeti's rapi_users format: one
// user a line, "NAME PASSWORD [OPTIONS]", fields separated by blanks;
// PASSWORD is plain text (which must not begin with '{'), or
// "{cleartext}PASSWORD", or "{HA1}HEX" (the MD5 of
// "NAME:Ganeti Remote API:PASSWORD"), scheme prefixes in any case;
// OPTIONS is "read", "write" or both, separated by a comma (a user without
// options may read; write implies read). Blank lines and lines whose
// first non-blank character is '#' are ignored. Any bad line refuses the
// whole file with its line number and why; a name given twice is a bad
// line, not a silent override.
func ParseUsersFile(data []byte) ([]UserEntry, error) {
	if len(data) > MaxUsersFile {
		return nil, &UsersFileError{Reason: fmt.Sprintf("%d bytes; the limit is %d", len(data), MaxUsersFile)}
	}
	if !utf8.Valid(data) {
		return nil, &UsersFileError{Reason: "not valid UTF-8"}
	}
	var out []UserEntry
	seen := map[string]int{}
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		text := strings.TrimSpace(string(line))
		if text == "" || text[0] == '#' {
			continue
		}
		u, err := parseUserLine(text)
		if err != nil {
			return nil, &UsersFileError{Line: lineNo, Reason: err.Error()}
		}
		if first, dup := seen[u.Name]; dup {
			return nil, &UsersFileError{Line: lineNo, Reason: fmt.Sprintf("user %s is listed already on line %d", u.Name, first)}
		}
		if len(out) >= fsm.MaxRAPIUsers {
			return nil, &UsersFileError{Line: lineNo, Reason: fmt.Sprintf("more than %d users", fsm.MaxRAPIUsers)}
		}
		seen[u.Name] = lineNo
		out = append(out, u)
	}
	return out, nil
}

func parseUserLine(text string) (UserEntry, error) {
	for _, r := range text {
		if r < ' ' && r != '\t' || r == 0x7f {
			return UserEntry{}, fmt.Errorf("control character %q", r)
		}
	}
	f := strings.Fields(text)
	if len(f) < 2 {
		return UserEntry{}, errors.New("want NAME PASSWORD [OPTIONS], got one field")
	}
	if len(f) > 3 {
		return UserEntry{}, fmt.Errorf("want NAME PASSWORD [OPTIONS], got %d fields (options are separated by a comma without blanks)", len(f))
	}
	if e := fsm.ValidateRAPIUserName("name", f[0]); e != nil {
		return UserEntry{}, errors.New(e.Msg)
	}
	u, err := ParsePassword(f[0], f[1])
	if err != nil {
		return UserEntry{}, err
	}
	u.Read = true // no options: read access
	if len(f) == 3 {
		u.Read = false
		for _, o := range strings.Split(f[2], ",") {
			switch strings.ToLower(o) {
			case "read":
				u.Read = true
			case "write":
				u.Write = true
			case "":
				return UserEntry{}, fmt.Errorf("empty option in %q", f[2])
			default:
				return UserEntry{}, fmt.Errorf("unknown option %q (options are read and write)", o)
			}
		}
	}
	return u, nil
}

// ParsePassword reads the password field of a user, in the users file's
// syntax (plain, "{cleartext}...", "{HA1}..."). The entry it returns has
// no access set.
func ParsePassword(name, field string) (UserEntry, error) {
	u := UserEntry{Name: name, Scheme: SchemeCleartext, Secret: field}
	if strings.HasPrefix(field, "{") {
		end := strings.IndexByte(field, '}')
		if end < 0 {
			return UserEntry{}, errors.New("password begins with '{' but has no scheme: write {cleartext}PASSWORD or {HA1}HASH")
		}
		scheme, rest := strings.ToLower(field[1:end]), field[end+1:]
		switch scheme {
		case SchemeCleartext:
			u.Secret = rest
		case fsm.SchemeHA1:
			rest = strings.ToLower(rest)
			if len(rest) != 32 || strings.Trim(rest, "0123456789abcdef") != "" {
				return UserEntry{}, fmt.Errorf("an {HA1} password is 32 hex digits (the MD5 of %q), got %d characters", name+":"+AuthRealm+":PASSWORD", len(rest))
			}
			u.Scheme, u.Secret = fsm.SchemeHA1, rest
		default:
			return UserEntry{}, fmt.Errorf("unknown password scheme {%s} (known: {cleartext}, {HA1})", field[1:end])
		}
	}
	if u.Scheme == SchemeCleartext {
		switch {
		case u.Secret == "":
			return UserEntry{}, errors.New("empty password")
		case len(u.Secret) > MaxPasswordLen:
			return UserEntry{}, fmt.Errorf("password is %d bytes long; the limit is %d", len(u.Secret), MaxPasswordLen)
		case strings.ContainsAny(u.Secret, " \t\r\n"):
			return UserEntry{}, errors.New("password contains a blank")
		}
	}
	return u, nil
}

// Stored turns an entry into the form the replicated state keeps: a
// plain-text password hashed with bcrypt at the given cost (the proposer
// does this, never Apply), an HA1 as it is.
func (u UserEntry) Stored(cost int) (fsm.RAPIUser, error) {
	out := fsm.RAPIUser{Name: u.Name, Read: u.Read, Write: u.Write}
	switch u.Scheme {
	case fsm.SchemeHA1:
		out.Scheme, out.Hash = fsm.SchemeHA1, u.Secret
	case SchemeCleartext:
		h, err := bcrypt.GenerateFromPassword([]byte(u.Secret), cost)
		if err != nil {
			return out, fmt.Errorf("hashing the password of %s: %w", u.Name, err)
		}
		out.Scheme, out.Hash = fsm.SchemeBcrypt, string(h)
	default:
		return out, fmt.Errorf("user %s: unknown scheme %q", u.Name, u.Scheme)
	}
	return out, nil
}

// HA1 returns RFC 2617's H(A1) of a user in the API's realm, as an {HA1}
// users file entry holds it.
func HA1(user, password string) string {
	sum := md5.Sum([]byte(user + ":" + AuthRealm + ":" + password))
	return hex.EncodeToString(sum[:])
}

// checkPassword reports whether password is the one u stores.
func checkPassword(u *fsm.RAPIUser, password string) bool {
	switch u.Scheme {
	case fsm.SchemeBcrypt:
		return bcrypt.CompareHashAndPassword([]byte(u.Hash), []byte(password)) == nil
	case fsm.SchemeHA1:
		return subtle.ConstantTimeCompare([]byte(HA1(u.Name, password)), []byte(u.Hash)) == 1
	}
	return false
}

// Bounds of the cache of verified credentials.
const (
	credCacheSize = 1024
	credCacheTTL  = 2 * time.Minute
)

// credCache remembers credentials verified recently, so that a client
// sending basic auth with every request pays bcrypt once in a while, not
// on every request. An entry is keyed by a SHA-256 of the user name, the
// password and the stored form: a changed password or hash misses, and
// the cache holds no password. Only successes are kept.
type credCache struct {
	mu      sync.Mutex
	entries map[[32]byte]time.Time // key -> expiry
}

func credKey(u *fsm.RAPIUser, password string) [32]byte {
	h := sha256.New()
	for _, s := range []string{u.Name, password, u.Scheme, u.Hash} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *credCache) hit(k [32]byte, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.entries[k]
	if ok && now.Before(exp) {
		return true
	}
	if ok {
		delete(c.entries, k)
	}
	return false
}

func (c *credCache) put(k [32]byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[32]byte]time.Time{}
	}
	if len(c.entries) >= credCacheSize {
		for key, exp := range c.entries {
			if !now.Before(exp) {
				delete(c.entries, key)
			}
		}
		// Still full: drop entries at random (map order) until one fits.
		for key := range c.entries {
			if len(c.entries) < credCacheSize {
				break
			}
			delete(c.entries, key)
		}
	}
	c.entries[k] = now.Add(credCacheTTL)
}

// verify checks a password against u, through the cache.
func (c *credCache) verify(u *fsm.RAPIUser, password string, now time.Time) bool {
	k := credKey(u, password)
	if c.hit(k, now) {
		return true
	}
	if !checkPassword(u, password) {
		return false
	}
	c.put(k, now)
	return true
}
