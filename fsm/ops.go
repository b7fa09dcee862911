package fsm

import (
	"fmt"
	"sort"
	"strings"
)

// Ganeti-style result of a set-params opcode: [[parameter, new value], ...].
type changes [][2]any

func (o *OpClusterSetParams) apply(t *txn, _ string) (any, *Error) {
	c := t.clusterRW()
	var ch changes
	if o.CandidatePoolSize != nil {
		c.CandidatePoolSize = *o.CandidatePoolSize
		ch = append(ch, [2]any{"candidate_pool_size", c.CandidatePoolSize})
	}
	if o.MaxVoters != nil {
		c.MaxVoters = *o.MaxVoters
		ch = append(ch, [2]any{"max_raft_voters", c.MaxVoters})
	}
	if o.DefaultIAllocator != nil {
		c.DefaultIAllocator = *o.DefaultIAllocator
		ch = append(ch, [2]any{"default_iallocator", c.DefaultIAllocator})
	}
	if o.NDParams != nil {
		nd := DefaultNDParams()
		for k, v := range o.NDParams {
			if v == nil || v == "default" {
				c.NDParams[k] = nd[k]
			} else {
				c.NDParams[k] = v
			}
			ch = append(ch, [2]any{"ndparams/" + k, c.NDParams[k]})
		}
	}
	if o.RAPIAnonymousRead != nil {
		c.RAPIAnonymousRead = *o.RAPIAnonymousRead
		ch = append(ch, [2]any{"rapi_anonymous_read", c.RAPIAnonymousRead})
	}
	if o.hasParams() {
		if e := o.applyParams(t, c, &ch); e != nil {
			return nil, e
		}
	}
	if o.hasUIDPool() {
		if e := o.applyUIDPool(c, &ch); e != nil {
			return nil, e
		}
	}
	if o.DiagnoseDataCollectorFilename != nil {
		c.DiagnoseCollectorFilename = *o.DiagnoseDataCollectorFilename
		ch = append(ch, [2]any{"diagnose_data_collector_filename", c.DiagnoseCollectorFilename})
	}
	if o.hasMaint() {
		m := t.maintRW()
		setI := func(name string, dst *int, v *int) {
			if v != nil {
				*dst = *v
				ch = append(ch, [2]any{name, *v})
			}
		}
		setF := func(name string, dst *float64, v *float64) {
			if v != nil {
				*dst = *v
				ch = append(ch, [2]any{name, *v})
			}
		}
		if o.MaintRoundDelay != nil {
			m.RoundDelay = *o.MaintRoundDelay
			ch = append(ch, [2]any{"maint_round_delay", m.RoundDelay})
		}
		if o.MaintBalance != nil {
			m.Balance = *o.MaintBalance
			ch = append(ch, [2]any{"maint_balance", m.Balance})
		}
		if o.MaintdHarep != nil {
			on := *o.MaintdHarep
			m.Harep = &on
			ch = append(ch, [2]any{"maintd_harep", on})
		}
		if o.RepairBreakerOverrideUntil != nil {
			m.Repair.BreakerOverrideUntil = *o.RepairBreakerOverrideUntil
			ch = append(ch, [2]any{"repair_breaker_override_until", m.Repair.BreakerOverrideUntil})
		}
		setF("maint_balance_thresh", &m.BalanceThreshold, o.MaintBalanceThresh)
		setI("maint_balance_max_moves", &m.BalanceMaxMoves, o.MaintBalanceMaxMoves)
		setF("repair_dead_grace", &m.Repair.DeadGrace, o.RepairDeadGrace)
		setF("repair_breaker_share", &m.Repair.BreakerShare, o.RepairBreakerShare)
		setI("repair_breaker_nodes", &m.Repair.BreakerNodes, o.RepairBreakerNodes)
		setI("repair_max_evacuations", &m.Repair.MaxEvacuations, o.RepairMaxEvacuations)
		setI("repair_round_job_limit", &m.Repair.RoundJobLimit, o.RepairRoundJobLimit)
		setF("repair_job_delay", &m.Repair.JobDelay, o.RepairJobDelay)
		setF("maint_diagnose_interval", &m.Repair.DiagnoseInterval, o.DiagnoseInterval)
	}
	if o.CandidatePoolSize != nil {
		t.maintainCandidatePool("")
	}
	return ch, nil
}

func (o *OpGroupAdd) apply(t *txn, uuid string) (any, *Error) {
	if uuid == "" {
		return nil, errf(CodeFault, "", "no UUID drawn for the new group")
	}
	if t.lookupGroup(o.GroupName) != nil {
		return nil, errf(CodeExists, "group_name", "node group %q already exists", o.GroupName)
	}
	pol := AllocPreferred
	if o.AllocPolicy != nil {
		pol = *o.AllocPolicy
	}
	ts := secs(t.now)
	t.groups[uuid] = &Group{
		Name: o.GroupName, UUID: uuid, AllocPolicy: pol,
		NDParams: mergeParams(nil, o.NDParams), Tags: []string{}, CTime: ts,
		DiskParams: map[string]map[string]any{},
	}
	for _, dt := range sortedKeys(o.DiskParams) {
		m, e := NormalizeParams("diskparams."+dt, "disk template "+dt, diskParamDefs[dt], o.DiskParams[dt], false)
		if e != nil {
			return nil, e
		}
		if len(m) > 0 {
			t.groups[uuid].DiskParams[dt] = m
		}
	}
	return nil, nil
}

func (o *OpGroupSetParams) apply(t *txn, _ string) (any, *Error) {
	g := t.lookupGroup(o.GroupName)
	if g == nil {
		return nil, errf(CodeNoEnt, "group_name", "node group %q does not exist", o.GroupName)
	}
	w := t.groupRW(g.UUID)
	var ch changes
	if o.AllocPolicy != nil {
		w.AllocPolicy = *o.AllocPolicy
		ch = append(ch, [2]any{"alloc_policy", w.AllocPolicy})
	}
	if o.NDParams != nil {
		w.NDParams = mergeParams(w.NDParams, o.NDParams)
		ch = append(ch, [2]any{"ndparams", w.NDParams})
	}
	for _, dt := range sortedKeys(o.DiskParams) {
		m, e := NormalizeParams("diskparams."+dt, "disk template "+dt, diskParamDefs[dt], o.DiskParams[dt], true)
		if e != nil {
			return nil, e
		}
		if w.DiskParams == nil {
			w.DiskParams = map[string]map[string]any{}
		}
		if w.DiskParams[dt] = MergeParams(w.DiskParams[dt], m); len(w.DiskParams[dt]) == 0 {
			delete(w.DiskParams, dt)
		}
		for _, k := range sortedKeys(m) {
			ch = append(ch, [2]any{"diskparams/" + dt + "/" + k, m[k]})
		}
	}
	return ch, nil
}

func (o *OpGroupRemove) apply(t *txn, _ string) (any, *Error) {
	g := t.lookupGroup(o.GroupName)
	if g == nil {
		return nil, errf(CodeNoEnt, "group_name", "node group %q does not exist", o.GroupName)
	}
	var members []string
	for _, n := range t.allNodes() {
		if n.Group == g.UUID {
			members = append(members, n.Name)
		}
	}
	if len(members) > 0 {
		return nil, errf(CodeState, "group_name", "group %q not empty, has the following node(s): %s", g.Name, strings.Join(members, ", "))
	}
	if nets := t.groupNetworks(g.UUID); len(nets) > 0 {
		return nil, errf(CodeState, "group_name", "group %q is connected to network(s) %s; disconnect them first", g.Name, strings.Join(nets, ", "))
	}
	if len(t.allGroups()) == 1 {
		return nil, errf(CodeState, "group_name", "group %q is the only group, cannot be removed", g.Name)
	}
	t.groups[g.UUID] = nil
	return nil, nil
}

// mcStats is Ganeti's GetMasterCandidateStats over the staged view:
// current candidates and the desired count, ignoring the excepted node.
func (t *txn) mcStats(except string) (now, should int) {
	max := 0
	for _, n := range t.allNodes() {
		if n.UUID == except {
			continue
		}
		if n.MasterCandidate {
			now++
		}
		if n.MasterCapable && !n.Offline && !n.Drained {
			max++
		}
	}
	should = min(max, t.clusterRO().CandidatePoolSize)
	return now, should
}

// decideSelfPromotion is Ganeti's _DecideSelfPromotion.
func (t *txn) decideSelfPromotion(except string) bool {
	now, should := t.mcStats(except)
	should = min(should+1, t.clusterRO().CandidatePoolSize)
	return now < should
}

// maintainCandidatePool promotes eligible nodes until the pool has the
// desired size, in name order (Ganeti picks at random; the state machine
// must be deterministic). It never demotes.
func (t *txn) maintainCandidatePool(except string) {
	now, should := t.mcStats(except)
	for _, n := range t.allNodes() {
		if now >= should {
			break
		}
		if n.MasterCandidate || n.Offline || n.Drained || !n.MasterCapable || n.UUID == except {
			continue
		}
		t.nodeRW(n.UUID).MasterCandidate = true
		t.logf(fmt.Sprintf("Promoted node %s to master candidate", n.Name))
		now++
	}
}

func (o *OpNodeAdd) apply(t *txn, uuid string) (any, *Error) {
	if uuid == "" {
		return nil, errf(CodeFault, "", "no UUID drawn for the new node")
	}
	if t.lookupNode(o.NodeName) != nil {
		return nil, errf(CodeExists, "node_name", "node %q is already in the configuration", o.NodeName)
	}
	for field, ip := range map[string]string{"primary_ip": o.PrimaryIP, "secondary_ip": o.SecondaryIP} {
		if other := t.ipOwner(ip); other != nil {
			return nil, errf(CodeNotUnique, field, "new node ip address %s conflicts with existing node %s", ip, other.Name)
		}
	}
	var grp *Group
	if o.Group != "" {
		grp = t.lookupGroup(o.Group)
		if grp == nil {
			return nil, errf(CodeNoEnt, "group", "node group %q does not exist", o.Group)
		}
	} else {
		groups := t.allGroups()
		if len(groups) != 1 {
			return nil, errf(CodeInval, "group", "more than one node group exists; the target group must be specified explicitly")
		}
		grp = groups[0]
	}
	mcap := o.MasterCapable == nil || *o.MasterCapable
	vmcap := o.VMCapable == nil || *o.VMCapable
	var mc bool
	switch {
	case o.MasterCandidate != nil:
		mc = *o.MasterCandidate
		if mc && !mcap {
			return nil, errf(CodeInval, "master_candidate", "node %s is not master capable, cannot make it a master candidate", o.NodeName)
		}
	case mcap:
		mc = t.decideSelfPromotion("")
	}
	sip := o.SecondaryIP
	if sip == "" {
		sip = o.PrimaryIP
	}
	ts := secs(t.now)
	t.nodes[uuid] = &Node{
		Name: o.NodeName, UUID: uuid, Group: grp.UUID, PrimaryIP: o.PrimaryIP, SecondaryIP: sip,
		MasterCandidate: mc, MasterCapable: mcap, VMCapable: vmcap, Powered: true,
		NDParams: mergeParams(nil, o.NDParams), Tags: []string{}, CTime: ts,
	}
	if mc {
		t.logf(fmt.Sprintf("Node %s added as master candidate", o.NodeName))
	}
	return nil, nil
}

func (o *OpNodeRemove) apply(t *txn, _ string) (any, *Error) {
	ref := o.NodeName
	if ref == "" {
		ref = o.NodeUUID
	}
	n := t.lookupNode(ref)
	if n == nil {
		return nil, errf(CodeNoEnt, "node_name", "node %q does not exist", ref)
	}
	if n.UUID == t.clusterRO().MasterNode {
		return nil, errf(CodeState, "node_name", "node %s is the master node, failover to another node is required", n.Name)
	}
	if inst, ok := t.nodeHasInstances(n.UUID); ok {
		return nil, errf(CodeState, "node_name", "instance %s is still using node %s, please remove it first", inst, n.Name)
	}
	wasMC := n.MasterCandidate
	t.nodes[n.UUID] = nil
	if wasMC {
		t.maintainCandidatePool(n.UUID)
	}
	return nil, nil
}

// supportsOOB reports whether a node has an OOB helper (staged view).
func (t *txn) supportsOOB(n *Node) bool {
	nd := DefaultNDParams()
	nd = mergeParams(nd, t.clusterRO().NDParams)
	if g := t.group(n.Group); g != nil {
		nd = mergeParams(nd, g.NDParams)
	}
	nd = mergeParams(nd, n.NDParams)
	p, _ := nd["oob_program"].(string)
	return p != "" && p != "!"
}

// apply follows Ganeti's LUNodeSetParams: flag rules, role computation,
// candidate-pool checks and auto-promotion.
func (o *OpNodeSetParams) apply(t *txn, _ string) (any, *Error) {
	n := t.lookupNode(o.nodeRef())
	if n == nil {
		return nil, errf(CodeNoEnt, "node_name", "node %q does not exist", o.nodeRef())
	}
	isMaster := n.UUID == t.clusterRO().MasterNode
	mc, offline, drained := o.MasterCandidate, o.Offline, o.Drained
	mcap := o.MasterCapable

	if isMaster && mcap != nil && !*mcap {
		return nil, errf(CodeInval, "master_capable", "the master node %s must be master capable", n.Name)
	}
	if isMaster && (mc != nil || offline != nil || drained != nil) {
		return nil, errf(CodeInval, "", "the master role can be changed only via master-failover")
	}
	if mc != nil && *mc && !n.MasterCapable && !(mcap != nil && *mcap) {
		return nil, errf(CodeInval, "master_candidate", "node %s is not master capable, cannot set master candidate", n.Name)
	}
	if o.VMCapable != nil && !*o.VMCapable {
		if inst, ok := t.nodeHasInstances(n.UUID); ok {
			return nil, errf(CodeState, "vm_capable", "node %s hosts instances (%s), cannot unset vm_capable", n.Name, inst)
		}
	}
	// Ineffective changes: unsetting a flag that is not set.
	unset := func(f *bool, cur bool) *bool {
		if f != nil && !*f && !cur {
			return nil
		}
		return f
	}
	mc = unset(mc, n.MasterCandidate)
	offline = unset(offline, n.Offline)
	drained = unset(drained, n.Drained)

	mightDemote := (mc != nil && !*mc) || (offline != nil && *offline) || (drained != nil && *drained) || (mcap != nil && !*mcap)
	if n.MasterCandidate && mightDemote && !o.AutoPromote {
		now, should := t.mcStats(n.UUID)
		if now < should {
			return nil, errf(CodeState, "auto_promote", "not enough master candidates (desired %d, new value will be %d); pass auto_promote to allow promotion of another node", should, now)
		}
	}
	oob := t.supportsOOB(n)
	if oob {
		if offline != nil && !*offline && !(n.Powered || (o.Powered != nil && *o.Powered)) {
			return nil, errf(CodeState, "offline", "node %s needs to be turned on before its offline status can be reset", n.Name)
		}
	} else if o.Powered != nil {
		return nil, errf(CodeState, "powered", "unable to change powered state for node %s as it does not support out-of-band handling", n.Name)
	}
	if o.SecondaryIP != nil && *o.SecondaryIP != "" && *o.SecondaryIP != n.SecondaryIP {
		if other := t.ipOwner(*o.SecondaryIP); other != nil && other.UUID != n.UUID {
			return nil, errf(CodeNotUnique, "secondary_ip", "secondary ip %s is in use by node %s", *o.SecondaryIP, other.Name)
		}
	}
	// Self-promotion when leaving drained/offline or becoming master capable.
	if (drained != nil && !*drained) || (offline != nil && !*offline) || (mcap != nil && *mcap && !n.MasterCapable) {
		if t.decideSelfPromotion("") {
			yes := true
			mc = &yes
			t.logf("Auto-promoting node to master candidate")
		}
	}
	if mcap != nil && !*mcap && n.MasterCandidate {
		no := false
		mc = &no
		t.logf("Demoting from master candidate")
	}
	oldRole := RoleOf(n, "")
	newRole := oldRole
	switch {
	case mc != nil && *mc:
		newRole = RoleCandidate
	case drained != nil && *drained:
		newRole = RoleDrained
	case offline != nil && *offline:
		newRole = RoleOffline
	case mc != nil || drained != nil || offline != nil:
		newRole = RoleRegular
	}
	w := t.nodeRW(n.UUID)
	var ch changes
	if mcap != nil && *mcap != w.MasterCapable {
		w.MasterCapable = *mcap
		ch = append(ch, [2]any{"master_capable", w.MasterCapable})
	}
	if o.VMCapable != nil && *o.VMCapable != w.VMCapable {
		w.VMCapable = *o.VMCapable
		ch = append(ch, [2]any{"vm_capable", w.VMCapable})
	}
	if o.Powered != nil {
		w.Powered = *o.Powered
		ch = append(ch, [2]any{"powered", w.Powered})
	}
	if o.SecondaryIP != nil {
		sip := *o.SecondaryIP
		if sip == "" {
			sip = w.PrimaryIP
		}
		w.SecondaryIP = sip
		ch = append(ch, [2]any{"secondary_ip", sip})
	}
	if o.NDParams != nil {
		w.NDParams = mergeParams(w.NDParams, o.NDParams)
		ch = append(ch, [2]any{"ndparams", w.NDParams})
	}
	if newRole != oldRole {
		w.MasterCandidate = newRole == RoleCandidate
		w.Drained = newRole == RoleDrained
		w.Offline = newRole == RoleOffline
		ch = append(ch,
			[2]any{"master_candidate", w.MasterCandidate},
			[2]any{"drained", w.Drained},
			[2]any{"offline", w.Offline})
		if oldRole == RoleCandidate && o.AutoPromote {
			t.maintainCandidatePool(n.UUID)
		}
	}
	return ch, nil
}

// tagList resolves the object of a tag opcode and returns a pointer to its
// staged (writable) tag list.
func (t *txn) tagList(kind, name string) (*[]string, *Error) {
	switch kind {
	case TagCluster:
		return &t.clusterRW().Tags, nil
	case TagNode:
		n := t.lookupNode(name)
		if n == nil {
			return nil, errf(CodeNoEnt, "name", "node %q does not exist", name)
		}
		return &t.nodeRW(n.UUID).Tags, nil
	case TagNodeGroup:
		g := t.lookupGroup(name)
		if g == nil {
			return nil, errf(CodeNoEnt, "name", "node group %q does not exist", name)
		}
		return &t.groupRW(g.UUID).Tags, nil
	case TagInstance:
		i := t.lookupInstance(name)
		if i == nil {
			return nil, errf(CodeNoEnt, "name", "instance %q does not exist", name)
		}
		return &t.instanceRW(i.UUID).Tags, nil
	case TagNetwork:
		n := t.lookupNetwork(name)
		if n == nil {
			return nil, errf(CodeNoEnt, "name", "network %q does not exist", name)
		}
		return &t.networkRW(n.UUID).Tags, nil
	}
	return nil, errf(CodeInval, "kind", "unknown tag kind %q", kind)
}

func (o *OpTagsSet) apply(t *txn, _ string) (any, *Error) {
	tags, e := t.tagList(o.Kind, o.Name)
	if e != nil {
		return nil, e
	}
	// Tag lists are kept sorted: insert by binary search, no rebuild.
	for _, x := range o.Tags {
		i := sort.SearchStrings(*tags, x)
		if i < len(*tags) && (*tags)[i] == x {
			continue
		}
		if len(*tags) >= MaxTagsPerObj {
			return nil, errf(CodeState, "tags", "too many tags (at most %d per object)", MaxTagsPerObj)
		}
		*tags = append(*tags, "")
		copy((*tags)[i+1:], (*tags)[i:])
		(*tags)[i] = x
	}
	return nil, nil
}

func (o *OpTagsDel) apply(t *txn, _ string) (any, *Error) {
	tags, e := t.tagList(o.Kind, o.Name)
	if e != nil {
		return nil, e
	}
	var missing []string
	for _, x := range o.Tags {
		i := sort.SearchStrings(*tags, x)
		if i == len(*tags) || (*tags)[i] != x {
			missing = append(missing, x)
			continue
		}
		*tags = append((*tags)[:i], (*tags)[i+1:]...)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, errf(CodeNoEnt, "tags", "tag(s) %s not found", strings.Join(missing, ", "))
	}
	return nil, nil
}

// applyUIDPool sets, then adds to, then removes from the uid pool, as
// Ganeti's LUClusterSetParams does; any error leaves the pool as it was.
// Removing uids a running guest uses is allowed (as in Ganeti): the guest
// keeps its uid until it stops, and the uid is not handed out again.
func (o *OpClusterSetParams) applyUIDPool(c *Cluster, ch *changes) *Error {
	set, add, rm, e := o.uidPoolFields()
	if e != nil {
		return e
	}
	pool := c.UIDPool
	if o.UIDPool != nil {
		pool = set
	}
	if o.AddUIDs != nil {
		if pool, e = AddUIDs("add_uids", pool, add); e != nil {
			return e
		}
	}
	if o.RemoveUIDs != nil {
		if pool, e = RemoveUIDs("remove_uids", pool, rm); e != nil {
			return e
		}
	}
	if len(pool) == 0 {
		pool = nil
	}
	c.UIDPool = pool
	*ch = append(*ch, [2]any{"uid_pool", FormatUIDPool(pool)})
	return nil
}
