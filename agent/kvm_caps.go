package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// capNetAdmin is CAP_NET_ADMIN's bit in the capability sets
// (linux/capability.h).
const capNetAdmin = 12

// parseCapEff reads the effective capability set from a
// /proc/<pid>/status text (its CapEff: line, hexadecimal).
func parseCapEff(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "CapEff" {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "" || len(v) > 16 {
			return 0, fmt.Errorf("CapEff %q is not a 64-bit hexadecimal set", v)
		}
		n, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("CapEff %q is not a 64-bit hexadecimal set", v)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no CapEff line")
}

// probeNetAdmin tells whether this process may create tap devices
// (CAP_NET_ADMIN in its effective set), and why not.
func probeNetAdmin() (bool, string) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false, fmt.Sprintf("cannot read the capabilities: %v", err)
	}
	defer f.Close()
	caps, err := parseCapEff(f)
	if err != nil {
		return false, fmt.Sprintf("cannot read the capabilities: /proc/self/status: %v", err)
	}
	if caps&(1<<capNetAdmin) == 0 {
		return false, fmt.Sprintf("gntd (uid %d) lacks CAP_NET_ADMIN: it cannot create tap devices, so instances with NICs cannot start here; run gntd as root or give it CAP_NET_ADMIN", os.Geteuid())
	}
	return true, "gntd has CAP_NET_ADMIN: it creates tap devices"
}

// Taps tells whether the driver can create tap devices for the guests'
// NICs (checked once, when the driver started), and why.
func (k *KVM) Taps() (bool, string) { return k.netAdmin, k.netAdminWhy }
