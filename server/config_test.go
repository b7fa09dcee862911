package server

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestExampleConfig: the example config make install puts in /etc/gnt
// parses, and what it sets is the defaults but for the node's own
// settings.
func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../dist/gntd.json")
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := ParseConfig(data, &c); err != nil {
		t.Fatalf("dist/gntd.json: %v", err)
	}
	want := DefaultConfig()
	want.Name, want.Bind, want.Join, want.Hypervisor = "node1.example.com", "192.0.2.11", []string{"192.0.2.11:5080"}, "kvm"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("dist/gntd.json sets\n%+v\nwant the defaults with name, bind, join and hypervisor\n%+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("dist/gntd.json does not validate: %v", err)
	}
}

// TestParseConfigBad: bad config documents are refused naming what is
// wrong, and the config is left as it was.
func TestParseConfigBad(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, "empty"},
		{`[]`, "got array"},
		{`{"name": 1}`, "name"},
		{`{"colour": "red"}`, `unknown field "colour"`},
		{`{"name": "a"} {"name": "b"}`, "after"},
		{`{"job_archive_age": 60}`, "duration must be a string"},
		{`{"job_archive_age": "soon"}`, `duration "soon"`},
		{`{"resources": {"// x": 1}}`, `unknown field "// x"`}, // comments only at the top
		{`{"name": "x", "api_port": "5080"}`, "api_port"},
		{strings.Repeat(" ", MaxConfigBytes+1), "limit"},
	} {
		c := DefaultConfig()
		c.Name = "before"
		err := ParseConfig([]byte(tc.in), &c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q: error %v, want one saying %q", tc.in, err, tc.want)
		}
		if c.Name != "before" || c.APIPort != DefaultAPIPort {
			t.Errorf("%.60q: the config changed: %+v", tc.in, c)
		}
	}
	c := DefaultConfig()
	if err := ParseConfig([]byte(`{"//": ["any", {"thing": 1}], "// more": null, "job_archive_age": "1h"}`), &c); err != nil || c.JobArchiveAge.Duration != time.Hour {
		t.Errorf("comments: %v, %v", err, c.JobArchiveAge)
	}
}

func FuzzParseConfig(f *testing.F) {
	data, err := os.ReadFile("../dist/gntd.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"//": 1, "name": "n"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := DefaultConfig()
		before := c
		if err := ParseConfig(in, &c); err != nil && !reflect.DeepEqual(c, before) {
			t.Fatalf("a refused document changed the config")
		}
	})
}

// TestKVMNetNSValidated: --kvm-netns takes a namespace's name only.
func TestKVMNetNSValidated(t *testing.T) {
	for _, ns := range []string{"../etc", "a b", ".", "..", strings.Repeat("n", 256)} {
		c := DefaultConfig()
		c.Name, c.Bind, c.KVMNetNS = "n1", "127.0.0.1", ns
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--kvm-netns") {
			t.Errorf("--kvm-netns %.20q: %v, want an error naming the flag", ns, err)
		}
	}
	c := DefaultConfig()
	c.Name, c.Bind, c.KVMNetNS = "n1", "127.0.0.1", "gnt-test"
	if err := c.Validate(); err != nil {
		t.Errorf("--kvm-netns gnt-test: %v", err)
	}
}
