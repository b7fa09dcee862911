package jobs

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// The instance opcodes as steps. Each step reads the instance's record
// from the state when it runs (the previous steps recorded theirs), acts
// on the node agents with idempotent operations, and records the
// configuration change it made with its own record (StepContext.Change).
// A step interrupted by a leader change is run again by the next leader:
// the agents answer "no effect" for what was done already, and
// reboot/OS install/migration carry an id that makes them happen once.

// opID names the opcode on the agents, so operations that must happen
// once (reboot, OS install, migration) are recognised when run again.
func opID(sc *StepContext) string { return fmt.Sprintf("job%d-op%d", sc.Job.ID, sc.OpIndex) }

// instanceOf reads an instance by name or UUID, with its nodes.
func (e *Executor) instanceOf(ref string) (*fsm.Instance, map[string]*fsm.Node, error) {
	var (
		in    *fsm.Instance
		nodes = map[string]*fsm.Node{}
	)
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if i := s.LookupInstance(ref); i != nil {
			c := *i
			in = &c
			for _, u := range append([]string{i.PrimaryNode}, i.SecondaryNodes...) {
				if n := s.Nodes[u]; n != nil {
					nodes[u] = n
				}
			}
		}
	})
	if in == nil {
		return nil, nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "instance_name", Msg: fmt.Sprintf("instance %s does not exist", ref)}
	}
	return in, nodes, nil
}

// usable refuses a node an instance operation cannot act on.
func (e *Executor) usable(n *fsm.Node, what string) error {
	switch {
	case n == nil:
		return fmt.Errorf("%s: the node no longer exists", what)
	case n.Offline:
		return fmt.Errorf("%s: node %s is offline", what, n.Name)
	case e.Dead != nil && e.Dead(n):
		return fmt.Errorf("%s: node %s is dead", what, n.Name)
	}
	return nil
}

// statusOf asks a node's agent for an instance's state there; an agent
// with no record of the instance (not_found) gives an empty reply (no
// state, no disks), not an error.
func (e *Executor) statusOf(ctx context.Context, sc *StepContext, node *fsm.Node, in *fsm.Instance) (NodeReply, error) {
	r, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpStatus, Instance: in})
	var ne *NodeCallError
	if err != nil && errors.As(err, &ne) && ne.Code == "not_found" {
		return NodeReply{}, nil
	}
	return r, err
}

// put records an instance as changed by the step.
func put(sc *StepContext, in *fsm.Instance, expect int64) {
	rec := *in
	sc.Change(fsm.StepChange{InstancePut: &fsm.InstancePut{Instance: rec, ExpectSerial: expect}})
}

// derivedUUID draws a stable UUID for a part of an instance (a disk, a
// NIC) from the instance's UUID, so a step run again builds the same.
func derivedUUID(base, part string) string {
	ns, err := uuid.Parse(base)
	if err != nil {
		ns = uuid.NewSHA1(uuid.Nil, []byte(base))
	}
	return uuid.NewSHA1(ns, []byte(part)).String()
}

// derivedMAC is a MAC in Ganeti's default prefix aa:00:00, stable for the
// instance and NIC index.
func derivedMAC(base string, i int) string {
	h := sha1.Sum([]byte(fmt.Sprintf("%s/nic%d", base, i)))
	return fmt.Sprintf("aa:00:00:%02x:%02x:%02x", h[0], h[1], h[2])
}

func (e *Executor) allocOptions(s *fsm.State) alloc.Options { return AllocOptions(s, e.Dead) }

// AllocOptions are the allocator's options on the state: the nodes dead
// says are dead (nil: none) take no instances, and vcpus are placed at
// fsm.DefaultVCPURatio.
func AllocOptions(s *fsm.State, dead func(*fsm.Node) bool) alloc.Options {
	d := map[string]bool{}
	for u, n := range s.Nodes {
		if dead != nil && dead(n) {
			d[u] = true
		}
	}
	return alloc.Options{Dead: d, VCPURatio: fsm.DefaultVCPURatio}
}

func (e *Executor) createSteps(o *fsm.OpInstanceCreate) []Step {
	steps := []Step{{Name: "allocate and record", Retry: true, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		return e.createRecord(ctx, sc, o)
	}}}
	if o.Common().DryRun != nil && *o.Common().DryRun || o.Forthcoming {
		return steps
	}
	createOn := func(secondary bool) Step {
		name := "create disks on the primary node"
		if secondary {
			name = "create disks on the secondary node"
		}
		return Step{Name: name, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.InstanceName)
			if err != nil {
				return nil, err
			}
			node := nodes[in.PrimaryNode]
			if secondary {
				node = nodes[in.SecondaryNodes[0]]
			}
			if err := e.usable(node, "creating disks"); err != nil {
				return nil, err
			}
			for _, d := range in.Disks {
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
					return nil, err
				}
			}
			sc.Logf("created %d disk(s) of %s on %s", len(in.Disks), in.Name, node.Name)
			return nil, nil
		}}
	}
	// A commit creates what the reservation describes, not what the
	// commit request (typically just the name) says.
	template, osType := o.Template(), o.OSType
	if o.Commit {
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if in := s.LookupInstance(o.InstanceName); in != nil {
				template = in.DiskTemplate
				if in.OS != "" {
					osType = in.OS
				}
			}
		})
	}
	if template != fsm.DTDiskless && template != "" {
		steps = append(steps, createOn(false))
		if template == fsm.DTDrbd {
			steps = append(steps, createOn(true), e.createSyncStep(o))
		}
		if !o.NoInstall && osType != "" {
			steps = append(steps, Step{Name: "install the OS", Run: func(ctx context.Context, sc *StepContext) (any, error) {
				in, nodes, err := e.instanceOf(o.InstanceName)
				if err != nil {
					return nil, err
				}
				node := nodes[in.PrimaryNode]
				if err := e.usable(node, "installing the OS"); err != nil {
					return nil, err
				}
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpOSInstall, Instance: in, OpID: opID(sc)}); err != nil {
					return nil, err
				}
				sc.Logf("installed OS %s for %s on %s", in.OS, in.Name, node.Name)
				return nil, nil
			}})
		}
	}
	if o.Start == nil || *o.Start {
		steps = append(steps, startStep(e, o.InstanceName, false))
	}
	return steps
}

// createSyncStep waits for the initial resync of a new drbd instance's
// disks (Ganeti's wait_for_sync of OP_INSTANCE_CREATE, true unless
// false), before its OS is installed, as Ganeti does.
func (e *Executor) createSyncStep(o *fsm.OpInstanceCreate) Step {
	return Step{Name: "wait for the disks to sync", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, _, err := e.instanceOf(o.InstanceName)
		if err != nil {
			return nil, err
		}
		if o.WaitForSync != nil && !*o.WaitForSync {
			sc.Logf("not waiting for the resync of %s's disks (wait_for_sync is false)", in.Name)
			return nil, nil
		}
		return nil, e.waitForSync(ctx, sc, in, "create")
	}}
}

// createRecord places the instance (or checks the given nodes, or the
// reservation being committed) and records it. When the allocator places
// it and it fits nowhere as things are, reservations may be moved to
// make room (gnt_move_reservations, alloc.MakeRoom): their moves and the
// new record are one transaction, which the state refuses whole when a
// moved reservation changed, was committed or got locked meanwhile (the
// step then plans again). With dry_run it only answers where the
// instance would go and which reservations would move.
//
// Without nodes, the allocators of the opcode's iallocator (or the
// cluster's default list) are tried in order (allocateWith): the
// built-in as above, an external one asked over Ganeti's protocol, its
// choice then checked as given nodes are.
func (e *Executor) createRecord(ctx context.Context, sc *StepContext, o *fsm.OpInstanceCreate) (any, error) {
	var (
		res    alloc.RoomPlan
		err    error
		in     fsm.Instance
		expect int64
		moves  []fsm.ReservationMove
	)
	opUUID := sc.Job.Ops[sc.OpIndex].UUID
	var baseReq alloc.Request
	e.FSM.Read(func(s *fsm.State, _ uint64) { baseReq = CreateRequest(s, o) })
	plan := func(fixed []string) error {
		res, err, in, expect, moves = alloc.RoomPlan{}, nil, fsm.Instance{}, 0, nil
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			e.createPlan(s, o, opUUID, baseReq, fixed, &res, &err, &in, &expect, &moves)
		})
		return err
	}
	recorded := false
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		ref := o.InstanceName
		if ref == "" {
			ref = opUUID
		}
		ex := s.LookupInstance(ref)
		recorded = ex != nil && ex.UUID == opUUID
	})
	if o.PNode != "" || o.Commit || recorded {
		plan(nil)
	} else {
		_, err = allocateWith(e, ctx, sc, o.IAllocator, baseReq, o.OSType, o.Hypervisor,
			func(nodes []string) (struct{}, error) { return struct{}{}, plan(nodes) })
	}
	if err == nil && expect != -1 && !o.Forthcoming {
		if err = e.createBridges(ctx, sc, o, in, res.Primary); err != nil {
			return nil, err
		}
	}
	return e.createFinish(sc, o, opUUID, res, err, in, expect, moves)
}

// createBridges checks, before the instance is recorded, that the
// bridges of its bridged NICs (the request's, or the reservation's being
// committed) exist on the primary node the placement chose: Ganeti's
// create refuses them in its prerequisites, leaving nothing behind.
func (e *Executor) createBridges(ctx context.Context, sc *StepContext, o *fsm.OpInstanceCreate, in fsm.Instance, primary string) error {
	probe := fsm.Instance{Name: o.InstanceName, NICs: in.NICs}
	if !o.Commit {
		probe.NICs = nil
		for _, n := range o.NICs {
			probe.NICs = append(probe.NICs, fsm.NIC{Mode: n.Mode, Link: n.Link})
		}
	}
	if len(probe.NICs) == 0 || primary == "" {
		return nil
	}
	var node *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { node = s.Nodes[primary] })
	if err := e.usable(node, "checking the bridges of "+o.InstanceName); err != nil {
		return err
	}
	return e.checkBridges(ctx, sc, node, &probe, nil)
}

// CreateRequest is the placement request of an instance creation on the
// state s: its template, memory and vcpus (beparams filled from the
// cluster's), disks, group and hypervisor.
func CreateRequest(s *fsm.State, o *fsm.OpInstanceCreate) alloc.Request {
	mem, vcpus := o.Resources(s.Cluster)
	req := alloc.Request{Name: o.InstanceName, Template: o.Template(), MemoryMiB: mem,
		VCPUs: vcpus, Group: o.GroupName, Hypervisor: fsm.InstanceHypervisor(s.Cluster, &fsm.Instance{Hypervisor: o.Hypervisor})}
	for _, d := range o.Disks {
		req.Disks = append(req.Disks, d.Size)
	}
	return req
}

// createPlan is createRecord's decision on the state s: fixed, when
// set, are the nodes an external allocator chose.
func (e *Executor) createPlan(s *fsm.State, o *fsm.OpInstanceCreate, opUUID string, baseReq alloc.Request, fixed []string,
	res *alloc.RoomPlan, errp *error, in *fsm.Instance, expect *int64, moves *[]fsm.ReservationMove) {
	var err error
	defer func() { *errp = err }()
	{
		req := baseReq
		req.Disks = append([]int64(nil), baseReq.Disks...)
		for _, n := range []string{o.PNode, o.SNode} {
			if n != "" {
				req.Nodes = append(req.Nodes, n)
			}
		}
		if fixed != nil {
			req.Nodes = fixed
		}
		ref := o.InstanceName
		if ref == "" {
			// An unnamed reservation: its UUID is this opcode's (a
			// record of it is this step's, before a leader change).
			ref = opUUID
		}
		existing := s.LookupInstance(ref)
		switch {
		case o.Commit:
			if existing == nil || !existing.Forthcoming {
				err = &fsm.Error{Code: fsm.CodeNoEnt, Field: "instance_name", Msg: fmt.Sprintf("there is no forthcoming instance %s to commit", o.InstanceName)}
				return
			}
			if e := commitMatches(s, o, existing); e != nil {
				err = e
				return
			}
			// The reservation's own resources are left out of the
			// accounting: committing needs no more than it holds.
			*in, *expect = *existing, existing.SerialNo
			if in.OS == "" {
				in.OS = o.OSType
			}
			// A reservation may lack anything but its UUID (seed 001);
			// creating it needs what a create needs.
			var missing []string
			if in.Name == "" {
				missing = append(missing, "instance_name (name the reservation first: rename it by its UUID)")
			}
			if in.OS == "" && in.DiskTemplate != fsm.DTDiskless && !o.NoInstall {
				missing = append(missing, fmt.Sprintf("os_type (disk template %s installs an OS; or pass no_install)", in.DiskTemplate))
			}
			if len(missing) > 0 {
				err = &fsm.Error{Code: fsm.CodeInval, Field: strings.Fields(missing[0])[0],
					Msg: fmt.Sprintf("reservation %s cannot be created: it lacks %s", o.InstanceName, strings.Join(missing, ", "))}
				return
			}
			req.Instance = existing.UUID
			req.Template, req.MemoryMiB, req.VCPUs, req.Disks = existing.DiskTemplate, existing.MemoryMiB, existing.VCPUs, nil
			for _, d := range existing.Disks {
				req.Disks = append(req.Disks, d.SizeMiB)
			}
			if existing.PrimaryNode != "" {
				req.Nodes = append([]string{existing.PrimaryNode}, existing.SecondaryNodes...)
			}
		case existing != nil && existing.UUID != opUUID:
			err = &fsm.Error{Code: fsm.CodeExists, Field: "instance_name", Msg: fmt.Sprintf("instance %s already exists", o.InstanceName)}
			return
		case existing != nil:
			// Recorded by this step before a leader change: done.
			*in, *expect = *existing, -1
			return
		}
		if len(req.Nodes) > 0 || o.Commit || !o.MovesReservations() {
			res.Result, err = alloc.Allocate(s, req, e.allocOptions(s))
			return
		}
		if *res, err = alloc.MakeRoom(s, req, e.allocOptions(s)); err != nil {
			return
		}
		for _, m := range res.Moves {
			r := s.Instances[m.InstanceUUID]
			mv := fsm.ReservationMove{UUID: m.InstanceUUID, ExpectSerial: r.SerialNo, PrimaryNode: m.NewPrimary, SecondaryNodes: []string{}}
			if m.NewSecondary != "" {
				mv.SecondaryNodes = []string{m.NewSecondary}
			}
			*moves = append(*moves, mv)
		}
	}
}

// createFinish records what createPlan decided (or answers the dry run).
func (e *Executor) createFinish(sc *StepContext, o *fsm.OpInstanceCreate, opUUID string, res alloc.RoomPlan, err error,
	in fsm.Instance, expect int64, moves []fsm.ReservationMove) (any, error) {
	if err != nil {
		return nil, err
	}
	if expect == -1 {
		sc.Logf("instance %s was recorded before the leader change", in.Name)
		if o.Forthcoming {
			return in.UUID, nil
		}
		return placementResult(in.PrimaryNode, in.SecondaryNodes), nil
	}
	if d := o.Common().DryRun; d != nil && *d {
		for _, m := range res.Moves {
			sc.Logf("dry run: reservation %s would move from %s to %s to make room", m.Instance, nodePair(m.OldPrimaryName, m.OldSecondaryName), nodePair(m.NewPrimaryName, m.NewSecondaryName))
		}
		sc.Logf("dry run: %s would go to %v", o.InstanceName, res.NodeNames())
		return res, nil
	}
	for k, m := range res.Moves {
		sc.Change(fsm.StepChange{ReservationMove: &moves[k]})
		sc.Logf("moved reservation %s from %s to %s to make room", m.Instance, nodePair(m.OldPrimaryName, m.OldSecondaryName), nodePair(m.NewPrimaryName, m.NewSecondaryName))
	}
	if !o.Commit {
		var (
			mem   int64
			vcpus int
			hv    string
			hvp   map[string]any
			be    map[string]any
			perr  *fsm.Error
		)
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			mem, vcpus = o.Resources(s.Cluster)
			hv, hvp, be, perr = o.InstanceRecordParams(s.Cluster)
		})
		if perr != nil {
			return nil, perr
		}
		in = fsm.Instance{Name: o.InstanceName, UUID: opUUID, DiskTemplate: o.Template(), OS: o.OSType,
			MemoryMiB: mem, VCPUs: vcpus, AdminState: fsm.AdminDown,
			Forthcoming: o.Forthcoming, Hypervisor: hv, HVParams: hvp, BEParams: be, OSParams: o.OSParams,
			Tags: append([]string{}, o.Tags...)}
		if in.UUID == "" {
			in.UUID = derivedUUID(fmt.Sprintf("job%d", sc.Job.ID), fmt.Sprintf("op%d", sc.OpIndex))
		}
		for k, d := range o.Disks {
			mode := d.Mode
			if mode == "" {
				mode = "rw"
			}
			in.Disks = append(in.Disks, fsm.Disk{UUID: derivedUUID(in.UUID, fmt.Sprintf("disk%d", k)), Name: d.Name, SizeMiB: d.Size, Mode: mode})
		}
		for k, n := range o.NICs {
			mac := n.MAC
			if mac == "" || mac == "auto" || mac == "generate" {
				mac = derivedMAC(in.UUID, k)
				if n.Network != "" {
					// A network's MAC prefix replaces Ganeti's default
					// aa:00:00 for its NICs.
					e.FSM.Read(func(s *fsm.State, _ uint64) {
						if nw := s.LookupNetwork(n.Network); nw != nil && nw.MACPrefix != "" {
							mac = nw.MACPrefix + mac[8:]
						}
					})
				}
			}
			in.NICs = append(in.NICs, fsm.NIC{UUID: derivedUUID(in.UUID, fmt.Sprintf("nic%d", k)), Name: n.Name, MAC: mac, IP: n.IP, Link: n.Link, Mode: n.Mode, VLAN: n.VLAN, Network: n.Network})
		}
	}
	in.Forthcoming = o.Forthcoming
	// A reservation's disks are forthcoming too (seed 001); created, they
	// are real. The disks list is copied: the state's record is shared.
	in.Disks = append([]fsm.Disk(nil), in.Disks...)
	for k := range in.Disks {
		in.Disks[k].Forthcoming = o.Forthcoming
	}
	in.PrimaryNode, in.SecondaryNodes = res.Primary, nil
	if res.Secondary != "" {
		in.SecondaryNodes = []string{res.Secondary}
	}
	put(sc, &in, expect)
	if o.Forthcoming {
		// Seed 001: the job of a reservation answers the instance's
		// UUID, not the nodes allocated for it.
		name := in.Name
		if name == "" {
			name = "an unnamed instance"
		}
		sc.Logf("reserved (forthcoming) %s (uuid %s) on %v (group %s)", name, in.UUID, res.NodeNames(), res.GroupName)
		return in.UUID, nil
	}
	sc.Logf("recorded %s on %v (group %s)", in.Name, res.NodeNames(), res.GroupName)
	return res, nil
}

// commitMatches checks what a commit request names against the
// reservation it commits: nodes or an OS that differ from the
// reservation's are refused (the reservation moved, or the request is for
// something else), rather than silently ignored.
func commitMatches(s *fsm.State, o *fsm.OpInstanceCreate, res *fsm.Instance) *fsm.Error {
	for _, c := range []struct{ field, asked, has string }{
		{"pnode", o.PNode, res.PrimaryNode},
		{"snode", o.SNode, firstOr(res.SecondaryNodes)},
	} {
		if c.asked == "" {
			continue
		}
		n := s.LookupNode(c.asked)
		if n == nil || n.UUID != c.has {
			return &fsm.Error{Code: fsm.CodeState, Field: c.field, Msg: fmt.Sprintf("reservation %s is on %s, not on %s: its nodes changed since it was made (look with 'gnt instance info %s')",
				res.Name, nodePair(s.NodeName(res.PrimaryNode), s.NodeName(firstOr(res.SecondaryNodes))), c.asked, res.Name)}
		}
	}
	if o.OSType != "" && res.OS != "" && o.OSType != res.OS {
		return &fsm.Error{Code: fsm.CodeInval, Field: "os_type", Msg: fmt.Sprintf("reservation %s is for OS %s, not %s", res.Name, res.OS, o.OSType)}
	}
	return nil
}

func firstOr(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[0]
}

// nodePair names an instance's nodes as the CLI takes them: PNODE[:SNODE].
func nodePair(primary, secondary string) string {
	if secondary == "" {
		return primary
	}
	return primary + ":" + secondary
}

func placementResult(primary string, secondaries []string) map[string]any {
	return map[string]any{"primary": primary, "secondaries": secondaries}
}

// startStep starts the instance on its primary node and records it as up
// (unless noRemember).
func startStep(e *Executor, ref string, noRemember bool) Step {
	return Step{Name: "start", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(ref)
		if err != nil {
			return nil, err
		}
		if in.Forthcoming {
			return nil, fmt.Errorf("instance %s is forthcoming (a reservation); commit it first", in.Name)
		}
		node := nodes[in.PrimaryNode]
		if err := e.usable(node, "starting "+in.Name); err != nil {
			return nil, err
		}
		e.assembleSecondaries(ctx, sc, in)
		if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpStart, Instance: in}); err != nil {
			return nil, err
		}
		if !noRemember && in.AdminState != fsm.AdminUp {
			expect := in.SerialNo
			in.AdminState = fsm.AdminUp
			put(sc, in, expect)
		}
		sc.Logf("%s runs on %s", in.Name, node.Name)
		return nil, nil
	}}
}

// stopStep stops the instance on its primary node and records it as down
// (unless noRemember). A primary that is offline or dead is skipped when
// skipDown is set (the instance cannot be running there).
func stopStep(e *Executor, ref string, timeout *float64, force, noRemember, skipDown bool) Step {
	return Step{Name: "stop", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(ref)
		if err != nil {
			return nil, err
		}
		if in.Forthcoming {
			return nil, fmt.Errorf("instance %s is forthcoming (a reservation); it does not run", in.Name)
		}
		node := nodes[in.PrimaryNode]
		if err := e.usable(node, "stopping "+in.Name); err != nil {
			if !skipDown {
				return nil, err
			}
			sc.Logf("not stopping %s: %v", in.Name, err)
		} else {
			c := NodeCall{Op: NodeOpStop, Instance: in, Force: force}
			setShutdownTimeout(&c, timeout)
			if _, err := e.call(ctx, sc, node, c); err != nil {
				return nil, err
			}
		}
		if !noRemember && in.AdminState == fsm.AdminUp {
			expect := in.SerialNo
			in.AdminState = fsm.AdminDown
			put(sc, in, expect)
		}
		return nil, nil
	}}
}

func (e *Executor) removeSteps(o *fsm.OpInstanceRemove) []Step {
	return []Step{
		stopStep(e, o.Ref(), o.ShutdownTimeout, true, true, o.IgnoreFailures),
		{Name: "remove from its nodes", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				if u == "" {
					continue // a reservation without nodes
				}
				node := nodes[u]
				if err := e.usable(node, "removing "+in.Name); err != nil {
					if !o.IgnoreFailures {
						return nil, fmt.Errorf("%v (ignore_failures removes the record anyway)", err)
					}
					sc.Logf("leaving %s's data on %s: %v", in.Name, u, err)
					continue
				}
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpRemove, Instance: in}); err != nil {
					if !o.IgnoreFailures {
						return nil, err
					}
					sc.Logf("ignoring: %v", err)
				}
			}
			sc.Change(fsm.StepChange{InstanceRemove: &fsm.InstanceRemove{UUID: in.UUID, ExpectSerial: in.SerialNo}})
			sc.Logf("removed %s", in.Name)
			return nil, nil
		}},
	}
}

// setShutdownTimeout puts an opcode's shutdown timeout (seconds, nil:
// the node's default) into a stop or reboot call; 0 is Ganeti's "no
// grace": the guest is destroyed at once.
func setShutdownTimeout(c *NodeCall, timeout *float64) {
	switch {
	case timeout == nil:
	case *timeout == 0:
		c.Force = true
	default:
		c.Timeout = time.Duration(*timeout * float64(time.Second))
	}
}

func (e *Executor) rebootStep(o *fsm.OpInstanceReboot) Step {
	return Step{Name: "reboot", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		node := nodes[in.PrimaryNode]
		if err := e.usable(node, "rebooting "+in.Name); err != nil {
			return nil, err
		}
		kind := o.RebootType
		if kind == "" {
			kind = fsm.RebootHard
		}
		c := NodeCall{Op: NodeOpReboot, Instance: in, OpID: opID(sc), RebootType: kind}
		setShutdownTimeout(&c, o.ShutdownTimeout)
		// A reboot starts an instance that does not run, and a full one
		// restarts it: the secondary's devices are set up first, as
		// before any start.
		e.assembleSecondaries(ctx, sc, in)
		if _, err := e.call(ctx, sc, node, c); err != nil {
			return nil, err
		}
		if in.AdminState != fsm.AdminUp {
			expect := in.SerialNo
			in.AdminState = fsm.AdminUp
			put(sc, in, expect)
		}
		return nil, nil
	}}
}

// needDRBD refuses failover and migration of an instance without a
// secondary (Ganeti: they need drbd or shared storage).
func needDRBD(in *fsm.Instance, what string) error {
	if in.DiskTemplate != fsm.DTDrbd || len(in.SecondaryNodes) != 1 {
		local := ""
		switch in.DiskTemplate {
		case fsm.DTPlain:
			local = "; its disks are logical volumes local to its node"
		case fsm.DTFile:
			local = "; its disks are files local to its node"
		}
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name",
			Msg: fmt.Sprintf("instance %s has disk template %s: %s needs drbd (a secondary node to move to)%s", in.Name, in.DiskTemplate, what, local)}
	}
	return nil
}

// failoverTarget is where a failover takes the instance: a drbd
// instance's secondary (target_node, if given, must name it), a
// sharedfile instance's target_node (required, not its primary; an
// iallocator's choice is made before, see failoverStepsFor).
func (e *Executor) failoverTarget(in *fsm.Instance, nodes map[string]*fsm.Node, targetNode string) (*fsm.Node, error) {
	if in.DiskTemplate == fsm.DTSharedFile {
		if targetNode == "" {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "target_node",
				Msg: fmt.Sprintf("instance %s has disk template sharedfile: give the node to fail it over to (target_node) or an iallocator to choose it", in.Name)}
		}
		_, _, dst, err := e.sharedFileNodes(in, nodes, targetNode, "fail it over")
		return dst, err
	}
	if err := needDRBD(in, "failover"); err != nil {
		return nil, err
	}
	target := nodes[in.SecondaryNodes[0]]
	if targetNode != "" && target != nil && target.Name != targetNode {
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "target_node", Msg: fmt.Sprintf("a drbd instance fails over to its secondary %s, not %s", target.Name, targetNode)}
	}
	if err := e.runsHypervisorOf(in, target, "target_node"); err != nil {
		return nil, err
	}
	return target, nil
}

// runsHypervisorOf refuses a node that cannot run the instance's
// hypervisor (fsm.PlacementHypervisor, fsm.CheckNodeHypervisor: the
// check of every placement) as the target of a move; field names it.
func (e *Executor) runsHypervisorOf(in *fsm.Instance, n *fsm.Node, field string) error {
	var ferr *fsm.Error
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		ferr = fsm.CheckNodeHypervisor(field, n, in.Name, fsm.PlacementHypervisor(s, in))
	})
	if ferr != nil {
		return ferr
	}
	return nil
}

// sharedFileTarget is the migration target of a sharedfile instance:
// target_node, which must be given, usable and not its primary.
func (e *Executor) sharedFileTarget(in *fsm.Instance, nodes map[string]*fsm.Node, targetNode string) (*fsm.Instance, *fsm.Node, *fsm.Node, error) {
	in, src, dst, err := e.sharedFileNodes(in, nodes, targetNode, "migrate it")
	if err != nil {
		return nil, nil, nil, err
	}
	if err := e.usable(dst, "migrating "+in.Name); err != nil {
		return nil, nil, nil, err
	}
	if err := e.usable(src, "migrating "+in.Name); err != nil {
		return nil, nil, nil, fmt.Errorf("%v; use failover", err)
	}
	return in, src, dst, nil
}

// sharedFileNodes looks up a sharedfile instance's primary and
// target_node, which must be given and differ.
func (e *Executor) sharedFileNodes(in *fsm.Instance, nodes map[string]*fsm.Node, targetNode, what string) (*fsm.Instance, *fsm.Node, *fsm.Node, error) {
	if targetNode == "" {
		return nil, nil, nil, &fsm.Error{Code: fsm.CodeInval, Field: "target_node",
			Msg: fmt.Sprintf("instance %s has disk template sharedfile: give the node to %s to (target_node)", in.Name, what)}
	}
	var dst *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if n := s.LookupNode(targetNode); n != nil {
			c := *n
			dst = &c
		}
	})
	if dst == nil {
		return nil, nil, nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "target_node", Msg: fmt.Sprintf("node %q does not exist", targetNode)}
	}
	if err := e.runsHypervisorOf(in, dst, "target_node"); err != nil {
		return nil, nil, nil, err
	}
	src := nodes[in.PrimaryNode]
	if src != nil && src.UUID == dst.UUID {
		return nil, nil, nil, &fsm.Error{Code: fsm.CodeInval, Field: "target_node", Msg: fmt.Sprintf("instance %s already has %s as its primary node", in.Name, dst.Name)}
	}
	return in, src, dst, nil
}

// swap records the instance on its secondary: primary and secondary
// trade places.
func swap(sc *StepContext, in *fsm.Instance) {
	expect := in.SerialNo
	in.PrimaryNode, in.SecondaryNodes = in.SecondaryNodes[0], []string{in.PrimaryNode}
	put(sc, in, expect)
}

// notDrained refuses a drained node as the target of a failover or a
// migration (Ganeti's CheckNodeNotDrained).
func notDrained(n *fsm.Node) error {
	if n != nil && n.Drained {
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("Can't use drained node %s", n.Name)}
	}
	return nil
}

// failoverChoice is the target node the first step of a failover with
// an iallocator and no target_node chose and recorded.
type failoverChoice struct {
	Target     string `json:"target"` // node UUID
	TargetName string `json:"target_name"`
}

// failoverStepsFor are OP_INSTANCE_FAILOVER's steps. With an iallocator
// and no target_node (harep's failover of a sharedfile instance, as
// Ganeti's: shared storage fails over to the node an allocator picks) a
// first step chooses the target and records it, so a leader that resumes
// the opcode fails over to the same node; a drbd instance's choice is
// its secondary.
func (e *Executor) failoverStepsFor(o *fsm.OpInstanceFailover, st *fsm.OpState) []Step {
	if o.TargetNode != "" || o.IAllocator == "" {
		return e.failoverSteps(o)
	}
	choose := Step{Name: "choose the target node", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		return e.chooseFailoverTarget(ctx, sc, o)
	}}
	var c failoverChoice
	if ok, err := recordedPlan(st, &c); err != nil || !ok {
		return []Step{choose, {Name: "fail over to the node chosen", Run: func(context.Context, *StepContext) (any, error) {
			return nil, fmt.Errorf("the target node was not recorded")
		}}}
	}
	fo := *o
	fo.TargetNode = c.TargetName
	var renamed string
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if n := s.Nodes[c.Target]; n != nil && n.Name != c.TargetName {
			renamed = n.Name
		}
	})
	if renamed != "" {
		fo.TargetNode = renamed
	}
	return append([]Step{choose}, e.failoverSteps(&fo)...)
}

// chooseFailoverTarget is the node a failover with an iallocator takes
// the instance to: a drbd instance's secondary, else the node the
// allocators of o.IAllocator place it on in its primary's group, never
// its primary.
func (e *Executor) chooseFailoverTarget(ctx context.Context, sc *StepContext, o *fsm.OpInstanceFailover) (failoverChoice, error) {
	in, nodes, err := e.instanceOf(o.Ref())
	if err != nil {
		return failoverChoice{}, err
	}
	if in.DiskTemplate != fsm.DTSharedFile {
		target, err := e.failoverTarget(in, nodes, "")
		if err != nil {
			return failoverChoice{}, err
		}
		sc.Logf("%s fails over to its secondary %s (iallocator %s not asked)", in.Name, target.Name, o.IAllocator)
		return failoverChoice{Target: target.UUID, TargetName: target.Name}, nil
	}
	req := alloc.Request{Name: in.Name, Instance: in.UUID, Template: in.DiskTemplate, MemoryMiB: in.MemoryMiB,
		VCPUs: in.VCPUs, Disks: diskSizes(in), Exclude: []string{in.PrimaryNode}}
	place := func(fixed []string) (alloc.Result, error) {
		var res alloc.Result
		var err error
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			r := req
			r.Hypervisor = fsm.PlacementHypervisor(s, in)
			if p := s.Nodes[in.PrimaryNode]; p != nil {
				r.Group = p.Group // Ganeti fails over within the primary's group
			}
			if len(fixed) > 0 {
				if len(fixed) != 1 {
					err = fmt.Errorf("it names %d nodes; a sharedfile instance has one", len(fixed))
					return
				}
				if n := s.LookupNode(fixed[0]); n != nil && n.UUID == in.PrimaryNode {
					err = fmt.Errorf("%s is the instance's primary node", n.Name)
					return
				}
			}
			r.Nodes = fixed
			res, err = alloc.Allocate(s, r, e.allocOptions(s))
		})
		return res, err
	}
	res, err := allocateWith(e, ctx, sc, o.IAllocator, req, in.OS, in.Hypervisor, place)
	if err != nil {
		return failoverChoice{}, fmt.Errorf("cannot choose a node to fail %s over to using iallocator '%s': %w", in.Name, o.IAllocator, err)
	}
	sc.Logf("Selected node %s to fail %s over to via iallocator %s", res.PrimaryName, in.Name, o.IAllocator)
	return failoverChoice{Target: res.Primary, TargetName: res.PrimaryName}, nil
}

func (e *Executor) failoverSteps(o *fsm.OpInstanceFailover) []Step {
	return []Step{
		{Name: "stop on the primary", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			target, err := e.failoverTarget(in, nodes, o.TargetNode)
			if err != nil {
				return nil, err
			}
			if err := e.usable(target, "failing over "+in.Name); err != nil {
				return nil, err
			}
			if err := notDrained(target); err != nil {
				return nil, err
			}
			if err := e.checkBridges(ctx, sc, target, in, nil); err != nil {
				return nil, err
			}
			primary := nodes[in.PrimaryNode]
			if err := e.checkTargetDisks(ctx, sc, in, target, "failover", o.IgnoreConsistency || primary != nil && primary.Offline); err != nil {
				return nil, err
			}
			return nil, e.stopForFailover(ctx, sc, in, primary, o.IgnoreConsistency, o.ShutdownTimeout)
		}},
		{Name: "switch to the secondary", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			target, err := e.failoverTarget(in, nodes, o.TargetNode)
			if err != nil {
				return nil, err
			}
			sc.Logf("%s: primary %s -> %s", in.Name, nodeName(nodes, in.PrimaryNode), target.Name)
			if in.DiskTemplate == fsm.DTSharedFile {
				expect := in.SerialNo
				in.PrimaryNode = target.UUID
				put(sc, in, expect)
				return nil, nil
			}
			swap(sc, in)
			return nil, nil
		}},
		{Name: "start on the new primary", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if in.AdminState != fsm.AdminUp {
				sc.Logf("%s is down by configuration: not starting it", in.Name)
				return nil, nil
			}
			node := nodes[in.PrimaryNode]
			if err := e.usable(node, "starting "+in.Name); err != nil {
				return nil, err
			}
			e.assembleSecondaries(ctx, sc, in)
			_, err = e.call(ctx, sc, node, NodeCall{Op: NodeOpStart, Instance: in})
			return nil, err
		}},
	}
}

// stopForFailover stops the instance on its primary before a failover,
// as Ganeti's _ExecFailover: a primary marked offline is not asked (the
// call to an offline node fails at once in Ganeti, "Node is marked
// offline", and an offline primary lets the failover go on: offline is the
// statement that the node is down, made by an operator or by fencing). A
// primary that is only dead in gossip is not offline: the instance may
// still run there (a partition), so the failover needs ignore_consistency,
// as a failed shutdown does in Ganeti. gnt does not call a dead node (it
// would only wait for the call to time out); with ignore_consistency a
// shutdown that fails is a warning.
func (e *Executor) stopForFailover(ctx context.Context, sc *StepContext, in *fsm.Instance, node *fsm.Node, ignoreConsistency bool, timeout *float64) error {
	proceed := func(why string) {
		name := in.PrimaryNode
		if node != nil {
			name = node.Name
		}
		sc.Logf("WARNING: Could not shutdown instance %s on node %s, proceeding anyway; please make sure node %s is down; error details: %s",
			in.Name, name, name, why)
	}
	switch {
	case node == nil:
		return fmt.Errorf("stopping %s: the primary node no longer exists", in.Name)
	case node.Offline:
		proceed("Node is marked offline")
		return nil
	case e.Dead != nil && e.Dead(node):
		if !ignoreConsistency {
			return fmt.Errorf("stopping %s: node %s is dead but not marked offline, so the instance may still run there; fence the node (power it off and mark it offline) or fail over anyway with ignore_consistency", in.Name, node.Name)
		}
		proceed(fmt.Sprintf("node %s is dead (not called)", node.Name))
		return nil
	}
	c := NodeCall{Op: NodeOpStop, Instance: in}
	setShutdownTimeout(&c, timeout)
	if _, err := e.call(ctx, sc, node, c); err != nil {
		if !ignoreConsistency {
			return fmt.Errorf("could not shut down instance %s on node %s (fail over anyway with ignore_consistency): %w", in.Name, node.Name, err)
		}
		proceed(err.Error())
	}
	return nil
}

func nodeName(nodes map[string]*fsm.Node, u string) string {
	if n := nodes[u]; n != nil {
		return n.Name
	}
	return u
}

// migrateChoice is what the first step of OP_INSTANCE_MIGRATE with
// allow_failover decides and records: migrate, or fail over instead.
type migrateChoice struct {
	Failover bool   `json:"failover"`
	Why      string `json:"why,omitempty"`
}

// alwaysFailover reports whether an instance's filled beparams say
// always_failover.
func (e *Executor) alwaysFailover(ref string) bool {
	af := false
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if in := s.LookupInstance(ref); in != nil {
			af, _ = fsm.FilledBE(s.Cluster, in)["always_failover"].(bool)
		}
	})
	return af
}

// migrateSteps are OP_INSTANCE_MIGRATE's steps. With allow_failover (and
// not cleanup) a first step decides, as Ganeti's TLMigrateInstance does,
// whether the instance can be migrated or is failed over instead: when it
// is not marked up, or when its primary cannot tell that it runs there
// (Ganeti's instance_migratable call fails: the primary is offline, dead
// or the instance is not running). The failover is Ganeti's: no
// ignore_consistency, the default shutdown timeout, so an offline primary
// lets it go on and a primary that is only dead stops it. The choice is
// recorded, and the later steps are built from it, so a leader that
// resumes the opcode carries on with the same one.
func (e *Executor) migrateSteps(o *fsm.OpInstanceMigrate, st *fsm.OpState) []Step {
	if o.Cleanup {
		return []Step{e.migrateCleanupStep(o)}
	}
	if !o.AllowFailover && !e.alwaysFailover(o.Ref()) {
		return e.migrationSteps(o)
	}
	decide := Step{Name: "migrate or fail over", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if err := needDRBD(in, "migration"); err != nil {
			return nil, err
		}
		if e.alwaysFailover(o.Ref()) {
			// Ganeti's beparam always_failover: a migration of this
			// instance is a failover.
			sc.Logf("instance %s is configured to always fail over; failing over instead of migrating", in.Name)
			return migrateChoice{Failover: true, Why: "always_failover"}, nil
		}
		if !o.AllowFailover {
			return migrateChoice{}, nil
		}
		c := e.migrateOrFailover(ctx, sc, in, nodes[in.PrimaryNode])
		if c.Failover {
			sc.Logf("%s, fallback to failover", c.Why)
		}
		return c, nil
	}}
	var c migrateChoice
	if ok, err := recordedPlan(st, &c); err != nil || !ok {
		return []Step{decide, {Name: "migrate or fail over as decided", Run: func(context.Context, *StepContext) (any, error) {
			return nil, fmt.Errorf("the choice between migration and failover was not recorded")
		}}}
	}
	if c.Failover {
		return append([]Step{decide}, e.failoverSteps(&fsm.OpInstanceFailover{OpCommon: o.OpCommon, OpInstanceRef: o.OpInstanceRef})...)
	}
	return append([]Step{decide}, e.migrationSteps(o)...)
}

// migrateCleanupStep is OP_INSTANCE_MIGRATE with cleanup, Ganeti's
// _ExecCleanup after a failed migration: it asks both nodes where the
// instance runs and makes the configuration say so. Both nodes must
// answer (Ganeti: "Can't contact node"); gnt's agents resynchronise the
// disks themselves, so Ganeti's DRBD reconfiguration has no counterpart.
// A migration the secondary still holds is ended first: one it is
// prepared for (incoming), or one it received while the primary does not
// run the instance, is aborted on both nodes (the primary first) or
// finished there (the secondary then holds the only copy: it resumes
// there and becomes the primary).
func (e *Executor) migrateCleanupStep(o *fsm.OpInstanceMigrate) Step {
	return Step{Name: "clean up after a failed migration", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if err := needDRBD(in, "migration"); err != nil {
			return nil, err
		}
		var replies [2]NodeReply
		var pair [2]*fsm.Node
		for k, u := range []string{in.PrimaryNode, in.SecondaryNodes[0]} {
			node := nodes[u]
			if err := e.usable(node, "cleaning up the migration of "+in.Name); err != nil {
				return nil, fmt.Errorf("cannot contact node %s: %w", nodeName(nodes, u), err)
			}
			r, err := e.statusOf(ctx, sc, node, in)
			if err != nil {
				return nil, fmt.Errorf("cannot contact node %s: %w", node.Name, err)
			}
			replies[k], pair[k] = r, node
		}
		states := [2]string{replies[0].State, replies[1].State}
		src, dst := pair[0].Name, pair[1].Name
		onSrc := states[0] == "running"
		if left := states[1]; left == "incoming" || left == "received" {
			m := replies[1].Migration
			if m == nil || m.ID == "" {
				return nil, fmt.Errorf("%s is %s on %s but the node names no migration: cannot end it", in.Name, left, dst)
			}
			if left == "received" && !onSrc {
				sc.Logf("* instance received by the secondary node (%s) in migration %s and not running on %s: finishing it there", dst, m.ID, src)
				if _, err := e.call(ctx, sc, pair[1], NodeCall{Op: NodeOpMigrateFinish, Instance: in, Migration: m.ID}); err != nil {
					return nil, err
				}
				states[1] = "running"
			} else {
				sc.Logf("* the secondary node (%s) is %s for migration %s: aborting it", dst, left, m.ID)
				for _, node := range pair {
					if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpMigrateAbort, Instance: in, Migration: m.ID}); err != nil {
						return nil, err
					}
				}
				states[1] = "stopped"
			}
		}
		onDst := states[1] == "running"
		switch {
		case onSrc && onDst:
			return nil, fmt.Errorf("instance %s seems to be running on two nodes (%s and %s), or the hypervisor is confused; you will have to ensure manually that it runs only on one and restart this operation", in.Name, src, dst)
		case onDst:
			sc.Logf("* instance running on secondary node (%s), updating config", dst)
			swap(sc, in)
		case onSrc:
			sc.Logf("* instance confirmed to be running on its primary node (%s)", src)
		default:
			return nil, fmt.Errorf("instance %s does not seem to be running at all (%s on %s, %s on %s); in this case it's safer to repair by shutting it down to ensure disk shutdown, and then restarting it",
				in.Name, stateOrNone(states[0]), src, stateOrNone(states[1]), dst)
		}
		return nil, nil
	}}
}

// migrateOrFailover is Ganeti's fallback rule for a migration that may
// fail over instead.
func (e *Executor) migrateOrFailover(ctx context.Context, sc *StepContext, in *fsm.Instance, primary *fsm.Node) migrateChoice {
	if in.AdminState != fsm.AdminUp {
		return migrateChoice{true, "Instance is marked down or offline"}
	}
	if err := e.usable(primary, "migrating "+in.Name); err != nil {
		return migrateChoice{true, fmt.Sprintf("Can't migrate (%v)", err)}
	}
	r, err := e.call(ctx, sc, primary, NodeCall{Op: NodeOpStatus, Instance: in})
	switch {
	case err != nil:
		return migrateChoice{true, fmt.Sprintf("Can't migrate, instance offline (%v)", err)}
	case r.State != "running":
		return migrateChoice{true, fmt.Sprintf("Can't migrate, instance offline (%s on %s)", stateOrNone(r.State), primary.Name)}
	}
	return migrateChoice{}
}

func stateOrNone(s string) string {
	if s == "" {
		return "no record"
	}
	return s
}

// migrationSteps live-migrate a drbd instance to its secondary, or a
// sharedfile instance (its disks on every node) to target_node.
func (e *Executor) migrationSteps(o *fsm.OpInstanceMigrate) []Step {
	// target returns the instance, its primary and the target (a drbd
	// instance's secondary, a sharedfile instance's target_node),
	// checked.
	target := func(sc *StepContext) (*fsm.Instance, *fsm.Node, *fsm.Node, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, nil, nil, err
		}
		if in.DiskTemplate == fsm.DTSharedFile {
			return e.sharedFileTarget(in, nodes, o.TargetNode)
		}
		if err := needDRBD(in, "migration"); err != nil {
			return nil, nil, nil, err
		}
		src, dst := nodes[in.PrimaryNode], nodes[in.SecondaryNodes[0]]
		if err := e.usable(dst, "migrating "+in.Name); err != nil {
			return nil, nil, nil, err
		}
		if err := e.runsHypervisorOf(in, dst, "instance_name"); err != nil {
			return nil, nil, nil, err
		}
		if err := e.usable(src, "migrating "+in.Name); err != nil {
			return nil, nil, nil, fmt.Errorf("%v; use failover", err)
		}
		return in, src, dst, nil
	}
	return []Step{
		{Name: "prepare the target", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, src, dst, err := target(sc)
			if err != nil {
				return nil, err
			}
			if in.AdminState != fsm.AdminUp {
				return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is not running; use failover", in.Name)}
			}
			// Checked before the migration starts only: a target
			// drained later must still be able to finish it.
			if err := notDrained(dst); err != nil {
				return nil, err
			}
			if err := e.checkBridges(ctx, sc, dst, in, nil); err != nil {
				return nil, err
			}
			if err := e.readyForMigration(ctx, sc, in, dst); err != nil {
				return nil, err
			}
			return nil, e.prepareMigration(ctx, sc, in, src, dst, opID(sc))
		}},
		{Name: "move the running instance", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, src, dst, err := target(sc)
			if err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, src, NodeCall{Op: NodeOpMigrateSend, Instance: in, Migration: opID(sc), PeerNode: dst.Name, Peer: dst.Addrs.Agent}); err != nil {
				return nil, e.abortMigration(ctx, sc, in, src, dst, opID(sc), err)
			}
			return nil, nil
		}},
		{Name: "resume on the target", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, src, dst, err := target(sc)
			if err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpMigrateFinish, Instance: in, Migration: opID(sc)}); err != nil {
				return nil, err
			}
			sc.Logf("%s migrated from %s to %s", in.Name, src.Name, dst.Name)
			if in.DiskTemplate == fsm.DTSharedFile {
				expect := in.SerialNo
				in.PrimaryNode = dst.UUID
				put(sc, in, expect)
				return nil, nil
			}
			swap(sc, in)
			return nil, nil
		}},
	}
}

// prepareMigration has the target prepare migration id. When the
// prepare fails, or its answer is lost, the target may hold part of it
// (an incoming qemu, a promoted drbd device: a driver undoes those itself
// when the prepare fails, not when only its answer was lost), or, when
// the step runs again after a leader change, the copy the source already
// sent: the migration is aborted as a failed send is (abortMigration),
// the source first, which refuses once it has sent the instance, and
// then the target, so that no second primary is left behind and the
// only copy is never discarded.
func (e *Executor) prepareMigration(ctx context.Context, sc *StepContext, in *fsm.Instance, src, dst *fsm.Node, id string) error {
	_, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpMigratePrepare, Instance: in, Migration: id, PeerNode: src.Name})
	if err == nil {
		return nil
	}
	return e.abortMigration(ctx, sc, in, src, dst, id, err)
}

// abortMigration gives a live migration whose send failed up on both
// nodes, the source first as the Driver contract asks (agent/driver.go
// MigrateAbort): the source keeps the instance running, the target
// discards what it prepared or received and undoes its drbd devices'
// roles, so that exactly one side is primary again. When the source
// refuses (it sent the instance: the target holds the only copy) the
// target is left as it is for migrate --cleanup to finish. The job's log
// says what was done; failed, the send's error, is returned.
func (e *Executor) abortMigration(ctx context.Context, sc *StepContext, in *fsm.Instance, src, dst *fsm.Node, id string, failed error) error {
	sc.Logf("the migration of %s from %s to %s failed (%v): aborting it", in.Name, src.Name, dst.Name, failed)
	if _, err := e.call(ctx, sc, src, NodeCall{Op: NodeOpMigrateAbort, Instance: in, Migration: id}); err != nil {
		sc.Logf("WARNING: the source %s did not abort the migration (%v); the target %s is left as it is: run migrate --cleanup", src.Name, err, dst.Name)
		return failed
	}
	if _, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpMigrateAbort, Instance: in, Migration: id}); err != nil {
		sc.Logf("WARNING: the target %s did not abort the migration (%v): run migrate --cleanup", dst.Name, err)
		return failed
	}
	sc.Logf("the migration of %s is aborted on %s and %s; it stays on %s", in.Name, src.Name, dst.Name, src.Name)
	return failed
}
