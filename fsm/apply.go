package fsm

import (
	"encoding/json"
	"fmt"
	"slices"
)

func (s *State) applyClusterInit(c *ClusterInit) *Error {
	if s.Cluster != nil {
		return errf(CodeState, "", "cluster %q is already initialised", s.Cluster.Name)
	}
	if e := ValidateHostname("cluster_name", c.Name); e != nil {
		return e
	}
	if c.UUID == "" || c.GroupUUID == "" || c.Node.UUID == "" {
		return errf(CodeInval, "", "cluster init needs cluster, group and node UUIDs")
	}
	if e := ValidateHostname("node.name", c.Node.Name); e != nil {
		return e
	}
	if e := validateIP("node.primary_ip", c.Node.PrimaryIP, true); e != nil {
		return e
	}
	if e := c.Node.Validate("node"); e != nil {
		return e
	}
	if e := validateNDParams("ndparams", c.NDParams); e != nil {
		return e
	}
	if e := validatePKI(c.PKI); e != nil {
		return e
	}
	if e := CheckUIDPool("uid_pool", c.UIDPool); e != nil {
		return e
	}
	pool, voters := c.CandidatePoolSize, c.MaxVoters
	if pool == 0 {
		pool = DefaultCandidatePoolSize
	}
	if voters == 0 {
		voters = DefaultMaxVoters
	}
	if pool < 1 || pool > MaxCandidatePoolSize || voters < 1 || voters%2 == 0 || voters > MaxRaftVoters {
		return errf(CodeInval, "", "candidate_pool_size must be 1 to %d and max_raft_voters odd and at most %d, got %d and %d",
			MaxCandidatePoolSize, MaxRaftVoters, pool, voters)
	}
	ts := secs(c.Now)
	sip := c.Node.SecondaryIP
	if sip == "" {
		sip = c.Node.PrimaryIP
	}
	nd := DefaultNDParams()
	for k, v := range c.NDParams {
		nd[k] = v
	}
	if c.PKI != nil {
		p := *c.PKI
		p.Serial, p.Phase = 1, ""
		s.PKI = &p
	}
	s.Cluster = &Cluster{
		Name: c.Name, UUID: c.UUID, SerialNo: 1, CTime: ts, MTime: ts,
		CandidatePoolSize: pool, MaxVoters: voters, DefaultIAllocator: "hail",
		NDParams: nd, Tags: []string{}, MasterNode: c.Node.UUID,
	}
	if len(c.UIDPool) > 0 {
		s.Cluster.UIDPool = slices.Clone(c.UIDPool)
		slices.SortFunc(s.Cluster.UIDPool, cmpUIDRange)
	}
	s.Cluster.normalizeParams()
	s.Groups[c.GroupUUID] = &Group{
		Name: DefaultGroupName, UUID: c.GroupUUID, AllocPolicy: AllocPreferred,
		NDParams: map[string]any{}, Tags: []string{}, SerialNo: 1, CTime: ts, MTime: ts,
		DiskParams: map[string]map[string]any{},
	}
	s.Nodes[c.Node.UUID] = &Node{
		Name: c.Node.Name, UUID: c.Node.UUID, Group: c.GroupUUID,
		PrimaryIP: c.Node.PrimaryIP, SecondaryIP: sip,
		MasterCandidate: true, MasterCapable: true, VMCapable: true, Powered: true,
		NDParams: map[string]any{}, Tags: []string{},
		Resources: c.Node.Resources, Addrs: c.Node.Addrs, Version: c.Node.Version, Hypervisor: c.Node.Hypervisor,
		SerialNo: 1, CTime: ts, MTime: ts,
	}
	if c.MaintdHarep != nil {
		m := DefaultMaintenance()
		on := *c.MaintdHarep
		m.Harep = &on
		s.commitMaint(m, c.Now)
	}
	s.reindex()
	return nil
}

func (s *State) applyLeaderEstablish(c *LeaderEstablish) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	n := s.LookupNode(c.Node)
	if n == nil {
		return Response{Err: errf(CodeNoEnt, "node", "leader node %q is not in the configuration", c.Node)}
	}
	s.Epoch++
	prev := s.LogVersion
	s.LogVersion = max(s.LogVersion, c.LogVersion)
	t := s.begin(c.Now)
	if s.Cluster.MasterNode != n.UUID {
		t.clusterRW().MasterNode = n.UUID
	}
	if prev < networkPortVersion && s.LogVersion >= networkPortVersion {
		// The upgrade: records of older builds get their ports (as
		// many as the pool has; the others at their next change).
		t.assignMissingPorts(false)
	}
	t.commit()
	return Response{Epoch: s.Epoch}
}

func (s *State) applyNodeRegister(c *NodeRegister) *Error {
	if s.Cluster == nil {
		return errf(CodeState, "", "cluster is not initialised")
	}
	n := s.LookupNode(c.Node.Name)
	if n == nil {
		return errf(CodeNoEnt, "name", "node %q is not in the cluster configuration; add it with 'gnt node add'", c.Node.Name)
	}
	if n.Addrs == c.Node.Addrs && n.Resources == c.Node.Resources && n.Version == c.Node.Version && n.Hypervisor == c.Node.Hypervisor {
		return nil
	}
	if e := c.Node.Validate("node"); e != nil {
		return e
	}
	t := s.begin(c.Now)
	w := t.nodeRW(n.UUID)
	w.Addrs, w.Resources, w.Version, w.Hypervisor = c.Node.Addrs, c.Node.Resources, c.Node.Version, c.Node.Hypervisor
	t.commit()
	return nil
}

// parseOps decodes and validates every opcode of a submission.
func parseOps(raw []json.RawMessage) ([]Opcode, *Error) {
	if e := CheckJobSize(len(raw)); e != nil {
		return nil, e
	}
	ops := make([]Opcode, len(raw))
	for i, r := range raw {
		op, err := ParseOpcode(r)
		if err != nil {
			e := AsError(err)
			if len(raw) > 1 {
				e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
			}
			return nil, e
		}
		ops[i] = op
	}
	return ops, nil
}

// ErrorResult encodes an opcode failure as Ganeti does in opresult:
// ["OpPrereqError", [message, error code]].
func ErrorResult(e *Error) json.RawMessage {
	return mustJSON([]any{"OpPrereqError", []any{e.Msg, string(e.Code)}})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(err.Error())
	}
	return b
}
