package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseSDR: ipmitool's sensor listing, whatever a BMC makes it print,
// gives health items with the protocol's statuses or an error.
func FuzzParseSDR(f *testing.F) {
	f.Add([]byte("CPU_T1,96,degrees C,ok\nFan,0,RPM,lcr\nPSU,,,ns\n"))
	f.Add([]byte(",,,\n\n\x00,ok"))
	f.Fuzz(func(t *testing.T, out []byte) {
		items, err := ParseSDR(out)
		if err != nil {
			return
		}
		for _, it := range items {
			switch it[1] {
			case "OK", "WARNING", "CRITICAL", "UNKNOWN":
			default:
				t.Fatalf("status %q", it[1])
			}
			if it[0] == "" {
				t.Fatal("empty item")
			}
		}
		if _, err := json.Marshal(items); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParsePowerStatus(f *testing.F) {
	f.Add([]byte("Chassis Power is on\n"))
	f.Add([]byte("Chassis Power is off"))
	f.Fuzz(func(t *testing.T, out []byte) {
		on, err := ParsePowerStatus(out)
		if err == nil && !strings.Contains(string(out), "Chassis Power is ") {
			t.Fatalf("accepted %q as %v", out, on)
		}
	})
}

// FuzzParseConfig: a configuration parses or is refused with a line
// number; accepted BMCs are usable as ipmitool arguments.
func FuzzParseConfig(f *testing.F) {
	f.Add("option timeout 5s\nnode21 lanplus 10.0.1.21 623 admin /etc/gnt/ipmi/node21.pw\n")
	f.Add("n1 lan h - u /p # c\noption cipher 3\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseConfig(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for name, b := range c.Nodes {
			if name == "" || strings.HasPrefix(b.Host, "-") || strings.HasPrefix(b.User, "-") || b.Port < 1 || b.Port > 65535 ||
				(b.Interface != "lan" && b.Interface != "lanplus") || !strings.HasPrefix(b.PasswordFile, "/") {
				t.Fatalf("accepted %+v", b)
			}
		}
	})
}
