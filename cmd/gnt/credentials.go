package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// credentials are the RAPI user the client authenticates as.
type credentials struct {
	User, Password string
	// Prompt says the password is still to be asked for (--user without
	// one from the environment or the credentials file).
	Prompt bool
}

// resolveCredentials picks the RAPI user: --user (its password from
// $GNT_PASSWORD, else from the credentials file when that names the same
// user, else asked for), else $GNT_USER (with $GNT_PASSWORD, or the
// file's password for that user), else the file
// ~/.config/gnt/credentials ("user password" on one line, mode 0600), else
// none.
func resolveCredentials(flagUser string, getenv func(string) string) (credentials, error) {
	file, err := readCredentialsFile(getenv)
	if err != nil {
		return credentials{}, err
	}
	user, source := flagUser, "--user"
	if user == "" {
		user, source = getenv("GNT_USER"), "$GNT_USER"
	}
	if user == "" {
		if file != nil {
			return *file, nil
		}
		if getenv("GNT_PASSWORD") != "" {
			return credentials{}, errors.New("$GNT_PASSWORD is set without a user: set $GNT_USER or --user")
		}
		return credentials{}, nil
	}
	if pw := getenv("GNT_PASSWORD"); pw != "" {
		return credentials{User: user, Password: pw}, nil
	}
	if file != nil && file.User == user {
		return *file, nil
	}
	if source == "$GNT_USER" {
		return credentials{}, fmt.Errorf("$GNT_USER is %q and no password is given: set $GNT_PASSWORD", user)
	}
	return credentials{User: user, Prompt: true}, nil
}

// credentialsPath is the credentials file under $HOME, or "".
func credentialsPath(getenv func(string) string) string {
	home := getenv("HOME")
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "gnt", "credentials")
}

// readCredentialsFile reads the credentials file; nil when there is none.
// A file others may read is refused, as ssh refuses such a key.
func readCredentialsFile(getenv func(string) string) (*credentials, error) {
	p := credentialsPath(getenv)
	if p == "" {
		return nil, nil
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the credentials: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the credentials: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %04o: it holds a password and must be readable by its owner only (chmod 600 %s)", p, perm, p)
	}
	buf := make([]byte, 4097)
	n, _ := f.Read(buf)
	if n > 4096 {
		return nil, fmt.Errorf("%s is longer than 4096 bytes; it holds one line: USER PASSWORD", p)
	}
	return parseCredentials(string(buf[:n]), p)
}

// parseCredentials reads "USER PASSWORD" from the one line of text that
// is neither blank nor a comment.
func parseCredentials(text, source string) (*credentials, error) {
	var found *credentials
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s line %d: want USER PASSWORD, got %d fields", source, i+1, len(f))
		}
		if found != nil {
			return nil, fmt.Errorf("%s line %d: a second user; the file holds one line: USER PASSWORD", source, i+1)
		}
		found = &credentials{User: f[0], Password: f[1]}
	}
	if found == nil {
		return nil, fmt.Errorf("%s: no USER PASSWORD line", source)
	}
	return found, nil
}
