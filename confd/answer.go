package confd

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// DefaultNICLink is the link of a NIC that names none, and of a query that
// names none: Ganeti's default cluster nicparams link (DEFAULT_BRIDGE). The
// configuration has no cluster-level NIC parameters yet; when it does,
// this becomes the cluster's value.
const DefaultNICLink = "xen-br0"

// View is what an answer is computed from: one consistent state, and the
// master as the answering candidate knows it.
type View struct {
	State *fsm.State
	// Master is the name of the master node as this candidate knows it
	// (the Raft leader); "" or an unknown name means the master the
	// configuration records.
	Master string
	// Version is the PING answer, the configuration version in Ganeti's
	// encoding (BuildVersion: 1000000*major + 10000*minor + revision).
	Version int
}

// Precomputed answers of the hot path.
var (
	answerCodes = func() [][]byte {
		out := make([][]byte, 8)
		for i := range out {
			out[i] = []byte(strconv.Itoa(i))
		}
		return out
	}()
	notLoaded = []byte(`"configuration not yet loaded"`)
)

// AppendAnswer computes the answer to a request and appends it, as ASCII
// JSON, to dst. It returns the reply's status and serial.
//
// Every answer carries the cluster's serial_no, errors included, so that a
// client comparing replies of several candidates compares like with like
// (Ganeti's daemon sends 0 with errors and PING, and node or instance
// serials for NODE_DRBD, NODE_INSTANCES and INSTANCE_DISKS). A candidate
// whose configuration is empty answers an error with serial 0.
//
// Where Ganeti's two daemons (Python up to 2.6, Haskell since) differ on a
// malformed query, a query of the wrong kind for the request type is
// answered with status error and code ERROR_ARGUMENT, and a name or
// address that is not in the configuration with ERROR_UNKNOWN_ENTRY.
func AppendAnswer(dst []byte, v View, q *Request) ([]byte, int, int64) {
	st := v.State
	if st == nil || st.Cluster == nil {
		return append(dst, notLoaded...), StatusError, 0
	}
	serial := st.Cluster.SerialNo
	ok := func(b []byte) ([]byte, int, int64) { return b, StatusOK, serial }
	fail := func(code int) ([]byte, int, int64) {
		return append(dst, answerCodes[code]...), StatusError, serial
	}
	qs := q.Query
	switch q.Type {
	case ReqPing:
		return ok(strconv.AppendInt(dst, int64(v.Version), 10))

	case ReqNodeRoleByName:
		if qs.Kind != QueryString {
			return fail(ErrorArgument)
		}
		n := st.LookupNode(qs.Str)
		if n == nil {
			return fail(ErrorUnknownEntry)
		}
		return ok(append(dst, answerCodes[roleCode(n, v.master())]...))

	case ReqNodePipByInstanceIP:
		if qs.Kind != QueryDict || qs.BadDict {
			return fail(ErrorArgument)
		}
		link := DefaultNICLink
		if qs.HasLink && qs.Link != "" {
			link = qs.Link
		}
		if qs.HasIP {
			pip, found := nodePipByInstanceIP(st, link, qs.IP)
			if !found {
				return fail(ErrorUnknownEntry)
			}
			return ok(appendString(dst, pip))
		}
		dst = append(dst, '[')
		for i, ip := range qs.IPList {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			if pip, found := nodePipByInstanceIP(st, link, ip); found {
				dst = append(dst, answerCodes[StatusOK]...)
				dst = append(dst, ',')
				dst = appendString(dst, pip)
			} else {
				dst = append(dst, answerCodes[StatusError]...)
				dst = append(dst, ',')
				dst = append(dst, answerCodes[ErrorUnknownEntry]...)
			}
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, serial, 10)
			dst = append(dst, ']')
		}
		return ok(append(dst, ']'))

	case ReqClusterMaster:
		m := v.masterNode()
		switch qs.Kind {
		case QueryString:
			return fail(ErrorArgument)
		case QueryNone:
			if m == nil {
				return fail(ErrorUnknownEntry)
			}
			return ok(appendString(dst, m.Name))
		}
		if qs.BadDict {
			return fail(ErrorArgument)
		}
		if m == nil {
			return fail(ErrorUnknownEntry)
		}
		vals := make([]string, 0, len(qs.Fields))
		for _, f := range qs.Fields {
			switch f {
			case FieldName:
				vals = append(vals, m.Name)
			case FieldIP, FieldMNodePip:
				// gnt has no floating cluster IP: the master is reached
				// at its node's primary IP, so FieldIP answers that too.
				vals = append(vals, m.PrimaryIP)
			default:
				return fail(ErrorArgument)
			}
		}
		return ok(appendJSON(dst, vals))

	case ReqNodePipList, ReqMcPipList:
		ips := []string{}
		for _, n := range st.SortedNodes() {
			if q.Type == ReqNodePipList || n.MasterCandidate {
				ips = append(ips, n.PrimaryIP)
			}
		}
		return ok(appendJSON(dst, ips))

	case ReqInstancesIPsList:
		link := DefaultNICLink
		switch qs.Kind {
		case QueryDict:
			return fail(ErrorArgument)
		case QueryString:
			if qs.Str != "" {
				link = qs.Str
			}
		}
		return ok(appendJSON(dst, instanceIPs(st, link)))

	case ReqNodeDrbd, ReqNodeInstances:
		if qs.Kind != QueryString {
			return fail(ErrorArgument)
		}
		n := st.LookupNode(qs.Str)
		if n == nil {
			return fail(ErrorUnknownEntry)
		}
		// Only the node's own instances are visited (the state's per-node
		// index), not every instance of the cluster.
		insts := st.InstancesOnNode(n.UUID)
		if q.Type == ReqNodeInstances {
			prim, sec := []*fsm.Instance{}, []*fsm.Instance{}
			for _, i := range insts {
				if ds := withoutSecrets(i.Disks); len(ds) > 0 && &ds[0] != &i.Disks[0] {
					c := *i
					c.Disks = ds
					i = &c
				}
				if i.PrimaryNode == n.UUID {
					prim = append(prim, i)
				} else {
					sec = append(sec, i)
				}
			}
			return ok(appendJSON(dst, [2][]*fsm.Instance{prim, sec}))
		}
		// Ganeti's answer: each drbd minor the node holds, [node name,
		// minor, instance name, "disk/N", "primary" or "secondary", peer
		// node name], by instance name and disk index. A drbd disk
		// without a logical id (a record from before the cluster kept
		// them, until its next change) makes the answer unknown, which
		// Ganeti's code for that is NOTIMPLEMENTED.
		minors := [][]any{}
		for _, i := range insts {
			if i.DiskTemplate != fsm.DTDrbd {
				continue
			}
			role := "secondary"
			if i.PrimaryNode == n.UUID {
				role = "primary"
			}
			for k := range i.Disks {
				d := &i.Disks[k]
				if !fsm.NeedsDRBDID(i, d) {
					continue
				}
				own := d.DRBD.DRBDEndOf(n.UUID)
				if own == nil {
					return appendString(dst, fmt.Sprintf("the drbd minors of instance %s are not recorded yet (its record predates them; they are given at its next change)", i.Name)), StatusNotImplemented, serial
				}
				peer := ""
				for _, e := range d.DRBD.Ends {
					if e.Node != n.UUID {
						peer = st.NodeName(e.Node)
					}
				}
				minors = append(minors, []any{n.Name, own.Minor, i.Name, fmt.Sprintf("disk/%d", k), role, peer})
			}
		}
		return ok(appendJSON(dst, minors))

	case ReqInstanceDisks:
		if qs.Kind != QueryString {
			return fail(ErrorArgument)
		}
		i := st.LookupInstance(qs.Str)
		if i == nil {
			return fail(ErrorUnknownEntry)
		}
		return ok(appendJSON(dst, withoutSecrets(nonNil(i.Disks))))

	case ReqConfigQuery:
		if qs.Kind != QueryString {
			return fail(ErrorArgument)
		}
		val, found := configValue(v, qs.Str)
		if !found {
			return fail(ErrorArgument)
		}
		return ok(append(dst, val...))

	case ReqDataCollectors:
		// The configuration lists no data collectors yet; the map of
		// their settings is therefore empty.
		return ok(append(dst, "{}"...))
	}
	return fail(ErrorArgument) // unreachable: ParseRequest refuses unknown types
}

func (v View) master() string {
	if n := v.masterNode(); n != nil {
		return n.UUID
	}
	return ""
}

// masterNode is the Raft leader's node as this candidate knows it, else
// the master the configuration records.
func (v View) masterNode() *fsm.Node {
	if v.Master != "" {
		if n := v.State.LookupNode(v.Master); n != nil {
			return n
		}
	}
	return v.State.Master()
}

func roleCode(n *fsm.Node, master string) int {
	switch fsm.RoleOf(n, master) {
	case fsm.RoleMaster:
		return RoleMaster
	case fsm.RoleDrained:
		return RoleDrained
	case fsm.RoleOffline:
		return RoleOffline
	case fsm.RoleCandidate:
		return RoleCandidate
	}
	return RoleRegular
}

// nicLinks are the keys under which NICs on link are indexed: NICs that
// name no link are on the default link.
func nicLinks(link string) []string {
	if link == DefaultNICLink {
		return []string{"", DefaultNICLink}
	}
	return []string{link}
}

func nodePipByInstanceIP(st *fsm.State, link, ip string) (string, bool) {
	var inst *fsm.Instance
	if link == DefaultNICLink {
		if inst = st.InstanceByIP("", ip); inst == nil {
			inst = st.InstanceByIP(DefaultNICLink, ip)
		}
	} else {
		inst = st.InstanceByIP(link, ip)
	}
	if inst == nil {
		return "", false
	}
	n := st.Nodes[inst.PrimaryNode]
	if n == nil || n.PrimaryIP == "" {
		return "", false
	}
	return n.PrimaryIP, true
}

func instanceIPs(st *fsm.State, link string) []string {
	var out []string
	for _, l := range nicLinks(link) {
		out = append(out, st.InstanceIPs(l)...)
	}
	sort.Strings(out)
	// An address on both spellings of the default link counts once.
	uniq := out[:0]
	for i, ip := range out {
		if i == 0 || ip != out[i-1] {
			uniq = append(uniq, ip)
		}
	}
	return nonNil(uniq)
}

// appendJSON appends v as ASCII JSON. The values answered are plain data
// from the model, which always encodes.
func appendJSON(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(err.Error())
	}
	return append(dst, asciiJSON(b)...)
}

// withoutSecrets is disks with their drbd secrets left out (their peers'
// shared secret is no business of a confd client); the state's records
// are not changed.
func withoutSecrets(disks []fsm.Disk) []fsm.Disk {
	out := disks
	for k, d := range disks {
		if d.DRBD == nil || d.DRBD.Secret == "" {
			continue
		}
		if &out[0] == &disks[0] {
			out = append([]fsm.Disk(nil), disks...)
		}
		id := *d.DRBD
		id.Secret = ""
		out[k].DRBD = &id
	}
	return out
}
