package fsm

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on what a request may ask for. Each is checked where the request
// is decoded (ParseOpcode and the API, before anything is queued) and
// again when an entry is applied, so an entry beyond them changes nothing.
// docs/api.md lists them in its "Limits" table; TestLimits holds each at
// its boundary.
const (
	// MaxOpsPerJob bounds the opcodes of one job.
	MaxOpsPerJob = 1000
	// MaxJobsPerSubmission bounds the jobs of one POST /2/gnt/jobs.
	MaxJobsPerSubmission = 1000
	// MaxOpsPerSubmission bounds the opcodes of all the jobs of one
	// submission together.
	MaxOpsPerSubmission = 10000

	// MaxTestDelaySeconds bounds OP_TEST_DELAY's duration (per step).
	MaxTestDelaySeconds = 3600
	// MaxTestDelayRepeat bounds OP_TEST_DELAY's repeat: each repetition is
	// a recorded step.
	MaxTestDelayRepeat = 1000
	// MaxTestDelayTotalSeconds bounds duration × repeat of one
	// OP_TEST_DELAY.
	MaxTestDelayTotalSeconds = 86400
	// MaxTestDelayNodes bounds OP_TEST_DELAY's on_nodes.
	MaxTestDelayNodes = 1000

	// MaxDisksPerInstance and MaxNICsPerInstance are Ganeti's
	// constants.MAX_DISKS and MAX_NICS.
	MaxDisksPerInstance = 16
	MaxNICsPerInstance  = 8
	// MaxDiskSizeMiB bounds one disk: 1 PiB.
	MaxDiskSizeMiB = 1 << 30
	// MaxInstanceDiskMiB bounds the sum of an instance's disks: 4 PiB.
	// With at most MaxDisksPerInstance disks of at most MaxDiskSizeMiB
	// (and DRBD metadata) no sum of sizes can overflow an int64.
	MaxInstanceDiskMiB = 1 << 32
	// MaxMemoryMiB bounds an instance's memory (and a node's): 64 TiB,
	// more than any node has.
	MaxMemoryMiB = 1 << 26
	// MaxVCPUs bounds an instance's virtual CPUs.
	MaxVCPUs = 1024
	// MaxNodeDiskMiB and MaxNodeCPUs bound what a node reports of itself
	// (its memory is bounded by MaxMemoryMiB): 1 EiB of disk, 65536 CPUs.
	MaxNodeDiskMiB = 1 << 40
	MaxNodeCPUs    = 1 << 16

	// MaxCandidatePoolSize bounds candidate_pool_size: every candidate is
	// a Raft member the leader replicates to.
	MaxCandidatePoolSize = 64
	// MaxRaftVoters bounds max_raft_voters (an odd number up to it).
	MaxRaftVoters = 9

	// MaxHostnameLen bounds node and instance names (Ganeti's hostname
	// rule); MaxGroupNameLen node group names.
	MaxHostnameLen  = 255
	MaxGroupNameLen = 128
	// MaxNameLen bounds the other names a request carries: OS names,
	// disk and NIC names, NIC links and modes, allocators.
	MaxNameLen = 128
	// MaxDepends bounds the dependencies of one opcode.
	MaxDepends = 100
	// MaxReasonEntries and MaxReasonTextLen bound an opcode's reason
	// trail (the API adds its own entries to those given).
	MaxReasonEntries = 32
	MaxReasonTextLen = 4096
	// MaxCommentLen bounds an opcode's comment.
	MaxCommentLen = 4096
	// MaxNodesPerOp bounds the node (or group) names of one opcode
	// (OP_OOB_COMMAND, OP_CLUSTER_EPO).
	MaxNodesPerOp = 10000
	// MaxParams bounds the keys of a parameter map (hvparams, osparams).
	MaxParams = 64
)

// KnownIAllocators are the instance allocators every gntd has: its
// built-in hail. External allocators are programs of each gntd's
// iallocators directory, which the leader checks at submission.
var KnownIAllocators = []string{"hail"}

// MaxIAllocatorList bounds the allocators of one iallocator list.
const MaxIAllocatorList = 16

// ValidateIAllocator checks an iallocator list's syntax: empty (the
// default) or "name[,name...]", at most MaxIAllocatorList names, each a
// plain file name (printable ASCII without spaces or "/", not "." or
// "..", at most MaxNameLen bytes), none twice. Whether each names an
// allocator is the submitting leader's check (its iallocators
// directory), not the state's.
func ValidateIAllocator(field, list string) *Error {
	_, e := ParseIAllocatorList(field, list)
	return e
}

// ParseIAllocatorList is ValidateIAllocator returning the names.
func ParseIAllocatorList(field, list string) ([]string, *Error) {
	if list == "" {
		return nil, nil
	}
	parts := strings.Split(list, ",")
	if len(parts) > MaxIAllocatorList {
		return nil, errf(CodeInval, field, "%s lists %d allocators; at most %d", field, len(parts), MaxIAllocatorList)
	}
	seen := map[string]bool{}
	for i, p := range parts {
		switch {
		case p == "":
			return nil, errf(CodeInval, field, "%s: allocator %d of the list is empty (write name[,name...])", field, i+1)
		case len(p) > MaxNameLen:
			return nil, errf(CodeInval, field, "%s: allocator %d of the list is %d bytes long; at most %d", field, i+1, len(p), MaxNameLen)
		case p == "." || p == "..":
			return nil, errf(CodeInval, field, "%s: %q is not an allocator name", field, p)
		case seen[p]:
			return nil, errf(CodeInval, field, "%s: allocator %q listed twice", field, p)
		}
		for _, c := range []byte(p) {
			if c <= ' ' || c >= 0x7f || c == '/' {
				return nil, errf(CodeInval, field, "%s: allocator name %q has the character %q: a name is a file name of the iallocators directory (printable ASCII, no spaces or \"/\")", field, p, c)
			}
		}
		seen[p] = true
	}
	return parts, nil
}

// ValidateName checks a name that is a name: valid UTF-8, at most max
// bytes, no control characters, no '/' and not "." or "..". An empty
// name is left to the caller (some are optional).
func ValidateName(field, name string, max int) *Error {
	if len(name) > max {
		return errf(CodeInval, field, "%s is %d bytes long; at most %d", field, len(name), max)
	}
	if !utf8.ValidString(name) {
		return errf(CodeInval, field, "%s %q is not valid UTF-8", field, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return errf(CodeInval, field, "%s %q must not contain '/', '\\' or control characters", field, name)
		}
	}
	if name == "." || name == ".." || strings.Contains(name, "..") {
		return errf(CodeInval, field, "%s %q must not contain \"..\"", field, name)
	}
	return nil
}

// ValidateOSName checks an OS name (Ganeti's "name+variant"): letters,
// digits and "_.+-", starting with a letter or digit, at most MaxNameLen
// characters; empty is left to the caller.
func ValidateOSName(field, name string) *Error {
	if name == "" {
		return nil
	}
	if len(name) > MaxNameLen {
		return errf(CodeInval, field, "%s is %d bytes long; at most %d", field, len(name), MaxNameLen)
	}
	if !isAlnum(name[0]) || strings.Contains(name, "..") {
		return errf(CodeInval, field, "%s %q is not an OS name (letters, digits, '_', '.', '+', '-'; starting with a letter or digit)", field, name)
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '.' && c != '+' && c != '-' {
			return errf(CodeInval, field, "%s %q is not an OS name (letters, digits, '_', '.', '+', '-'; starting with a letter or digit)", field, name)
		}
	}
	return nil
}

// validateRefName checks the name by which an opcode refers to an
// existing object: any length up to max, valid UTF-8, a name.
func validateRefName(field, name string, max int) *Error {
	if name == "" {
		return nil
	}
	return ValidateName(field, name, max)
}

// ValidateDiskSize checks one disk size in MiB: 1 to MaxDiskSizeMiB.
func ValidateDiskSize(field string, size int64) *Error {
	if size <= 0 || size > MaxDiskSizeMiB {
		return errf(CodeInval, field, "%s must be 1 to %d MiB, got %d", field, int64(MaxDiskSizeMiB), size)
	}
	return nil
}

// AddDiskMiB adds size to sum, refusing a total beyond
// MaxInstanceDiskMiB; sizes are each checked with ValidateDiskSize first,
// so the addition itself cannot overflow.
func AddDiskMiB(field string, sum, size int64) (int64, *Error) {
	if size < 0 || size > MaxDiskSizeMiB || sum < 0 || sum > MaxInstanceDiskMiB {
		return sum, errf(CodeInval, field, "disk size %d MiB is not between 0 and %d", size, int64(MaxDiskSizeMiB))
	}
	if sum+size > MaxInstanceDiskMiB {
		return sum, errf(CodeInval, field, "the disks of an instance total at most %d MiB, got more than %d", int64(MaxInstanceDiskMiB), sum)
	}
	return sum + size, nil
}

// ValidateMemory checks a memory size in MiB: 0 to MaxMemoryMiB.
func ValidateMemory(field string, mib int64) *Error {
	if mib < 0 || mib > MaxMemoryMiB {
		return errf(CodeInval, field, "%s must be 0 to %d MiB, got %d", field, MaxMemoryMiB, mib)
	}
	return nil
}

// ValidateVCPUs checks a number of virtual CPUs: 1 to MaxVCPUs.
func ValidateVCPUs(field string, n int) *Error {
	if n < 1 || n > MaxVCPUs {
		return errf(CodeInval, field, "%s must be 1 to %d, got %d", field, MaxVCPUs, n)
	}
	return nil
}

// CheckJobSize checks the number of opcodes of one job.
func CheckJobSize(n int) *Error {
	if n == 0 {
		return errf(CodeInval, "ops", "a job needs at least one opcode")
	}
	if n > MaxOpsPerJob {
		return errf(CodeInval, "ops", "a job has at most %d opcodes, got %d", MaxOpsPerJob, n)
	}
	return nil
}

// CheckSubmissionSize checks the number of jobs of one submission, n,
// and the number of their opcodes, each and together (opsOf(k) is job
// k's).
func CheckSubmissionSize(n int, opsOf func(k int) int) *Error {
	if n == 0 {
		return errf(CodeInval, "jobs", "no jobs to submit")
	}
	if n > MaxJobsPerSubmission {
		return errf(CodeInval, "jobs", "a submission has at most %d jobs, got %d", MaxJobsPerSubmission, n)
	}
	total := 0
	for k := 0; k < n; k++ {
		ops := opsOf(k)
		if e := CheckJobSize(ops); e != nil {
			return &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d of the submission: %s", k, e.Msg)}
		}
		total += ops
	}
	if total > MaxOpsPerSubmission {
		return errf(CodeInval, "jobs", "a submission has at most %d opcodes over all its jobs, got %d", MaxOpsPerSubmission, total)
	}
	return nil
}

// Validate checks a node's reported totals: memory 0 to MaxMemoryMiB,
// disk 0 to MaxNodeDiskMiB, CPUs 0 to MaxNodeCPUs (0: not reported).
func (r Resources) Validate(field string) *Error {
	switch {
	case r.MemoryMiB < 0 || r.MemoryMiB > MaxMemoryMiB:
		return errf(CodeInval, field+".memory_mib", "%s.memory_mib must be 0 to %d, got %d", field, MaxMemoryMiB, r.MemoryMiB)
	case r.DiskMiB < 0 || r.DiskMiB > MaxNodeDiskMiB:
		return errf(CodeInval, field+".disk_mib", "%s.disk_mib must be 0 to %d, got %d", field, int64(MaxNodeDiskMiB), r.DiskMiB)
	case r.CPUs < 0 || r.CPUs > MaxNodeCPUs:
		return errf(CodeInval, field+".cpus", "%s.cpus must be 0 to %d, got %d", field, MaxNodeCPUs, r.CPUs)
	}
	return nil
}

// ValidateBounds checks what an instance record holds against the
// limits: at most MaxDisksPerInstance disks, each of 1 to MaxDiskSizeMiB
// and together at most MaxInstanceDiskMiB (so no sum over them
// overflows), at most MaxNICsPerInstance NICs, memory and vcpus within
// MaxMemoryMiB and MaxVCPUs, and names that are names. Every record the
// state stores passes it.
func (i *Instance) ValidateBounds() *Error {
	if len(i.Disks) > MaxDisksPerInstance {
		return errf(CodeInval, "instance.disks", "an instance has at most %d disks, got %d", MaxDisksPerInstance, len(i.Disks))
	}
	var total int64
	for k, d := range i.Disks {
		f := fmt.Sprintf("instance.disks.%d", k)
		if e := ValidateDiskSize(f+".size", d.SizeMiB); e != nil {
			return e
		}
		if e := ValidateName(f+".name", d.Name, MaxNameLen); e != nil {
			return e
		}
		var e *Error
		if total, e = AddDiskMiB("instance.disks", total, d.SizeMiB); e != nil {
			return e
		}
	}
	if len(i.NICs) > MaxNICsPerInstance {
		return errf(CodeInval, "instance.nics", "an instance has at most %d NICs, got %d", MaxNICsPerInstance, len(i.NICs))
	}
	for k, n := range i.NICs {
		for _, f := range []struct{ name, v string }{{"name", n.Name}, {"link", n.Link}, {"mode", n.Mode}, {"network", n.Network}} {
			if e := ValidateName(fmt.Sprintf("instance.nics.%d.%s", k, f.name), f.v, MaxNameLen); e != nil {
				return e
			}
		}
	}
	if e := ValidateMemory("instance.memory", i.MemoryMiB); e != nil {
		return e
	}
	if i.VCPUs < 0 || i.VCPUs > MaxVCPUs {
		return errf(CodeInval, "instance.vcpus", "instance.vcpus must be 0 to %d, got %d", MaxVCPUs, i.VCPUs)
	}
	if e := ValidateOSName("instance.os", i.OS); e != nil {
		return e
	}
	if len(i.Tags) > MaxTagsPerObj {
		return errf(CodeInval, "instance.tags", "an instance has at most %d tags, got %d", MaxTagsPerObj, len(i.Tags))
	}
	return nil
}

// Validate checks what a gntd says of itself when it joins or registers:
// its name, addresses (each at most MaxHostnameLen+6 bytes, a name) and
// version (at most MaxNameLen) and its resources (Resources.Validate).
func (n NodeSpec) Validate(field string) *Error {
	if e := ValidateHostname(field+".name", n.Name); e != nil {
		return e
	}
	for _, a := range []struct{ name, v string }{
		{"api", n.Addrs.API}, {"raft", n.Addrs.Raft}, {"agent", n.Addrs.Agent}, {"gossip", n.Addrs.Gossip}, {"confd", n.Addrs.Confd},
	} {
		if e := ValidateName(field+".addrs."+a.name, a.v, MaxHostnameLen+6); e != nil {
			return e
		}
	}
	if e := ValidateName(field+".version", n.Version, MaxNameLen); e != nil {
		return e
	}
	if e := ValidateName(field+".uuid", n.UUID, MaxHostnameLen); e != nil {
		return e
	}
	if n.Hypervisor != "" {
		if e := ValidateHypervisorName(field+".hypervisor", n.Hypervisor); e != nil {
			return e
		}
	}
	return n.Resources.Validate(field + ".resources")
}

// validateParamMap checks a free-form parameter map (hvparams,
// osparams): at most MaxParams keys, each a name of at most MaxNameLen
// bytes.
func validateParamMap(field string, m map[string]any) *Error {
	if len(m) > MaxParams {
		return errf(CodeInval, field, "%s has at most %d keys, got %d", field, MaxParams, len(m))
	}
	for _, k := range sortedKeys(m) {
		if k == "" {
			return errf(CodeInval, field, "%s has an empty key", field)
		}
		if e := ValidateName(field+"."+k, k, MaxNameLen); e != nil {
			return e
		}
	}
	return nil
}
