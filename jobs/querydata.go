package jobs

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// queryDataSteps is OP_INSTANCE_QUERY_DATA (Ganeti's LUInstanceQueryData):
// one step that reads the instances from the configuration and, unless
// static, asks each one's primary node's agent for its state. Its result
// maps each instance's name to Ganeti's description of it; a dry run's
// names the agents it would ask.
func (e *Executor) queryDataSteps(o *fsm.OpInstanceQueryData) []Step {
	return []Step{{Name: "query instance data", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		var (
			insts  []fsm.Instance
			nodes  = map[string]fsm.Node{}
			groups = map[string]string{}
			err    error
		)
		e.FSM.Read(func(s *fsm.State, _ uint64) {
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
			var run any // null when static or the primary is offline
			if !o.Static && !in.Forthcoming {
				p, ok := nodes[in.PrimaryNode]
				switch {
				case !ok:
					return nil, fmt.Errorf("instance %s: its primary node %s is not in the configuration", in.Name, in.PrimaryNode)
				case p.Offline:
					sc.Logf("primary node %s of instance %s is offline; its run state is unknown", p.Name, in.Name)
				default:
					if err := e.usable(&p, "querying instance "+in.Name); err != nil {
						return nil, err
					}
					r, err := e.call(ctx, sc, &p, NodeCall{Op: NodeOpStatus, Instance: in})
					var ne *NodeCallError
					if err != nil && !(errors.As(err, &ne) && ne.Code == "not_found") {
						return nil, fmt.Errorf("querying instance %s on node %s: %w", in.Name, p.Name, err)
					}
					run = "down"
					if r.State == "running" {
						run = "up"
					}
				}
			}
			out[in.Name] = queryData(in, run, nodes, groups)
		}
		if sc.DryRun() {
			// No agent was asked: the result is what would be asked.
			return nil, nil
		}
		return out, nil
	}}}
}

// queryData is Ganeti's description of one instance (LUInstanceQueryData's
// result), with what gnt's configuration holds: gnt has no hypervisor
// parameters, network ports or OS parameters, so those are empty.
func queryData(in *fsm.Instance, run any, nodes map[string]fsm.Node, groups map[string]string) map[string]any {
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
		disks[k] = map[string]any{
			"iv_name": fmt.Sprintf("disk/%d", k), "dev_type": in.DiskTemplate, "logical_id": nil, "drbd_info": nil,
			"pstatus": nil, "sstatus": nil, "children": []any{}, "mode": d.Mode, "size": d.SizeMiB,
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
	be := map[string]any{"maxmem": in.MemoryMiB, "minmem": in.MemoryMiB, "memory": in.MemoryMiB, "vcpus": in.VCPUs}
	return map[string]any{
		"name": in.Name, "uuid": in.UUID, "config_state": in.AdminState, "run_state": run,
		"pnode": name(in.PrimaryNode), "pnode_group_uuid": groupOf(in.PrimaryNode), "pnode_group_name": groups[groupOf(in.PrimaryNode)],
		"snodes": snodes, "snodes_group_uuids": sgroups, "snodes_group_names": sgroupNames,
		"os": in.OS, "nics": nics, "disk_template": in.DiskTemplate, "disks": disks, "disks_active": in.AdminState == "up",
		"hypervisor": nil, "network_port": in.NetworkPortField(),
		"hv_instance": map[string]any{}, "hv_actual": map[string]any{},
		"be_instance": be, "be_actual": be,
		"os_instance": map[string]any{}, "os_actual": map[string]any{},
		"serial_no": in.SerialNo, "ctime": in.CTime, "mtime": in.MTime,
	}
}

func strOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}
