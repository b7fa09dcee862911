package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Files of an operator's client configuration directory (~/.config/gnt),
// as `gntd dev` and `gnt cluster issue-client-cert` write them.
const (
	ClientCAFile   = "ca.pem"         // the cluster CA certificates
	ClientCertFile = "client.pem"     // the admin client certificate
	ClientKeyFile  = "client-key.pem" // its key, mode 0600
)

// IssueAdmin makes a key and an admin client certificate named name.
func IssueAdmin(ca *CA, name string, now time.Time) (certPEM, keyPEM []byte, err error) {
	kp, err := NewKeyPair(name)
	if err != nil {
		return nil, nil, err
	}
	cert, err := ca.Sign(&kp.Key.PublicKey, Leaf{Name: name, Org: OrgAdmin}, now, NodeValidity)
	if err != nil {
		return nil, nil, err
	}
	return cert, kp.KeyPEM, nil
}

// WriteClientFiles writes the CA certificates, a client certificate and its
// key into dir (created mode 0700), each file replaced whole.
func WriteClientFiles(dir string, caPEM, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{ClientKeyFile, keyPEM, 0o600}, {ClientCertFile, certPEM, 0o644}, {ClientCAFile, caPEM, 0o644}} {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	return nil
}

// LoadCAFromDir reads a gntd's CA from its data dir (ca.pem, ca-key.pem),
// refusing a key file that group or others may read.
func LoadCAFromDir(dataDir string) (*CA, error) {
	keyPath := filepath.Join(dataDir, "ca-key.pem")
	st, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w (only the candidate that initialised the cluster has it; run this there, as root)", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %o; it must not be readable by group or others (chmod 600)", keyPath, st.Mode().Perm())
	}
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cert, err := os.ReadFile(filepath.Join(dataDir, "ca.pem"))
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	return LoadCA(cert, key)
}

// WriteFile replaces the file at path whole with data (written to a
// temporary file beside it, then renamed), mode mode.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return writeAtomic(path, data, mode)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
