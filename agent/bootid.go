package agent

import (
	"io"
	"os"
	"strings"
)

// DefaultBootIDFile is where Linux gives the id of the running boot, a
// UUID that changes at every boot: the leader compares the one a node
// reports with the last it recorded to tell that the node rebooted.
const DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"

// maxBootIDRead bounds what ReadBootID reads of the file.
const maxBootIDRead = 128

// maxBootIDLen is the longest boot id reported (fsm.MaxBootIDLen).
const maxBootIDLen = 64

// ReadBootID reads the node's boot id from path (DefaultBootIDFile when
// empty). It answers "" when the file cannot be read or does not hold
// one boot id: 1 to 64 printable ASCII characters without spaces, the
// surrounding white space trimmed. A node without a boot id is never
// taken for rebooted.
func ReadBootID(path string) string {
	if path == "" {
		path = DefaultBootIDFile
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBootIDRead+1))
	if err != nil || len(b) > maxBootIDRead {
		return ""
	}
	return parseBootID(string(b))
}

// parseBootID is ReadBootID's check of the file's content.
func parseBootID(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > maxBootIDLen {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return ""
		}
	}
	return s
}
