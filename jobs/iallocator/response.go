package iallocator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Answer is a validated successful response. Which fields are set
// depends on the mode.
type Answer struct {
	Info string
	// Nodes (allocate, relocate) are node names, primary first.
	Nodes []string
	// Allocated and Failed (multi-allocate): the instances placed, with
	// their nodes, and the names of those that were not.
	Allocated []Placed
	Failed    []string
	// Moved, NotMoved and Jobs (node-evacuate, change-group): the instances moved (name, target group name,
	// nodes), those that could not be (name, reason), and the jobs that
	// move them, each a list of opcodes (OP_INSTANCE_FAILOVER,
	// OP_INSTANCE_MIGRATE, OP_INSTANCE_REPLACE_DISKS).
	Moved    []Moved
	NotMoved []NotMoved
	Jobs     [][]map[string]any
}

// Placed is one instance of a multi-allocate answer.
type Placed struct {
	Name  string
	Nodes []string
}

// Moved is one moved instance of an evacuation answer.
type Moved struct {
	Name, Group string
	Nodes       []string
}

// NotMoved is one instance an evacuation answer could not move.
type NotMoved struct {
	Name, Reason string
}

// evacOpcodes are the opcodes an evacuation answer's jobs may hold
// (Ganeti's _JOB_LIST).
var evacOpcodes = map[string]bool{"OP_INSTANCE_FAILOVER": true, "OP_INSTANCE_MIGRATE": true, "OP_INSTANCE_REPLACE_DISKS": true}

// ParseResponse validates an allocator's response to in (whose Request
// gives the mode) and returns its answer. It refuses, naming what is
// wrong: output that is not one JSON object; a missing or mistyped
// success, info or result (Ganeti's old "nodes" is taken for a missing
// result); an unsuccessful answer (its info quoted); and a result whose
// shape is not the mode's or that names a node, group or instance the
// input does not have, names a node twice for one instance, a node that
// is offline or drained, the wrong number of nodes, or (relocate) a node
// it was asked to move away from; for the multi modes, instances that
// were not asked for, or answered twice, or not at all.
func ParseResponse(in *Input, data []byte) (*Answer, error) {
	mode, _ := in.Request["type"].(string)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON object: %v", shortErr(err))
	}
	if raw == nil {
		return nil, fmt.Errorf("the answer is not a JSON object: null")
	}
	if dec.More() {
		return nil, fmt.Errorf("the answer has more than one JSON value")
	}
	if _, ok := raw["result"]; !ok {
		if n, ok := raw["nodes"]; ok {
			raw["result"] = n
		}
	}
	for _, k := range []string{"success", "info", "result"} {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("the answer lacks %q (it must have success, info and result)", k)
		}
	}
	var a Answer
	var success bool
	if err := json.Unmarshal(raw["success"], &success); err != nil {
		return nil, fmt.Errorf("success must be true or false, got %s", short(string(raw["success"]), 80))
	}
	if err := json.Unmarshal(raw["info"], &a.Info); err != nil {
		return nil, fmt.Errorf("info must be a string, got %s", short(string(raw["info"]), 80))
	}
	if !success {
		info := strings.TrimSpace(a.Info)
		if info == "" {
			info = "no reason given"
		}
		return nil, fmt.Errorf("it could not place: %s", short(info, 1000))
	}
	res := raw["result"]
	var err error
	switch mode {
	case ModeAllocate, ModeRelocate:
		err = a.nodeList(in, res)
	case ModeMultiAllocate:
		err = a.multiAlloc(in, res)
	case ModeNodeEvacuate, ModeChangeGroup:
		err = a.evacuation(in, res)
	default:
		err = fmt.Errorf("the request's mode %q is not one gnt speaks", mode)
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func shortErr(err error) string { return short(err.Error(), 200) }

// usableNode checks a node name of an answer.
func usableNode(in *Input, name, what string) error {
	n, ok := in.Nodes[name]
	switch {
	case !ok:
		return fmt.Errorf("%s names node %q, which the cluster does not have", what, short(name, 100))
	case n.Offline:
		return fmt.Errorf("%s names node %s, which is offline", what, name)
	case n.Drained && n.NoDRBD != "":
		// Drained as NewInput reports a node without DRBD to a request
		// that places drbd disks (or by the operator too: either way the
		// answer may not use it).
		return fmt.Errorf("%s names node %s, which takes no drbd disks: %s", what, name, n.NoDRBD)
	case n.Drained:
		return fmt.Errorf("%s names node %s, which is drained", what, name)
	case !n.VMCapable:
		return fmt.Errorf("%s names node %s, which is not vm_capable", what, name)
	}
	return nil
}

// nodes checks a list of node names for one instance.
func checkNodes(in *Input, nodes []string, want int, what string) error {
	if want >= 0 && len(nodes) != want {
		return fmt.Errorf("%s has %d node(s), the request needs %d", what, len(nodes), want)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if err := usableNode(in, n, what); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%s names node %s twice", what, n)
		}
		seen[n] = true
	}
	return nil
}

func required(in *Input, m map[string]any) int {
	switch v := m["required_nodes"].(type) {
	case int:
		return v
	case float64:
		return int(v)
	}
	return -1
}

func (a *Answer) nodeList(in *Input, res json.RawMessage) error {
	if err := json.Unmarshal(res, &a.Nodes); err != nil || a.Nodes == nil {
		return fmt.Errorf("result must be a list of node names, got %s", short(string(res), 120))
	}
	if err := checkNodes(in, a.Nodes, required(in, in.Request), "the result"); err != nil {
		return err
	}
	if in.Request["type"] != ModeRelocate {
		return nil
	}
	from, _ := in.Request["relocate_from"].([]string)
	name, _ := in.Request["name"].(string)
	inst := in.Instances[name]
	for _, n := range a.Nodes {
		for _, f := range from {
			if n == f {
				return fmt.Errorf("the result names node %s, which the instance is to move away from", n)
			}
		}
		for _, cur := range inst.Nodes {
			if n == cur {
				return fmt.Errorf("the result names node %s, which already holds the instance", n)
			}
		}
	}
	// Relocation stays within the instance's group (Ganeti checks the
	// groups of the answer against the request's).
	if len(inst.Nodes) > 0 {
		if g := in.Nodes[inst.Nodes[0]].Group; in.Nodes[a.Nodes[0]].Group != g {
			return fmt.Errorf("the result names node %s of group %s, outside the instance's group %s", a.Nodes[0], in.groupName(in.Nodes[a.Nodes[0]].Group), in.groupName(g))
		}
	}
	return nil
}

func (in *Input) groupName(uuid string) string {
	if g, ok := in.NodeGroups[uuid]; ok {
		return g.Name
	}
	return uuid
}

// asked is the instance names a multi request asks for.
func asked(in *Input) map[string]bool {
	out := map[string]bool{}
	switch v := in.Request["instances"].(type) {
	case []string:
		for _, n := range v {
			out[n] = true
		}
	case []map[string]any:
		for _, m := range v {
			n, _ := m["name"].(string)
			out[n] = true
		}
	}
	return out
}

// covered checks that the answered names are exactly the asked ones,
// each once.
func covered(want map[string]bool, names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if !want[n] {
			return fmt.Errorf("the result names instance %q, which the request did not ask for", short(n, 100))
		}
		if seen[n] {
			return fmt.Errorf("the result names instance %s twice", n)
		}
		seen[n] = true
	}
	var missing []string
	for n := range want {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("the result does not answer for instance(s) %s", strings.Join(missing, ", "))
	}
	return nil
}

func (a *Answer) multiAlloc(in *Input, res json.RawMessage) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(res, &pair); err != nil || len(pair) != 2 {
		return fmt.Errorf("result must be a list of two lists (allocated, failed), got %s", short(string(res), 120))
	}
	var placed [][]json.RawMessage
	if err := json.Unmarshal(pair[0], &placed); err != nil || placed == nil {
		return fmt.Errorf("result[0] must be a list of [name, [nodes]], got %s", short(string(pair[0]), 120))
	}
	if err := json.Unmarshal(pair[1], &a.Failed); err != nil || a.Failed == nil {
		return fmt.Errorf("result[1] must be a list of instance names, got %s", short(string(pair[1]), 120))
	}
	reqs, _ := in.Request["instances"].([]map[string]any)
	byName := map[string]map[string]any{}
	for _, m := range reqs {
		n, _ := m["name"].(string)
		byName[n] = m
	}
	var names []string
	for k, p := range placed {
		var pl Placed
		if len(p) != 2 || json.Unmarshal(p[0], &pl.Name) != nil || json.Unmarshal(p[1], &pl.Nodes) != nil || pl.Nodes == nil {
			return fmt.Errorf("result[0][%d] must be [name, [nodes]]", k)
		}
		if pl.Name == "" {
			return fmt.Errorf("result[0][%d] has an empty instance name", k)
		}
		want := -1
		if m, ok := byName[pl.Name]; ok {
			want = required(in, m)
		}
		if err := checkNodes(in, pl.Nodes, want, "the placement of "+short(pl.Name, 100)); err != nil {
			return err
		}
		a.Allocated = append(a.Allocated, pl)
		names = append(names, pl.Name)
	}
	names = append(names, a.Failed...)
	return covered(asked(in), names)
}

func (a *Answer) evacuation(in *Input, res json.RawMessage) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(res, &parts); err != nil || len(parts) != 3 {
		return fmt.Errorf("result must be a list of three lists (moved, failed, jobs), got %s", short(string(res), 120))
	}
	var moved, failed [][]json.RawMessage
	if err := json.Unmarshal(parts[0], &moved); err != nil || moved == nil {
		return fmt.Errorf("result[0] must be a list of [name, group, [nodes]], got %s", short(string(parts[0]), 120))
	}
	if err := json.Unmarshal(parts[1], &failed); err != nil || failed == nil {
		return fmt.Errorf("result[1] must be a list of [name, reason], got %s", short(string(parts[1]), 120))
	}
	if err := json.Unmarshal(parts[2], &a.Jobs); err != nil || a.Jobs == nil {
		return fmt.Errorf("result[2] must be a list of jobs, each a list of opcodes, got %s", short(string(parts[2]), 120))
	}
	groups := map[string]bool{}
	for _, g := range in.NodeGroups {
		groups[g.Name] = true
	}
	var names []string
	for k, m := range moved {
		var mv Moved
		if len(m) != 3 || json.Unmarshal(m[0], &mv.Name) != nil || json.Unmarshal(m[1], &mv.Group) != nil ||
			json.Unmarshal(m[2], &mv.Nodes) != nil || mv.Nodes == nil || mv.Name == "" {
			return fmt.Errorf("result[0][%d] must be [name, group, [nodes]]", k)
		}
		if !groups[mv.Group] {
			return fmt.Errorf("result[0][%d] names group %q, which the cluster does not have", k, short(mv.Group, 100))
		}
		inst, ok := in.Instances[mv.Name]
		if !ok {
			return fmt.Errorf("result[0][%d] names instance %q, which the cluster does not have", k, short(mv.Name, 100))
		}
		if err := checkNodes(in, mv.Nodes, len(inst.Nodes), "the move of "+mv.Name); err != nil {
			return err
		}
		if tg, _ := in.Request["target_groups"].([]string); len(tg) > 0 && !containsGroup(in, tg, mv.Group) {
			return fmt.Errorf("the move of %s goes to group %s, not one of the target groups", mv.Name, mv.Group)
		}
		for _, n := range mv.Nodes {
			if g := in.groupName(in.Nodes[n].Group); g != mv.Group {
				return fmt.Errorf("the move of %s names node %s of group %s, not of its target group %s", mv.Name, n, g, mv.Group)
			}
		}
		a.Moved = append(a.Moved, mv)
		names = append(names, mv.Name)
	}
	for k, f := range failed {
		var nm NotMoved
		var reason *string
		if len(f) != 2 || json.Unmarshal(f[0], &nm.Name) != nil || json.Unmarshal(f[1], &reason) != nil || nm.Name == "" {
			return fmt.Errorf("result[1][%d] must be [name, reason]", k)
		}
		if reason != nil {
			nm.Reason = *reason
		}
		a.NotMoved = append(a.NotMoved, nm)
		names = append(names, nm.Name)
	}
	for j, job := range a.Jobs {
		if len(job) == 0 {
			return fmt.Errorf("result[2][%d] is an empty job", j)
		}
		for k, op := range job {
			id, _ := op["OP_ID"].(string)
			if !evacOpcodes[id] {
				return fmt.Errorf("result[2][%d][%d] has OP_ID %q; an evacuation job may only hold OP_INSTANCE_FAILOVER, OP_INSTANCE_MIGRATE and OP_INSTANCE_REPLACE_DISKS", j, k, short(fmt.Sprint(op["OP_ID"]), 60))
			}
			iname, _ := op["instance_name"].(string)
			if _, ok := in.Instances[iname]; !ok {
				return fmt.Errorf("result[2][%d][%d] names instance %q, which the cluster does not have", j, k, short(iname, 100))
			}
		}
	}
	return covered(asked(in), names)
}

// containsGroup tells whether the group named name is one of uuids.
func containsGroup(in *Input, uuids []string, name string) bool {
	for _, u := range uuids {
		if in.groupName(u) == name {
			return true
		}
	}
	return false
}
