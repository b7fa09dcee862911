package jobs

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// queryDataSteps is OP_INSTANCE_QUERY_DATA (Ganeti's LUInstanceQueryData):
// one step that reads the instances from the configuration and, unless
// static, asks each one's primary node's agent for its state and its
// primary and secondary nodes' agents which of its disks they hold (each
// disk's pstatus and sstatus). Its result maps each instance's name to
// Ganeti's description of it; a dry run's names the agents it would ask.
func (e *Executor) queryDataSteps(o *fsm.OpInstanceQueryData) []Step {
	return []Step{{Name: "query instance data", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		var (
			insts   []fsm.Instance
			nodes   = map[string]fsm.Node{}
			groups  = map[string]string{}
			cluster *fsm.Cluster
			err     error
		)
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			cluster = s.Cluster
			for u, n := range s.Nodes {
				nodes[u] = *n
			}
			for u, g := range s.Groups {
				groups[u] = g.Name
			}
			if len(o.Instances) == 0 {
				for _, i := range s.Instances {
					insts = append(insts, *i)
				}
				sort.Slice(insts, func(a, b int) bool { return insts[a].Name < insts[b].Name })
				return
			}
			for _, ref := range o.Instances {
				i := s.LookupInstance(ref)
				if i == nil {
					err = &fsm.Error{Code: fsm.CodeNoEnt, Field: "instances", Msg: fmt.Sprintf("instance %s does not exist", ref)}
					return
				}
				insts = append(insts, *i)
			}
		})
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, len(insts))
		for k := range insts {
			in := &insts[k]
			var (
				run          any        // null when static or the primary is offline
				pdisk, sdisk *NodeReply // nil: the node was not asked
			)
			if !o.Static && !in.Forthcoming {
				p, ok := nodes[in.PrimaryNode]
				if !ok {
					return nil, fmt.Errorf("instance %s: its primary node %s is not in the configuration", in.Name, in.PrimaryNode)
				}
				r, err := e.queryNode(ctx, sc, in, &p)
				if err != nil {
					return nil, err
				}
				if r != nil {
					pdisk, run = r, "down"
					if r.State == "running" {
						run = "up"
					}
				}
				if len(in.SecondaryNodes) > 0 {
					if sn, ok := nodes[in.SecondaryNodes[0]]; ok {
						if sdisk, err = e.queryNode(ctx, sc, in, &sn); err != nil {
							return nil, err
						}
					}
				}
			}
			out[in.Name] = queryData(cluster, in, run, pdisk, sdisk, nodes, groups)
		}
		if sc.DryRun() {
			// No agent was asked: the result is what would be asked.
			return nil, nil
		}
		return out, nil
	}}}
}

// queryNode asks a node's agent for an instance's state there (which of
// its disks it holds, and where). It answers nil, logging why, when the
// node is offline; an agent with no record of the instance gives an
// empty reply (no disks).
func (e *Executor) queryNode(ctx context.Context, sc *StepContext, in *fsm.Instance, n *fsm.Node) (*NodeReply, error) {
	if n.Offline {
		sc.Logf("node %s of instance %s is offline; its state there is unknown", n.Name, in.Name)
		return nil, nil
	}
	if err := e.usable(n, "querying instance "+in.Name); err != nil {
		return nil, err
	}
	r, err := e.statusOf(ctx, sc, n, in)
	if err != nil {
		return nil, fmt.Errorf("querying instance %s on node %s: %w", in.Name, n.Name, err)
	}
	return &r, nil
}

// Ganeti's local disk status values (ldisk_status: LDS_OKAY, LDS_SYNC,
// LDS_UNKNOWN, LDS_FAULTY) and the block major of drbd devices.
const (
	ldsOkay    = 1
	ldsSync    = 2
	ldsUnknown = 3
	ldsFaulty  = 4
	drbdMajor  = 147
)

// diskStatus is Ganeti's block device status of one disk on one node
// (dev_path, major, minor, sync_percent, estimated_time, is_degraded,
// ldisk_status), or null when the node was not asked or does not hold
// the disk. gnt's disks are files and logical volumes, neither synced
// nor degraded, whose device numbers are not reported; a drbd device the
// node reports has its status (drbdStatus).
func diskStatus(r *NodeReply, disk string) any {
	if r == nil || !slices.Contains(r.Disks, disk) {
		return nil
	}
	if dev, ok := r.DRBD[disk]; ok {
		return drbdStatus(dev)
	}
	var path any
	if p := r.DiskPaths[disk]; p != "" {
		path = p
	}
	return []any{path, nil, nil, nil, nil, false, ldsOkay}
}

// drbdStatus is Ganeti's block device status of a drbd device as its
// node reports it: /dev/drbd<minor>, major 147, the resync's progress
// and estimated time (null when none is under way), degraded unless
// connected with both sides up to date, and the local disk's status as
// Ganeti's DRBD8Dev.GetSyncStatus rates it (up to date: okay; diskless:
// faulty; the target of a resync: sync; unknown otherwise).
func drbdStatus(dev fsm.DRBDDevice) []any {
	var pct, eta any
	if dev.SyncPercent != nil {
		pct = *dev.SyncPercent
	}
	if dev.EstimatedSeconds != nil {
		eta = *dev.EstimatedSeconds
	}
	lds := ldsUnknown
	switch {
	case dev.LocalOK():
		lds = ldsOkay
	case dev.Disk == "Diskless":
		lds = ldsFaulty
	case dev.SyncPercent != nil:
		lds = ldsSync
	}
	return []any{fmt.Sprintf("/dev/drbd%d", dev.Minor), drbdMajor, dev.Minor, pct, eta, !dev.InSync(), lds}
}

// drbdIDs are a drbd disk's logical_id as Ganeti's LUInstanceQueryData
// shows it, (first node, second node, port, first minor, second minor,
// secret), the nodes as allocated and the secret hidden (null), and its
// drbd_info (primary and secondary node names and minors, port); null
// both for a disk without a logical id.
func drbdIDs(in *fsm.Instance, d *fsm.Disk, name func(string) string) (logical, info any) {
	id := d.DRBD
	if id == nil || len(id.Ends) != 2 {
		return nil, nil
	}
	p, s := id.DRBDEndOf(in.PrimaryNode), &id.Ends[0]
	if p == nil {
		return nil, nil
	}
	if s == p {
		s = &id.Ends[1]
	}
	logical = []any{id.Ends[0].Node, id.Ends[1].Node, id.Port, id.Ends[0].Minor, id.Ends[1].Minor, nil}
	info = map[string]any{"primary_node": name(p.Node), "primary_minor": p.Minor,
		"secondary_node": name(s.Node), "secondary_minor": s.Minor, "port": id.Port}
	return logical, info
}

// queryData is Ganeti's description of one instance (LUInstanceQueryData's
// result), with what gnt's configuration holds and what the primary (p)
// and secondary (s) nodes' agents said of its disks (nil: not asked).
func queryData(c *fsm.Cluster, in *fsm.Instance, run any, p, s *NodeReply, nodes map[string]fsm.Node, groups map[string]string) map[string]any {
	name := func(u string) string {
		if n, ok := nodes[u]; ok {
			return n.Name
		}
		return u
	}
	groupOf := func(u string) string { return nodes[u].Group }
	snodes, sgroups, sgroupNames := []string{}, []string{}, []string{}
	for _, u := range in.SecondaryNodes {
		snodes = append(snodes, name(u))
		sgroups = append(sgroups, groupOf(u))
		sgroupNames = append(sgroupNames, groups[groupOf(u)])
	}
	disks := make([]map[string]any, len(in.Disks))
	for k, d := range in.Disks {
		var dname any
		if d.Name != "" {
			dname = d.Name
		}
		logical, info := drbdIDs(in, &d, name)
		disks[k] = map[string]any{
			"iv_name": fmt.Sprintf("disk/%d", k), "dev_type": in.DiskTemplate, "logical_id": logical, "drbd_info": info,
			"pstatus": diskStatus(p, d.UUID), "sstatus": diskStatus(s, d.UUID), "children": []any{}, "mode": d.Mode, "size": d.SizeMiB,
			"spindles": nil, "name": dname, "uuid": d.UUID,
		}
		if d.Forthcoming {
			disks[k]["forthcoming"] = true
		}
	}
	nics := make([][]any, len(in.NICs))
	for k, n := range in.NICs {
		nics[k] = []any{strOrNil(n.IP), n.MAC, n.Mode, n.Link, "", strOrNil(n.Network), nil}
	}
	// The instance's own backend parameters include the memory and vcpus
	// it records (gnt keeps them as fields, Ganeti as beparams).
	beOwn := map[string]any{}
	for k, v := range in.BEParams {
		beOwn[k] = v
	}
	beOwn["maxmem"], beOwn["memory"], beOwn["vcpus"] = in.MemoryMiB, in.MemoryMiB, in.VCPUs
	// Without one of its own or a cluster default, an instance runs under
	// its primary node's driver.
	hv := fsm.InstanceHypervisor(c, in)
	if hv == "" {
		hv = nodes[in.PrimaryNode].Hypervisor
	}
	return map[string]any{
		"name": in.Name, "uuid": in.UUID, "config_state": in.AdminState, "run_state": run,
		"pnode": name(in.PrimaryNode), "pnode_group_uuid": groupOf(in.PrimaryNode), "pnode_group_name": groups[groupOf(in.PrimaryNode)],
		"snodes": snodes, "snodes_group_uuids": sgroups, "snodes_group_names": sgroupNames,
		"os": in.OS, "nics": nics, "disk_template": in.DiskTemplate, "disks": disks, "disks_active": in.AdminState == "up",
		"hypervisor": strOrNil(hv), "network_port": in.NetworkPortField(),
		"hv_instance": orEmpty(in.HVParams), "hv_actual": fsm.PublicHVParams(fsm.FillHVParams(c, in)),
		"be_instance": beOwn, "be_actual": fsm.FilledBE(c, in),
		"os_instance": orEmpty(in.OSParams), "os_actual": fsm.FilledOSParams(c, in),
		"serial_no": in.SerialNo, "ctime": in.CTime, "mtime": in.MTime,
	}
}

// orEmpty gives m, or an empty map for nil (JSON {} rather than null).
func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func strOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}
