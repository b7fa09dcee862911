package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestLimitsBeforeSending: input past a limit of docs/api.md is refused
// by the CLI itself, with the API's message naming the field and the
// limit, and nothing is sent; the value at the limit is sent.
func TestLimitsBeforeSending(t *testing.T) {
	disks := func(n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, "--disk", "1G")
		}
		return out
	}
	// name(n) is a hostname of three 63-character labels and one of n,
	// then ".i": 255 characters with n = 61.
	name := func(n int) string {
		l := strings.Repeat("i", 63)
		return l + "." + l + "." + l + "." + strings.Repeat("i", n) + ".i"
	}
	for _, tc := range []struct {
		name    string
		ok, bad []string
		needle  string // in the refusal
	}{
		{"delay repeat", []string{"debug", "delay", "--submit", "--repeat", "1000", "0"}, []string{"debug", "delay", "--repeat", "2000000000", "0"}, "repeat must be between 0 and 1000"},
		{"delay duration", []string{"debug", "delay", "--submit", "3600"}, []string{"debug", "delay", "3601"}, "3600"},
		{"delay chain repeat", []string{"debug", "delay", "--submit", "--chain", "2", "--repeat", "1000", "0"}, []string{"debug", "delay", "--chain", "2", "--repeat", "1001", "0"}, "1000"},
		{"disks", append([]string{"instance", "add", "--submit", "web1"}, disks(16)...), append([]string{"instance", "add", "web1"}, disks(17)...), "at most 16 disks"},
		{"disk size", []string{"instance", "add", "--submit", "web1", "--disk", "1048576G"}, []string{"instance", "add", "web1", "--disk", "1048577G"}, "1073741824"},
		{"disk size overflowing", []string{"instance", "add", "--submit", "web1", "--disk", "1T"}, []string{"instance", "add", "web1", "--disk", "9223372036854775807T"}, "more than anything can have"},
		{"memory", []string{"instance", "add", "--submit", "web1", "--memory", strconv.Itoa(fsm.MaxMemoryMiB)}, []string{"instance", "add", "web1", "--memory", strconv.Itoa(fsm.MaxMemoryMiB + 1)}, "67108864"},
		{"vcpus", []string{"instance", "add", "--submit", "web1", "--vcpus", "1024"}, []string{"instance", "add", "web1", "--vcpus", "1025"}, "1024"},
		{"OS name", []string{"instance", "add", "--submit", "web1", "--os-type", "debootstrap+default"}, []string{"instance", "add", "web1", "--os-type", "../../bin/sh"}, "os_type"},
		{"pool size", []string{"cluster", "modify", "--submit", "--candidate-pool-size", "64"}, []string{"cluster", "modify", "--candidate-pool-size", "9223372036854775807"}, "candidate_pool_size must be 1 to 64"},
		{"allocator", []string{"cluster", "modify", "--submit", "--default-iallocator", "hail"}, []string{"cluster", "modify", "--default-iallocator", "hail,../x"}, "is a file name of the iallocators directory"},
		{"tag length", []string{"cluster", "add-tags", "--submit", strings.Repeat("t", 128)}, []string{"cluster", "add-tags", strings.Repeat("t", 129)}, "128"},
		{"instance name", []string{"instance", "startup", "--submit", name(61)}, []string{"instance", "startup", name(62)}, "at most 255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.on("POST", "/2/gnt/jobs", 200, `{"job_ids": [7, 8]}`)
			r := gnt(t, nil, append([]string{"--server", f.addr(), "--timeout", "5s"}, tc.bad...)...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.needle) {
				t.Fatalf("past the limit: exit %d, stderr %q (want it to mention %q)", r.code, r.stderr, tc.needle)
			}
			if reqs := f.requests(); len(reqs) != 0 {
				t.Fatalf("past the limit, the CLI sent %v", reqs)
			}
			r = gnt(t, nil, append([]string{"--server", f.addr(), "--timeout", "5s"}, tc.ok...)...)
			if r.code != 0 {
				t.Fatalf("at the limit: exit %d, stderr %q", r.code, r.stderr)
			}
			if len(f.requests()) == 0 {
				t.Fatal("at the limit, nothing was sent")
			}
		})
	}
}
