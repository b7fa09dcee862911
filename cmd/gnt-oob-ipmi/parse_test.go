package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	good := `# BMCs
option ipmitool /usr/bin/ipmitool
option timeout 5s   # per call
option retries 2
option privilege operator
option cipher 3
node21 lanplus 10.0.1.21 623 admin /etc/gnt/ipmi/node21.pw
node22   lan   bmc22   -   ADMIN   /etc/gnt/ipmi/shared.pw
`
	c, err := ParseConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Ipmitool: "/usr/bin/ipmitool", Timeout: 5 * time.Second, Retries: 2, Privilege: "OPERATOR", Cipher: 3,
		Nodes: map[string]BMC{
			"node21": {"lanplus", "10.0.1.21", 623, "admin", "/etc/gnt/ipmi/node21.pw"},
			"node22": {"lan", "bmc22", 623, "ADMIN", "/etc/gnt/ipmi/shared.pw"},
		}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	if c, _ := ParseConfig(""); c.Ipmitool != "ipmitool" || c.Timeout != 20*time.Second || c.Cipher != -1 {
		t.Errorf("defaults %+v", c)
	}
	for text, msg := range map[string]string{
		"n1 lanplus h 623 u":                            "line 1: want \"node interface host port user password-file\", got 5 fields",
		"n1 ipmi h 623 u /p":                            `line 1: interface "ipmi": want lanplus or lan`,
		"n1 lan h 70000 u /p":                           `line 1: port "70000": want 1 to 65535 or -`,
		"n1 lan h x u /p":                               `line 1: port "x"`,
		"n1 lan h - u pw":                               `line 1: password file "pw": want an absolute path`,
		"n1 lan -h - u /p":                              `host "-h" must not start with '-'`,
		"n1 lan h - -U /p":                              `user "-U" must not start with '-'`,
		"n1 lan h - u /p\nn1 lan h - u /p":              "line 2: node n1 is configured twice",
		"option timeout":                                `line 1: want "option NAME VALUE"`,
		"option timeout 2m":                             `timeout "2m": want a duration up to 1m`,
		"option retries -1":                             `retries "-1"`,
		"option privilege root":                         `privilege "root"`,
		"option cipher 99":                              `cipher "99"`,
		"option colour blue":                            `unknown option "colour"`,
		"\n\n# comment\nn1 lan h 1 u /p extra # note\n": "line 4: want",
	} {
		_, err := ParseConfig(text)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", text, err, msg)
		}
	}
}

func TestParsePowerStatus(t *testing.T) {
	for out, want := range map[string]any{
		"Chassis Power is on\n":                                    true,
		"Chassis Power is off\n":                                   false,
		"Unable to Get Channel Cipher Suites\nChassis Power is on": true,
		"  Chassis Power is off  ":                                 false,
		"Chassis Power is unknown\n":                               "unexpected answer",
		"":                                                         "unexpected answer",
		"Power is on":                                              "unexpected answer",
	} {
		got, err := ParsePowerStatus([]byte(out))
		if msg, ok := want.(string); ok {
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("%q: %v %v", out, got, err)
			}
		} else if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", out, got, err, want)
		}
	}
}

func TestParseSDR(t *testing.T) {
	out := `CPU_T1,96,degrees C,ok
CPU_T2,128,degrees C,unc
CPU_T3,149,degrees C,ucr
Fan 1,0,RPM,lcr
PSU 2,,,ns
Inlet,42,degrees C,nc
Exhaust,50,degrees C,cr
Mains,0,Volts,lnr
Watchdog,0x00,discrete,0x0080

Odd,1,x,na
`
	items, err := ParseSDR([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"CPU_T1", "OK"}, {"CPU_T2", "WARNING"}, {"CPU_T3", "CRITICAL"}, {"Fan 1", "CRITICAL"},
		{"Inlet", "WARNING"}, {"Exhaust", "CRITICAL"}, {"Mains", "CRITICAL"}, {"Watchdog", "UNKNOWN"}, {"Odd", "UNKNOWN"}}
	if !reflect.DeepEqual(items, want) {
		t.Errorf("got  %v\nwant %v", items, want)
	}
	if items, err := ParseSDR(nil); err != nil || items == nil || len(items) != 0 {
		t.Errorf("empty: %v %v", items, err)
	}
	for _, bad := range []string{"no commas here", ",1,x,ok"} {
		if _, err := ParseSDR([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRunWithScriptedIpmitool checks the ipmitool command lines and the
// protocol's answers with a script standing in for ipmitool (the real one
// is tested against ipmi_sim in integration).
func TestRunWithScriptedIpmitool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "ipmitool")
	os.WriteFile(tool, []byte(`#!/bin/sh
echo "$@" >> `+dir+`/calls
case "$*" in
*"power status"*) cat `+dir+`/state 2>/dev/null || echo "Chassis Power is on" ;;
*"power on"*) echo "Chassis Power is on" > `+dir+`/state; echo "Chassis Power Control: Up/On" ;;
*"power off"*) echo "Chassis Power is off" > `+dir+`/state; echo "Chassis Power Control: Down/Off" ;;
*"power cycle"*) echo "Chassis Power Control: Cycle" ;;
*"sdr elist"*) printf 'Temp,40,degrees C,ok\nFan,0,RPM,lcr\n' ;;
esac
[ -f `+dir+`/fail ] && { echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; exit 1; }
exit 0
`), 0o755)
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	conf := filepath.Join(dir, "ipmi.conf")
	os.WriteFile(conf, []byte("option ipmitool "+tool+"\noption retries 1\noption cipher 17\nnode1 lanplus 192.0.2.9 6230 admin "+pw+"\n"), 0o644)
	call := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"gnt-oob-ipmi", "--config", conf}, args...), &out, func(string) string { return "" })
		return out.String(), err
	}
	if out, err := call("power-status", "node1"); err != nil || out != "{\"powered\": true}\n" {
		t.Errorf("status: %q %v", out, err)
	}
	if out, err := call("power-off", "node1"); err != nil || out != "" {
		t.Errorf("off: %q %v", out, err)
	}
	if out, err := call("power-cycle", "node1"); err == nil || !strings.Contains(err.Error(), "node node1 is powered off; power-cycle needs it on") || out != "" {
		t.Errorf("cycle when off: %q %v", out, err)
	}
	if out, err := call("power-on", "node1"); err != nil || out != "" {
		t.Errorf("on: %q %v", out, err)
	}
	if out, err := call("health", "node1"); err != nil || out != "[[\"Temp\",\"OK\"],[\"Fan\",\"CRITICAL\"]]\n" {
		t.Errorf("health: %q %v", out, err)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if first := strings.SplitN(string(calls), "\n", 2)[0]; first != "-I lanplus -H 192.0.2.9 -p 6230 -U admin -f "+pw+" -R 1 -C 17 chassis power status" {
		t.Errorf("ipmitool arguments: %s", first)
	}
	os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644)
	if _, err := call("power-on", "node1"); exitCode(err) != 1 ||
		err.Error() != "ipmitool chassis power on on 192.0.2.9:6230: Error: Unable to establish IPMI v2 / RMCP+ session" {
		t.Errorf("failure: %v", err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"reboot", "node1"}, 2, `command "reboot" is not supported`},
		{[]string{"power-on"}, 2, "usage"},
		{[]string{"power-on", "node9"}, 1, "node node9 is not in " + conf},
	} {
		if _, err := call(tc.args...); exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: %v", tc.args, err)
		}
	}
}
