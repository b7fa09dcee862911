package fsm

import "fmt"

// MaxTargetGroups bounds the target_groups of a change-group or group
// evacuation.
const MaxTargetGroups = 256

// validateTargetGroups checks target_groups: group names or UUIDs, none
// empty, none twice, at most MaxTargetGroups.
func validateTargetGroups(groups []string) *Error {
	if len(groups) > MaxTargetGroups {
		return errf(CodeInval, "target_groups", "target_groups lists %d groups; at most %d", len(groups), MaxTargetGroups)
	}
	seen := make(map[string]bool, len(groups))
	for k, g := range groups {
		field := fmt.Sprintf("target_groups.%d", k)
		if g == "" {
			return errf(CodeInval, field, "%s is empty; name a node group", field)
		}
		if e := validateRefName(field, g, MaxGroupNameLen); e != nil {
			return e
		}
		if seen[g] {
			return errf(CodeInval, field, "target group %s is listed twice", g)
		}
		seen[g] = true
	}
	return nil
}

// OpInstanceChangeGroup moves an instance to another node group, to
// nodes the allocator chooses in one of the target groups (any group but
// the instance's own when none is given): Ganeti's
// OP_INSTANCE_CHANGE_GROUP, planned by an iallocator request of mode
// change-group.
type OpInstanceChangeGroup struct {
	OpCommon
	OpInstanceRef
	IAllocator   string   `json:"iallocator,omitempty"`
	TargetGroups []string `json:"target_groups,omitempty"`
	EarlyRelease bool     `json:"early_release,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceChangeGroup) Validate() *Error {
	if e := ValidateIAllocator("iallocator", o.IAllocator); e != nil {
		return e
	}
	if e := validateTargetGroups(o.TargetGroups); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceChangeGroup) Summary() string { return "INSTANCE_CHANGE_GROUP(" + o.Ref() + ")" }

// Locks implements Opcode: as a node evacuation, the nodes and instances
// exclusively (the target groups' nodes receive the instance; each move
// locks its instance through the state's checks).
func (o *OpInstanceChangeGroup) Locks(s *State) []LockDecl { return evacuationLocks() }

// OpGroupEvacuate moves every instance with a node in a node group to
// the target groups (any other group when none is given): Ganeti's
// OP_GROUP_EVACUATE, planned by an iallocator request of mode
// change-group. The moves run one after another in the job's steps, so
// sequential is what gnt always does; with force_failover a running
// instance moves stopped rather than by live migration.
type OpGroupEvacuate struct {
	OpCommon
	GroupName     string   `json:"group_name"`
	IAllocator    string   `json:"iallocator,omitempty"`
	TargetGroups  []string `json:"target_groups,omitempty"`
	EarlyRelease  bool     `json:"early_release,omitempty"`
	Sequential    bool     `json:"sequential,omitempty"`
	ForceFailover bool     `json:"force_failover,omitempty"`
}

// Validate implements Opcode.
func (o *OpGroupEvacuate) Validate() *Error {
	if o.GroupName == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	if e := validateRefName("group_name", o.GroupName, MaxGroupNameLen); e != nil {
		return e
	}
	if e := ValidateIAllocator("iallocator", o.IAllocator); e != nil {
		return e
	}
	if e := validateTargetGroups(o.TargetGroups); e != nil {
		return e
	}
	for k, g := range o.TargetGroups {
		if g == o.GroupName {
			return errf(CodeInval, fmt.Sprintf("target_groups.%d", k), "group %s is the group being evacuated and cannot be a target", g)
		}
	}
	return nil
}

// Summary implements Opcode.
func (o *OpGroupEvacuate) Summary() string { return "GROUP_EVACUATE(" + o.GroupName + ")" }

// Locks implements Opcode: as a node evacuation.
func (o *OpGroupEvacuate) Locks(s *State) []LockDecl { return evacuationLocks() }
