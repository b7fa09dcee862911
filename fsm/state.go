package fsm

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// State is the replicated state. Readers get it through FSM.Read and must
// neither modify it nor keep references after their callback returns.
type State struct {
	Cluster   *Cluster             `json:"cluster"`
	Groups    map[string]*Group    `json:"groups"`    // by UUID
	Nodes     map[string]*Node     `json:"nodes"`     // by UUID
	Instances map[string]*Instance `json:"instances"` // by UUID
	// Networks are the network objects, by UUID (network.go).
	Networks  map[string]*Network `json:"networks"`
	Jobs      map[int64]*Job      `json:"jobs"`
	NextJobID int64               `json:"next_job_id"`
	// Epoch is the executor epoch of the current leader; job updates
	// carrying another epoch are refused.
	Epoch uint64 `json:"epoch"`
	// Finished lists finalized job ids in the order they finished; the
	// oldest move to the archive beyond MaxFinishedJobs.
	Finished []int64 `json:"finished"`
	// Archived holds summaries of archived jobs, by id; the lowest ids are
	// dropped beyond MaxArchivedJobs.
	Archived map[int64]*ArchivedJob `json:"archived"`
	// Maintenance is maintd's state (maintenance.go); nil until first
	// written, read through Maint.
	Maintenance *Maintenance `json:"maintenance,omitempty"`
	// LogVersion is the highest LogVersion a leader has recorded.
	LogVersion int `json:"log_version,omitempty"`
	// RAPIUsers are the users of the API, by name (rapiusers.go). The
	// map is replaced, never changed in place, so frozen views share it.
	RAPIUsers map[string]*RAPIUser `json:"-"`
	// RemovedNodes are the nodes removed from the cluster, by name, with
	// when (Unix nanoseconds, the proposer's clock): a gntd refuses their
	// node certificates issued before (removed.go). Replaced, never
	// changed in place.
	RemovedNodes map[string]int64 `json:"-"`
	// Filters are the job filter rules, by UUID (filters.go). The map
	// is replaced, never changed in place, so frozen views share it.
	Filters map[string]*JobFilter `json:"-"`
	// PKI is the cluster CA (pki.go); nil in clusters initialised before
	// TLS.
	PKI *PKI `json:"pki,omitempty"`

	nodeByName  map[string]string
	nodeByIP    map[string]string
	groupByName map[string]string
	instByName  map[string]string
	instByIP    instIPIndex // see index_ip.go
	netByName   map[string]string
	// netIPs maps network UUID -> IP -> instance UUID: the addresses
	// the instances' NICs take from each network's pool.
	netIPs map[string]map[string]string
	usage  usageIndex // see index_usage.go
	// ports maps each port of the pool to the instance holding it: its
	// network_port or a drbd disk's port (ports.go, drbdids.go).
	ports map[int]string
	// minors maps node UUID -> drbd minor -> the instance whose drbd
	// disk holds it there (drbdids.go).
	minors  map[string]map[int]string
	pending int
	// execPending holds the unfinished jobs that need the executor, so the
	// leader finds its work without scanning the retained history.
	execPending map[int64]struct{}
	// holding holds the jobs with a running opcode that recorded locks.
	holding map[int64]struct{}
	// byToken maps submission tokens to the jobs they created, active or
	// archived.
	byToken map[string]int64
	// applying is the index of the entry being applied.
	applying uint64
	// queuedAt is the index of the last entry that queued a job for the
	// executor (FSM.QueuedAt); not part of snapshots.
	queuedAt uint64
	// archOrder lists the archived jobs (the records of Archived) by
	// increasing id. A frozen view copies it, not the map: a slice of
	// pointers copies in a fraction of the time, so a snapshot of a full
	// archive holds applies for far less.
	archOrder []*ArchivedJob
	// touched lists the jobs the command being applied changed, for
	// FSM.JobChanged.
	touched []int64
	// modIndex is the index that last changed each job, since the state
	// was built (FSM.JobIndex).
	modIndex map[int64]uint64
}

func newState() *State {
	s := &State{
		Groups:    map[string]*Group{},
		Nodes:     map[string]*Node{},
		Instances: map[string]*Instance{},
		Networks:  map[string]*Network{},
		Jobs:      map[int64]*Job{},
		Archived:  map[int64]*ArchivedJob{},
		NextJobID: 1,
	}
	s.reindex()
	return s
}

// reindex rebuilds the lookup indexes from the maps.
func (s *State) reindex() {
	s.nodeByName = map[string]string{}
	s.nodeByIP = map[string]string{}
	s.groupByName = map[string]string{}
	s.instByName = map[string]string{}
	s.instByIP = instIPIndex{}
	s.netByName = map[string]string{}
	s.netIPs = map[string]map[string]string{}
	s.usage = usageIndex{}
	s.ports = map[int]string{}
	s.minors = map[string]map[int]string{}
	if s.Networks == nil {
		s.Networks = map[string]*Network{}
	}
	for u, n := range s.Networks {
		s.netByName[n.Name] = u
		sort.Strings(n.Tags)
	}
	for u, n := range s.Nodes {
		s.indexNode(u, n)
	}
	for u, g := range s.Groups {
		s.groupByName[g.Name] = u
	}
	for u, i := range s.Instances {
		s.indexInstance(u, i)
	}
	// Tag lists are kept sorted (tag opcodes rely on it); snapshots of any
	// origin are normalised here.
	if s.Cluster != nil {
		sort.Strings(s.Cluster.Tags)
	}
	for _, g := range s.Groups {
		sort.Strings(g.Tags)
	}
	for _, n := range s.Nodes {
		sort.Strings(n.Tags)
	}
	for _, i := range s.Instances {
		sort.Strings(i.Tags)
	}
	s.pending = 0
	s.execPending = map[int64]struct{}{}
	s.holding = map[int64]struct{}{}
	s.modIndex = map[int64]uint64{}
	s.byToken = map[string]int64{}
	for _, j := range s.Jobs {
		if j.Token != "" {
			s.byToken[j.Token] = j.ID
		}
		if !Finalized(j.Status) {
			s.pending++
			if j.Executor {
				s.execPending[j.ID] = struct{}{}
			}
			s.trackHolding(j)
		}
	}
	if s.Archived == nil {
		s.Archived = map[int64]*ArchivedJob{}
	}
	s.archOrder = make([]*ArchivedJob, 0, len(s.Archived))
	for id, a := range s.Archived {
		s.archOrder = append(s.archOrder, a)
		if a.Token != "" {
			s.byToken[a.Token] = id
		}
	}
	sort.Slice(s.archOrder, func(i, j int) bool { return s.archOrder[i].ID < s.archOrder[j].ID })
}

// trackHolding keeps the holding index right for a job just stored.
func (s *State) trackHolding(j *Job) {
	if !Finalized(j.Status) {
		for _, op := range j.Ops {
			if op.Status == StatusRunning && len(op.Locks) > 0 {
				s.holding[j.ID] = struct{}{}
				return
			}
		}
	}
	delete(s.holding, j.ID)
}

func (s *State) indexNode(u string, n *Node) {
	s.nodeByName[n.Name] = u
	if n.PrimaryIP != "" {
		s.nodeByIP[n.PrimaryIP] = u
	}
	if n.SecondaryIP != "" {
		s.nodeByIP[n.SecondaryIP] = u
	}
}

func (s *State) unindexNode(n *Node) {
	delete(s.nodeByName, n.Name)
	if s.nodeByIP[n.PrimaryIP] == n.UUID {
		delete(s.nodeByIP, n.PrimaryIP)
	}
	if s.nodeByIP[n.SecondaryIP] == n.UUID {
		delete(s.nodeByIP, n.SecondaryIP)
	}
}

// Initialized reports whether the cluster exists.
func (s *State) Initialized() bool { return s.Cluster != nil }

// LookupNode finds a node by name or UUID.
func (s *State) LookupNode(ref string) *Node {
	if u, ok := s.nodeByName[ref]; ok {
		return s.Nodes[u]
	}
	return s.Nodes[ref]
}

// NodeByIP finds the node owning a primary or secondary IP.
func (s *State) NodeByIP(ip string) *Node { return s.Nodes[s.nodeByIP[ip]] }

// LookupGroup finds a group by name or UUID.
func (s *State) LookupGroup(ref string) *Group {
	if u, ok := s.groupByName[ref]; ok {
		return s.Groups[u]
	}
	return s.Groups[ref]
}

// LookupInstance finds an instance by name or UUID.
func (s *State) LookupInstance(ref string) *Instance {
	if u, ok := s.instByName[ref]; ok {
		return s.Instances[u]
	}
	return s.Instances[ref]
}

// SortedNodes returns all nodes ordered by name.
func (s *State) SortedNodes() []*Node {
	out := make([]*Node, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SortedGroups returns all groups ordered by name.
func (s *State) SortedGroups() []*Group {
	out := make([]*Group, 0, len(s.Groups))
	for _, g := range s.Groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SortedInstances returns all instances ordered by name.
func (s *State) SortedInstances() []*Instance {
	out := make([]*Instance, 0, len(s.Instances))
	for _, i := range s.Instances {
		out = append(out, i)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SortedJobIDs returns all retained job ids in increasing order.
func (s *State) SortedJobIDs() []int64 {
	out := make([]int64, 0, len(s.Jobs))
	for id := range s.Jobs {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ExecutorJobs returns the unfinished jobs that need the executor, by id.
func (s *State) ExecutorJobs() []*Job {
	out := make([]*Job, 0, len(s.execPending))
	for id := range s.execPending {
		out = append(out, s.Jobs[id])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EachExecutorJob calls fn for every unfinished executor job, in no
// particular order; it is ExecutorJobs without the sorting, for callers
// that visit every job on a busy path.
func (s *State) EachExecutorJob(fn func(*Job)) {
	for id := range s.execPending {
		fn(s.Jobs[id])
	}
}

// PendingJobs is the number of unfinished jobs.
func (s *State) PendingJobs() int { return s.pending }

// Master returns the master node, or nil before a leader recorded itself.
func (s *State) Master() *Node {
	if s.Cluster == nil {
		return nil
	}
	return s.Nodes[s.Cluster.MasterNode]
}

// Role returns a node's role.
func (s *State) Role(n *Node) string {
	master := ""
	if s.Cluster != nil {
		master = s.Cluster.MasterNode
	}
	return RoleOf(n, master)
}

// NodeInstances returns the names of instances with the node as primary
// and as secondary.
func (s *State) NodeInstances(nodeUUID string) (primary, secondary []string) {
	add := func(i *Instance) {
		if i.PrimaryNode == nodeUUID {
			primary = append(primary, i.Ref())
		}
		for _, sn := range i.SecondaryNodes {
			if sn == nodeUUID {
				secondary = append(secondary, i.Ref())
			}
		}
	}
	s.eachNodeInstance(nodeUUID, add)
	sort.Strings(primary)
	sort.Strings(secondary)
	return primary, secondary
}

// Ref is how the instance is named in lists and references: its name, or
// for an unnamed reservation (seed 001) its UUID, as htools names it.
// LookupInstance finds it by either.
func (i *Instance) Ref() string {
	if i.Name == "" {
		return i.UUID
	}
	return i.Name
}

// NodeName returns the name of the node with the UUID, or the UUID.
func (s *State) NodeName(uuid string) string {
	if n := s.Nodes[uuid]; n != nil {
		return n.Name
	}
	return uuid
}

// NDParams returns a node's effective node parameters (cluster, then
// group, then node overrides).
func (s *State) NDParams(n *Node) map[string]any {
	out := DefaultNDParams()
	if s.Cluster != nil {
		out = mergeParams(out, s.Cluster.NDParams)
	}
	if g := s.Groups[n.Group]; g != nil {
		out = mergeParams(out, g.NDParams)
	}
	return mergeParams(out, n.NDParams)
}

// Candidates returns the nodes with the master_candidate flag, by name.
func (s *State) Candidates() []*Node {
	var out []*Node
	for _, n := range s.SortedNodes() {
		if n.MasterCandidate {
			out = append(out, n)
		}
	}
	return out
}

// FSM is the state machine: the state, the applied Raft index and a
// broadcast for blocking queries. Its methods are safe for concurrent use.
type FSM struct {
	mu      sync.RWMutex
	st      *State
	index   uint64
	changed chan struct{}

	wmu         sync.Mutex
	jobWatchers map[int64]chan struct{}
	// base is the index the state was restored at (0 for an empty start):
	// every job of a restored state last changed at or before it.
	base uint64
	// skipThrough is the index up to which entries are in the state already
	// because a snapshot brought them (Restore): Raft may hand them over
	// again, and Apply skips them.
	skipThrough uint64
}

// New returns an empty state machine.
func New() *FSM {
	return &FSM{st: newState(), changed: make(chan struct{}), jobWatchers: map[int64]chan struct{}{}}
}

// Read calls fn with the state under a read lock, with the applied index.
func (f *FSM) Read(fn func(s *State, index uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st, f.index)
}

// Index returns the last applied Raft index.
func (f *FSM) Index() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// Changed returns a channel that is closed at the next change of the
// state. Take it before reading the state, so no change falls in between.
func (f *FSM) Changed() <-chan struct{} {
	_, ch := f.watch()
	return ch
}

func (f *FSM) watch() (uint64, chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index, f.changed
}

// WaitIndex blocks until the applied index is greater than min or ctx ends,
// and returns the applied index.
func (f *FSM) WaitIndex(ctx context.Context, min uint64) uint64 {
	for {
		idx, ch := f.watch()
		if idx > min {
			return idx
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return idx
		}
	}
}

// Apply applies one log entry at the given Raft index and returns its
// response: a Response, a BatchResponse for a Batch, or an *Error with code
// unknown_command for a type this build does not know (the caller must
// stop rather than diverge).
func (f *FSM) Apply(index uint64, data []byte) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if index <= f.skipThrough {
		return Response{} // in the state already (Restore)
	}
	f.st.applying = index
	var resp any
	if len(data) == 0 {
		resp = Response{Err: errf(CodeInval, "", "empty log entry")}
	} else if CommandType(data[0]) == CmdFrames {
		resp = f.applyFrames(data[1:])
	} else if CommandType(data[0]) == CmdBatch {
		resp = f.applyBatch(data[1:])
	} else if e := unreadable(CommandType(data[0]), data[1:]); e != nil {
		resp = e
	} else {
		resp = f.applyOne(CommandType(data[0]), data[1:])
	}
	if index > f.index {
		f.index = index
	}
	close(f.changed)
	f.changed = make(chan struct{})
	for _, id := range f.st.touched {
		f.st.modIndex[id] = index
	}
	f.notifyJobs(f.st.touched, false)
	f.st.touched = f.st.touched[:0]
	return resp
}

// QueuedAt returns the index of the last entry applied since this state
// was built that queued a job for the executor (0: none).
func (f *FSM) QueuedAt() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.queuedAt
}

// JobIndex returns the index at which job id last changed (its creation,
// an update, or its archiving), or 0 when the state does not hold it.
// Blocking queries on one job wait for it to pass the client's index.
func (f *FSM) JobIndex(id int64) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if i, ok := f.st.modIndex[id]; ok {
		return i
	}
	if f.st.Jobs[id] != nil || f.st.Archived[id] != nil {
		return f.base
	}
	return 0
}

// JobChanged returns a channel that is closed at the next change of job
// id (or when the whole state is replaced). Take it before reading the
// job, so no change falls in between. Waiting on one job this way wakes a
// waiter only for its job, not for every change of the state.
func (f *FSM) JobChanged(id int64) <-chan struct{} {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	ch := f.jobWatchers[id]
	if ch == nil {
		ch = make(chan struct{})
		f.jobWatchers[id] = ch
	}
	return ch
}

// notifyJobs wakes the watchers of the given jobs, or of every job.
func (f *FSM) notifyJobs(ids []int64, all bool) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if all {
		for id, ch := range f.jobWatchers {
			close(ch)
			delete(f.jobWatchers, id)
		}
		return
	}
	for _, id := range ids {
		if ch := f.jobWatchers[id]; ch != nil {
			close(ch)
			delete(f.jobWatchers, id)
		}
	}
}

// ApplyNoop advances the applied index for log entries that carry no
// command (Raft no-ops and configuration changes), waking blocked readers.
func (f *FSM) ApplyNoop(index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if index > f.index {
		f.index = index
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// applyBatch applies a JSON Batch, the form logs written before
// CmdFrames hold.
func (f *FSM) applyBatch(body []byte) any {
	var b Batch
	if err := DecodeStrict(body, &b); err != nil {
		return Response{Err: AsError(err)}
	}
	cmds := make([][]byte, len(b.Entries))
	for i, e := range b.Entries {
		cmds[i] = append([]byte{byte(e.Type)}, e.Body...)
	}
	return f.applyEach(cmds)
}

func (f *FSM) applyFrames(body []byte) any {
	cmds, e := DecodeFrames(body)
	if e != nil {
		return Response{Err: e}
	}
	return f.applyEach(cmds)
}

// applyEach applies the commands of a batch one by one, each with its own
// response.
func (f *FSM) applyEach(cmds [][]byte) any {
	// A command this build cannot read at all is fatal for the whole
	// entry: none of it is applied.
	for _, c := range cmds {
		if len(c) > 0 {
			if e := unreadable(CommandType(c[0]), c[1:]); e != nil {
				return e
			}
		}
	}
	out := make(BatchResponse, len(cmds))
	for i, c := range cmds {
		if len(c) == 0 {
			out[i] = Response{Err: errf(CodeInval, "", "empty command in batch")}
			continue
		}
		if t := CommandType(c[0]); t == CmdBatch || t == CmdFrames {
			out[i] = Response{Err: errf(CodeInval, "", "nested batch")}
			continue
		}
		out[i] = f.applyOne(CommandType(c[0]), c[1:])
	}
	return out
}

// applyOne applies one command that unreadable has passed.
func (f *FSM) applyOne(t CommandType, body []byte) Response {
	s := f.st
	switch t {
	case CmdClusterInit:
		return decodeApply(body, func(c *ClusterInit) Response { return Response{Err: s.applyClusterInit(c)} })
	case CmdJobSubmit:
		return decodeApply(body, s.applyJobSubmit)
	case CmdJobSubmitFrames:
		c, e := DecodeJobSubmit(body)
		if e != nil {
			return Response{Err: e}
		}
		return s.applyJobSubmit(&c)
	case CmdLeaderEstablish:
		return decodeApply(body, s.applyLeaderEstablish)
	case CmdJobUpdate:
		return decodeApply(body, s.applyJobUpdate)
	case CmdJobUpdateFrames:
		c, e := DecodeJobUpdate(body)
		if e != nil {
			return Response{Err: e}
		}
		return s.applyJobUpdate(&c)
	case CmdNodeRegister:
		return decodeApply(body, func(c *NodeRegister) Response { return Response{Err: s.applyNodeRegister(c)} })
	case CmdJobCancel:
		return decodeApply(body, s.applyJobCancel)
	case CmdJobArchive:
		return decodeApply(body, s.applyJobArchive)
	case CmdJobSubmitMany:
		return decodeApply(body, s.applyJobSubmitMany)
	case CmdNodeLiveness:
		return decodeApply(body, s.applyNodeLiveness)
	case CmdNodeStorage:
		return decodeApply(body, s.applyNodeStorage)
	case CmdRepairRound:
		return decodeApply(body, s.applyRepairRound)
	case CmdMaintIncident:
		return decodeApply(body, s.applyMaintIncident)
	case CmdRAPIUsersReplace:
		return decodeApply(body, s.applyRAPIUsersReplace)
	case CmdRAPIUserPut:
		return decodeApply(body, s.applyRAPIUserPut)
	case CmdRAPIUserRemove:
		return decodeApply(body, s.applyRAPIUserRemove)
	case CmdPKIRotate:
		return decodeApply(body, s.applyPKIRotate)
	case CmdFilterPut:
		return decodeApply(body, s.applyFilterPut)
	case CmdFilterRemove:
		return decodeApply(body, s.applyFilterRemove)
	case CmdPKIKeyRotate:
		return decodeApply(body, s.applyPKIKeyRotate)
	}
	return Response{Err: errf(CodeInval, "", "a %s command cannot appear here", t)}
}

// unreadable says why this build cannot apply a command at all, or nil:
// its type is unknown, or it is a new leader's record of a newer
// LogVersion. Either means this gntd is older than the log it reads.
func unreadable(t CommandType, body []byte) *Error {
	if _, known := commandNames[t]; !known {
		return &Error{Code: CodeUnknownCmd, Msg: "unknown command type " + t.String() + "; this gntd is older than the log it is reading"}
	}
	if t == CmdLeaderEstablish {
		var c LeaderEstablish
		if DecodeStrict(body, &c) == nil && c.LogVersion > LogVersion {
			return &Error{Code: CodeUnknownCmd, Msg: fmt.Sprintf("the leader elected on %s writes log version %d and this gntd reads up to version %d; upgrade this gntd",
				c.Node, c.LogVersion, LogVersion)}
		}
	}
	return nil
}

// decodeApply decodes a command body strictly and applies it.
func decodeApply[C any](body []byte, apply func(*C) Response) Response {
	var c C
	if err := DecodeStrict(body, &c); err != nil {
		return Response{Err: AsError(err)}
	}
	return apply(&c)
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

func sortInt64(s []int64) { sort.Slice(s, func(i, j int) bool { return s[i] < s[j] }) }

// ArchivedJobs returns the archived jobs in increasing order of id. It
// is the state's own list, not a copy: nothing may change it, and of a
// live state it may be read only under the read lock (a Frozen view's
// is its own copy, read at leisure).
func (s *State) ArchivedJobs() []*ArchivedJob { return s.archOrder }

// ArchivedJobIDs returns the ids of the archived jobs in increasing order.
func (s *State) ArchivedJobIDs() []int64 {
	ids := make([]int64, len(s.archOrder))
	for i, a := range s.archOrder {
		ids[i] = a.ID
	}
	return ids
}
