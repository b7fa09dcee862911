package oob

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// NodeView is what the emergency power-off plan reads of one node.
type NodeView struct {
	Name      string
	Group     string
	Master    bool
	Candidate bool
	Offline   bool
	// Powered is the state of record (the node's powered flag).
	Powered bool
	// OOB: the node has an OOB helper (Program says ok).
	OOB bool
}

// InstanceView is what the plan reads of one instance.
type InstanceView struct {
	Name string
	// Nodes are the instance's nodes, primary first.
	Nodes []string
	// Up: the instance's admin state is up (it should run).
	Up bool
}

// EPORequest is `gnt cluster epo [--on] [--groups|--all] [ARGS...]`.
type EPORequest struct {
	On  bool
	All bool
	// Groups: the arguments are node groups, not nodes.
	Groups bool
	Names  []string
}

// EPOPlan is what an emergency power-off (or its reverse, --on) does, in
// order. Off: shut down Stop, then power off Power in order; when Handover
// is set its Master is last in Power, and the master role moves to one of
// Handover.To first. On: power on Power in order (waiting the power delay
// between nodes), wait until each node of Wait answers again, and start
// each instance of Start once all its nodes are back.
type EPOPlan struct {
	On bool `json:"on"`
	// Selected are all nodes the request names, by name.
	Selected []string `json:"selected"`
	// Power are the nodes the OOB helper powers off (or on), in order.
	Power []string `json:"power"`
	// Handover (off) moves the master role before the master's node is
	// powered off, last.
	Handover *Handover `json:"handover,omitempty"`
	// Stop (off) are the instances to shut down before any node is
	// powered off, by name.
	Stop []string `json:"stop,omitempty"`
	// Wait (on) are the nodes whose gntd must answer again.
	Wait []string `json:"wait,omitempty"`
	// Start (on) are the instances to start, with the nodes each waits for.
	Start []InstanceStart `json:"start,omitempty"`
	// Notes say, per node, why it is not in Power (or what else to know).
	Notes []Note `json:"notes,omitempty"`
}

// Handover is the move of the master role away from the master's node
// before it is powered off: to the first of To that takes it.
type Handover struct {
	Master string   `json:"master"`
	To     []string `json:"to"`
}

// InstanceStart is an instance EPO --on starts once all of Nodes are back.
type InstanceStart struct {
	Instance string   `json:"instance"`
	Nodes    []string `json:"nodes"`
}

// Note is a remark about one node of the plan.
type Note struct {
	Node string `json:"node"`
	Text string `json:"text"`
}

// PlanEPO computes the emergency power-off plan (or, with On, the plan to
// bring the nodes back) from a view of the configuration. It is Ganeti's
// `gnt-cluster epo` (lib/client/gnt_cluster.py Epo), made a pure function
// and made safe for a control plane that is a Raft group of the master
// candidates:
//
//   - Nodes without an OOB helper are reported for manual handling; nodes
//     whose powered record already says so are skipped; off targets online
//     nodes and offline nodes still recorded as powered, on targets nodes
//     recorded as unpowered that are not offline (an offline, unpowered
//     node was powered off on purpose).
//   - Off powers off other nodes first, then master candidates by name,
//     but never so many candidates that fewer than a majority of them
//     stay up: the rest of the EPO could not be recorded and a later
//     leader would resume it. Those candidates stay on, with a note to
//     power them off by hand at the end.
//   - The master is powered off only with All, last, after its role is
//     handed to a candidate that stays up (Ganeti refuses the master
//     without --all and cannot power it off with it); without All it
//     stays on, with a note.
//   - Off shuts down the running instances on the selected online nodes
//     first; on starts each once all its selected nodes are back, master
//     candidates being powered on first.
func PlanEPO(nodes []NodeView, instances []InstanceView, req EPORequest) (EPOPlan, error) {
	plan := EPOPlan{On: req.On}
	if req.All && req.Groups {
		return plan, errors.New("only one of --groups or --all is allowed")
	}
	if req.All && len(req.Names) > 0 {
		return plan, errors.New("arguments in combination with --all are not allowed")
	}
	if !req.All && len(req.Names) == 0 {
		return plan, errors.New("name the nodes (or with --groups the groups) to act on, or use --all")
	}
	byName := map[string]*NodeView{}
	groups := map[string]bool{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
		groups[nodes[i].Group] = true
	}
	selected := map[string]bool{}
	switch {
	case req.All:
		for _, n := range nodes {
			selected[n.Name] = true
		}
	case req.Groups:
		want := map[string]bool{}
		for _, g := range req.Names {
			if !groups[g] {
				return plan, fmt.Errorf("node group %q does not exist or has no nodes", g)
			}
			want[g] = true
		}
		for _, n := range nodes {
			if want[n.Group] {
				selected[n.Name] = true
			}
		}
	default:
		for _, name := range req.Names {
			if byName[name] == nil {
				return plan, fmt.Errorf("node %q does not exist", name)
			}
			selected[name] = true
		}
	}
	plan.Selected = sortedKeys(selected)
	if req.On {
		planOn(&plan, byName, instances)
	} else {
		planOff(&plan, nodes, byName, instances, req.All)
	}
	return plan, nil
}

func (p *EPOPlan) note(node, format string, args ...any) {
	p.Notes = append(p.Notes, Note{Node: node, Text: fmt.Sprintf(format, args...)})
}

func planOff(p *EPOPlan, all []NodeView, byName map[string]*NodeView, instances []InstanceView, withAll bool) {
	// Candidates up now, over the whole cluster: the Raft group needs a
	// majority of them.
	total, alive := 0, 0
	for _, n := range all {
		if n.Candidate {
			total++
			if n.Powered && !n.Offline {
				alive++
			}
		}
	}
	var others, candidates []string
	var master *NodeView
	for _, name := range p.Selected {
		n := byName[name]
		switch {
		case n.Master:
			master = n
		case !n.OOB:
			p.note(name, "Node %s does not support out-of-band handling, it can not be handled in a fully automated manner", name)
		case !n.Powered:
			p.note(name, "Node %s is already in desired power state, skipping", name)
		case n.Candidate:
			candidates = append(candidates, name)
		default:
			others = append(others, name)
		}
	}
	p.Power = append(p.Power, others...)
	off := map[string]bool{}
	for _, name := range others {
		off[name] = true
	}
	for _, name := range candidates {
		n := byName[name]
		up := n.Powered && !n.Offline
		if up && (alive-1)*2 <= total {
			p.note(name, "Node %s stays on: powering it off would leave fewer than a majority of the %d master candidates running, and the cluster could not record the rest of the EPO; power it off by hand at the end", name, total)
			continue
		}
		if up {
			alive--
		}
		p.Power = append(p.Power, name)
		off[name] = true
	}
	if master != nil {
		planMaster(p, master, all, off, alive, total, withAll)
	}
	// Running instances on the selected online nodes are shut down first,
	// on the nodes that stay on too: the EPO takes the selection down.
	stop := map[string]bool{}
	for _, in := range instances {
		if !in.Up {
			continue
		}
		for _, nn := range in.Nodes {
			if n := byName[nn]; n != nil && contains(p.Selected, nn) && !n.Offline {
				stop[in.Name] = true
			}
		}
	}
	p.Stop = sortedKeys(stop)
}

func planMaster(p *EPOPlan, m *NodeView, all []NodeView, off map[string]bool, alive, total int, withAll bool) {
	switch {
	case !withAll:
		p.note(m.Name, "Node %s is the master node; it stays on (fail the master role over to a node outside the EPO first, or use --all to power it off last, after the master role is handed to a master candidate that stays on)", m.Name)
		return
	case !m.OOB:
		p.note(m.Name, "Node %s (the master) does not support out-of-band handling; power it off by hand at the end", m.Name)
		return
	case !m.Powered:
		p.note(m.Name, "Node %s is already in desired power state, skipping", m.Name)
		return
	}
	var to []string
	for _, n := range all {
		if n.Candidate && !n.Master && n.Powered && !n.Offline && !off[n.Name] {
			to = append(to, n.Name)
		}
	}
	sort.Strings(to)
	if len(to) == 0 || (alive-1)*2 <= total {
		p.note(m.Name, "Node %s (the master) stays on: no master candidate that stays up could take over with a majority of the %d candidates; power it off by hand at the end", m.Name, total)
		return
	}
	p.Handover = &Handover{Master: m.Name, To: to}
	p.Power = append(p.Power, m.Name)
}

func planOn(p *EPOPlan, byName map[string]*NodeView, instances []InstanceView) {
	var candidates, others []string
	skipped := map[string]bool{}
	for _, name := range p.Selected {
		n := byName[name]
		switch {
		case n.Master:
			p.note(name, "Node %s is the master node and already running", name)
			skipped[name] = true
		case !n.OOB:
			p.note(name, "Node %s does not support out-of-band handling, it can not be handled in a fully automated manner; power it on by hand", name)
		case n.Powered:
			p.note(name, "Node %s is already in desired power state, skipping", name)
		case n.Offline:
			p.note(name, "Node %s is offline and recorded as powered off: it was powered off on purpose, skipping (gnt node power on %s)", name, name)
			skipped[name] = true
		case n.Candidate:
			candidates = append(candidates, name)
		default:
			others = append(others, name)
		}
	}
	p.Power = append(candidates, others...)
	wait := append([]string(nil), p.Power...)
	for _, name := range p.Selected {
		if !skipped[name] && !contains(wait, name) && !byName[name].Offline {
			wait = append(wait, name)
		}
	}
	p.Wait = wait
	for _, in := range instances {
		if !in.Up {
			continue
		}
		var need []string
		touches, down := false, ""
		for _, nn := range in.Nodes {
			if contains(p.Selected, nn) {
				touches = true
			}
			if contains(wait, nn) {
				need = append(need, nn)
			} else if n := byName[nn]; n == nil || n.Offline || !n.Powered {
				down = nn
			}
		}
		switch {
		case !touches:
		case down != "":
			p.note(down, "Instance %s is not started: its node %s stays down", in.Name, down)
		default:
			p.Start = append(p.Start, InstanceStart{Instance: in.Name, Nodes: need})
		}
	}
	sort.Slice(p.Start, func(i, j int) bool { return p.Start[i].Instance < p.Start[j].Instance })
}

// Describe writes the plan for people, one line per item, as the job log
// and `gnt cluster epo` show it.
func (p EPOPlan) Describe() []string {
	var out []string
	verb := "power off"
	if p.On {
		verb = "power on"
	}
	out = append(out, fmt.Sprintf("EPO %s: selected nodes %s", map[bool]string{false: "off", true: "on"}[p.On], list(p.Selected)))
	for _, n := range p.Notes {
		out = append(out, "  "+n.Text)
	}
	if !p.On {
		out = append(out, "  instances to shut down: "+list(p.Stop))
	}
	out = append(out, fmt.Sprintf("  nodes to %s, in order: %s", verb, list(p.Power)))
	if p.Handover != nil {
		out = append(out, fmt.Sprintf("  the master role moves from %s to one of %s before %s is powered off, last",
			p.Handover.Master, list(p.Handover.To), p.Handover.Master))
	}
	if p.On {
		out = append(out, "  nodes to wait for: "+list(p.Wait))
		var starts []string
		for _, s := range p.Start {
			starts = append(starts, fmt.Sprintf("%s (after %s)", s.Instance, list(s.Nodes)))
		}
		out = append(out, "  instances to start: "+list(starts))
	}
	return out
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
