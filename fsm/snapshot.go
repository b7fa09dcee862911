package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// SnapshotVersion is the format written by Snapshot. Restore reads this
// and every older version.
//
// Version history:
//   - 1: one JSON document {"version":1,"index":N,"state":{...}}, nodes
//     without "powered" and cluster without "max_raft_voters" (the first
//     development format).
//   - 2: a header line {"format":"gnt-fsm","version":2,"index":N}, then
//     one line per record: {"t":"cluster"|"group"|"node"|"instance"|"job"|
//     "queue", "v":{...}}. Records stream, so neither side holds the whole
//     encoded state twice.
//   - 3: as 2, plus "archived" records (job summaries of the archive) and
//     the job engine's fields on jobs and opcodes (cancel_requested,
//     gnt_depends, gnt_locks, gnt_steps). Version 2 snapshots read as
//     version 3 with an empty archive. Node records may carry "liveness"
//     and "liveness_since" (NodeLiveness); both are optional, so version 3
//     snapshots written before them read as nodes never observed. A
//     "pki" record (the cluster CA, optional: absent in clusters made
//     before TLS) may come before "queue", as may a
//     "maintenance" record (maintd's state, optional: absent means the
//     defaults) may come before "queue". So may "rapi_user" records, one
//     per RAPI user (written since LogVersion 3, whose header an older
//     build refuses before it meets one; absent means no users), and
//     "removed_node" records (since LogVersion 6: nodes removed within
//     a certificate's lifetime, removed.go).
const SnapshotVersion = 3

type snapHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Index   uint64 `json:"index"`
	// LogVersion repeats the queue record's, so that a build reading an
	// older log refuses the snapshot before it meets a record it cannot
	// decode (written since LogVersion 2; older builds ignore it).
	LogVersion int `json:"log_version,omitempty"`
}

type snapRecord struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v"`
}

type queueRecord struct {
	NextJobID  int64   `json:"next_job_id"`
	Epoch      uint64  `json:"epoch"`
	Finished   []int64 `json:"finished"`
	LogVersion int     `json:"log_version,omitempty"`
}

// Frozen is a point-in-time view of the state, cheap to take and safe to
// encode while Apply goes on: stored objects are never changed in place
// (every change stores a new copy), so copying the maps of pointers, and
// the archive's ordered list, is enough.
type Frozen struct {
	st    *State
	index uint64
}

// Freeze takes a Frozen view; it holds the read lock only while copying
// the maps and the archive's list.
func (f *FSM) Freeze() *Frozen {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	c := &State{
		Cluster: s.Cluster, NextJobID: s.NextJobID, Epoch: s.Epoch, Maintenance: s.Maintenance, LogVersion: s.LogVersion,
		RAPIUsers: s.RAPIUsers, PKI: s.PKI, RemovedNodes: s.RemovedNodes, Filters: s.Filters,
		Groups:    make(map[string]*Group, len(s.Groups)),
		Nodes:     make(map[string]*Node, len(s.Nodes)),
		Instances: make(map[string]*Instance, len(s.Instances)),
		Networks:  make(map[string]*Network, len(s.Networks)),
		Jobs:      make(map[int64]*Job, len(s.Jobs)),
		Finished:  append([]int64(nil), s.Finished...),
		// The archive goes by its ordered list alone (writeState reads
		// nothing else of it): a copy of 50,000 pointers instead of a
		// map of them.
		archOrder: append([]*ArchivedJob(nil), s.archOrder...),
	}
	for k, v := range s.Groups {
		c.Groups[k] = v
	}
	for k, v := range s.Nodes {
		c.Nodes[k] = v
	}
	for k, v := range s.Instances {
		c.Instances[k] = v
	}
	for k, v := range s.Networks {
		c.Networks[k] = v
	}
	for k, v := range s.Jobs {
		c.Jobs[k] = v
	}
	return &Frozen{st: c, index: f.index}
}

// Encode returns the frozen state in the current snapshot format.
func (z *Frozen) Encode() ([]byte, error) {
	var b bytes.Buffer
	if _, err := z.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteTo streams the frozen state, in the current snapshot format, to w
// through a buffer of its own: the encoded state is never held whole, so
// a snapshot of a full queue (tens of MB) costs neither that much memory
// nor the copies of a growing buffer.
func (z *Frozen) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 256<<10)
	if err := writeState(bw, z.st, z.index); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Index is the applied index the view was taken at.
func (z *Frozen) Index() uint64 { return z.index }

// Snapshot returns the state encoded in the current format.
func (f *FSM) Snapshot() ([]byte, error) { return f.Freeze().Encode() }

// writeState writes s as a snapshot taken at index to w.
func writeState(w *bufio.Writer, s *State, index uint64) error {
	// One encoder and scratch buffer serve every record: json.Marshal
	// would allocate each record's bytes anew. Encode writes what Marshal
	// returns (HTML escaped, compact) plus a newline.
	var scratch bytes.Buffer
	enc := json.NewEncoder(&scratch)
	encode := func(v any) ([]byte, error) {
		scratch.Reset()
		if err := enc.Encode(v); err != nil {
			return nil, err
		}
		b := scratch.Bytes()
		return b[:len(b)-1], nil
	}
	b, err := encode(snapHeader{Format: "gnt-fsm", Version: SnapshotVersion, Index: index, LogVersion: s.LogVersion})
	if err != nil {
		return err
	}
	w.Write(b)
	w.WriteByte('\n')
	// A record is the line json.Marshal(snapRecord{T: t, V: b}) would
	// write, built directly: marshalling V again would only re-scan and
	// compact what the encoder made compact already (the types are fixed
	// words that need no escaping). TestSnapshotRecordBytes holds the two
	// equal. Writes to a bufio.Writer fail only through Flush, which
	// WriteTo checks.
	rec := func(t string, v any) error {
		b, err := encode(v)
		if err != nil {
			return err
		}
		w.WriteString(`{"t":"`)
		w.WriteString(t)
		w.WriteString(`","v":`)
		w.Write(b)
		w.WriteString("}\n")
		return nil
	}
	if s.Cluster != nil {
		if err := rec("cluster", s.Cluster); err != nil {
			return err
		}
	}
	for _, g := range s.SortedGroups() {
		if err := rec("group", g); err != nil {
			return err
		}
	}
	for _, n := range s.SortedNodes() {
		if err := rec("node", n); err != nil {
			return err
		}
	}
	for _, i := range s.SortedInstances() {
		if err := rec("instance", i); err != nil {
			return err
		}
	}
	for _, n := range s.SortedNetworks() {
		if err := rec("network", n); err != nil {
			return err
		}
	}
	for _, id := range s.SortedJobIDs() {
		if err := rec("job", s.Jobs[id]); err != nil {
			return err
		}
	}
	for _, a := range s.archOrder {
		if err := rec("archived", a); err != nil {
			return err
		}
	}
	if s.Maintenance != nil {
		if err := rec("maintenance", s.Maintenance); err != nil {
			return err
		}
	}
	if s.PKI != nil {
		if err := rec("pki", s.PKI); err != nil {
			return err
		}
	}
	for _, r := range s.sortedRemoved() {
		if err := rec("removed_node", r); err != nil {
			return err
		}
	}
	for _, u := range s.SortedRAPIUsers() {
		if err := rec("rapi_user", u); err != nil {
			return err
		}
	}
	for _, f := range s.SortedFilters() {
		if err := rec("job_filter", f); err != nil {
			return err
		}
	}
	return rec("queue", queueRecord{NextJobID: s.NextJobID, Epoch: s.Epoch, Finished: s.Finished, LogVersion: s.LogVersion})
}

// Hash is a digest of the whole state (not the index), equal on every
// candidate that applied the same log.
func (f *FSM) Hash() string {
	z := f.Freeze()
	z.index = 0
	h := sha256.New()
	if _, err := z.WriteTo(h); err != nil {
		return "error: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Restore replaces the state with a snapshot of any supported version. The
// new state is built aside and swapped in only when the whole snapshot
// decoded; a bad snapshot leaves the state as it was.
//
// A snapshot no newer than the state is declined: hashicorp/raft installs
// a leader's snapshot on a follower even when the follower has applied
// past it (seen in a chaos run: a restarted follower installed the
// leader's snapshot, applied 76 more entries, lost a pipelined append,
// failed the leader's retry for the entry its own compaction had just
// removed, and was sent the same snapshot again, so its reads went back
// from index 1741 to 1665). The state here is that snapshot's plus the
// committed entries after it, which is what replaying them would give, so
// it is kept, reads on this replica never go back, and the entries Raft
// hands over again up to the state's index are skipped (Apply).
func (f *FSM) Restore(r io.Reader) error {
	st, index, err := DecodeSnapshot(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.index > 0 && index <= f.index {
		f.skipThrough = f.index
		return nil
	}
	// Raft labels a snapshot with the index it last applied; the state's
	// own index can only be as new (or newer, if it was taken while
	// entries were being skipped), and entries up to it are skipped too.
	f.skipThrough = index
	f.st = st
	f.index, f.base = index, index
	close(f.changed)
	f.changed = make(chan struct{})
	f.notifyJobs(nil, true)
	return nil
}

// Reset empties the state machine, for a replica that starts over from an
// empty Raft log (a node that stopped being a candidate and became one
// again): replaying the log on top of old state would diverge.
func (f *FSM) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = newState()
	f.index, f.base, f.skipThrough = 0, 0, 0
	close(f.changed)
	f.changed = make(chan struct{})
	f.notifyJobs(nil, true)
}

// DecodeSnapshot reads a snapshot of any supported version.
func DecodeSnapshot(r io.Reader) (*State, uint64, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	first, err := br.Peek(1)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: empty or unreadable: %w", err)
	}
	if first[0] != '{' {
		return nil, 0, fmt.Errorf("snapshot: not a gnt snapshot (starts with %q)", first[0])
	}
	dec := json.NewDecoder(br)
	var probe map[string]json.RawMessage
	if err := dec.Decode(&probe); err != nil {
		return nil, 0, fmt.Errorf("snapshot: bad header: %w", err)
	}
	if _, ok := probe["format"]; !ok {
		return decodeV1(probe)
	}
	var h snapHeader
	if err := remarshal(probe, &h); err != nil || h.Format != "gnt-fsm" {
		return nil, 0, fmt.Errorf("snapshot: bad header")
	}
	if h.Version != 2 && h.Version != SnapshotVersion {
		return nil, 0, fmt.Errorf("snapshot: format version %d is not supported by this gntd (it reads 1..%d)", h.Version, SnapshotVersion)
	}
	if h.LogVersion > LogVersion {
		return nil, 0, fmt.Errorf("snapshot: it holds a log of version %d and this gntd reads up to version %d; upgrade this gntd", h.LogVersion, LogVersion)
	}
	st := newState()
	sawQueue := false
	for n := 1; ; n++ {
		var rec snapRecord
		if err := dec.Decode(&rec); err == io.EOF {
			break
		} else if err != nil {
			return nil, 0, fmt.Errorf("snapshot: record %d: %w", n, err)
		}
		if err := st.restoreRecord(rec); err != nil {
			return nil, 0, fmt.Errorf("snapshot: record %d (%s): %w", n, rec.T, err)
		}
		if rec.T == "queue" {
			sawQueue = true
		}
	}
	if !sawQueue {
		return nil, 0, fmt.Errorf("snapshot: truncated (no queue record)")
	}
	if err := st.check(); err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	st.reindex()
	return st, h.Index, nil
}

func (s *State) restoreRecord(rec snapRecord) error {
	strict := func(v any) error {
		if err := DecodeStrict(rec.V, v); err != nil {
			return err
		}
		return nil
	}
	switch rec.T {
	case "cluster":
		var c Cluster
		if err := strict(&c); err != nil {
			return err
		}
		c.normalizeParams()
		s.Cluster = &c
	case "group":
		var g Group
		if err := strict(&g); err != nil {
			return err
		}
		g.normalizeParams()
		s.Groups[g.UUID] = &g
	case "node":
		var n Node
		if err := strict(&n); err != nil {
			return err
		}
		s.Nodes[n.UUID] = &n
	case "instance":
		var i Instance
		if err := strict(&i); err != nil {
			return err
		}
		i.normalizeParams()
		s.Instances[i.UUID] = &i
	case "network":
		var n Network
		if err := strict(&n); err != nil {
			return err
		}
		if err := n.check(); err != nil {
			return err
		}
		if s.Networks == nil {
			s.Networks = map[string]*Network{}
		}
		s.Networks[n.UUID] = &n
	case "job":
		var j Job
		if err := strict(&j); err != nil {
			return err
		}
		s.Jobs[j.ID] = &j
	case "archived":
		var a ArchivedJob
		if err := strict(&a); err != nil {
			return err
		}
		s.Archived[a.ID] = &a
	case "maintenance":
		var m Maintenance
		if err := strict(&m); err != nil {
			return err
		}
		m.normalize()
		s.Maintenance = &m
	case "removed_node":
		var r removedNode
		if err := strict(&r); err != nil {
			return err
		}
		if e := ValidateHostname("removed_node.name", r.Name); e != nil {
			return e
		}
		if s.RemovedNodes == nil {
			s.RemovedNodes = map[string]int64{}
		}
		s.RemovedNodes[r.Name] = r.At
	case "rapi_user":
		var u RAPIUser
		if err := strict(&u); err != nil {
			return err
		}
		if e := u.Validate("rapi_user"); e != nil {
			return e
		}
		if s.RAPIUsers[u.Name] != nil {
			return fmt.Errorf("user %s appears twice", u.Name)
		}
		if s.RAPIUsers == nil {
			s.RAPIUsers = map[string]*RAPIUser{}
		}
		s.RAPIUsers[u.Name] = &u
	case "job_filter":
		var f JobFilter
		if err := strict(&f); err != nil {
			return err
		}
		if e := ValidateFilterUUID("job_filter.uuid", f.UUID); e != nil {
			return e
		}
		if e := CheckFilter(f.Priority, f.Action, f.RateLimit, f.Predicates, f.ReasonTrail); e != nil {
			return e
		}
		if s.Filters[f.UUID] != nil {
			return fmt.Errorf("filter %s appears twice", f.UUID)
		}
		if s.Filters == nil {
			s.Filters = map[string]*JobFilter{}
		}
		s.Filters[f.UUID] = &f
	case "pki":
		var p PKI
		if err := strict(&p); err != nil {
			return err
		}
		s.PKI = &p
	case "queue":
		var q queueRecord
		if err := strict(&q); err != nil {
			return err
		}
		if q.LogVersion > LogVersion {
			return fmt.Errorf("the snapshot holds a log of version %d and this gntd reads up to version %d; upgrade this gntd", q.LogVersion, LogVersion)
		}
		s.NextJobID, s.Epoch, s.Finished, s.LogVersion = q.NextJobID, q.Epoch, q.Finished, q.LogVersion
	default:
		return fmt.Errorf("unknown record type %q", rec.T)
	}
	return nil
}

// check verifies references inside a decoded state.
func (s *State) check() error {
	for u, n := range s.Nodes {
		if u == "" || n.Name == "" {
			return fmt.Errorf("node without name or uuid")
		}
		if s.Groups[n.Group] == nil {
			return fmt.Errorf("node %s is in unknown group %q", n.Name, n.Group)
		}
	}
	for _, j := range s.Jobs {
		if j.ID <= 0 || j.ID >= s.NextJobID {
			return fmt.Errorf("job id %d outside 1..%d", j.ID, s.NextJobID-1)
		}
		if s.Archived[j.ID] != nil {
			return fmt.Errorf("job %d is both queued and archived", j.ID)
		}
	}
	for id := range s.Archived {
		if id <= 0 || id >= s.NextJobID {
			return fmt.Errorf("archived job id %d outside 1..%d", id, s.NextJobID-1)
		}
	}
	for _, n := range s.Networks {
		for g := range n.Groups {
			if s.Groups[g] == nil {
				return fmt.Errorf("network %s is connected to unknown group %q", n.Name, g)
			}
		}
	}
	if s.Cluster == nil && (len(s.Nodes) > 0 || len(s.Groups) > 0) {
		return fmt.Errorf("nodes or groups without a cluster")
	}
	return nil
}

// v1 format types: the fields that differ from the current model.
type v1State struct {
	Cluster   *json.RawMessage     `json:"cluster"`
	Groups    map[string]*Group    `json:"groups"`
	Nodes     []json.RawMessage    `json:"nodes"`
	Instances map[string]*Instance `json:"instances"`
	Jobs      map[string]*Job      `json:"jobs"`
	NextJobID int64                `json:"next_job_id"`
	Epoch     uint64               `json:"epoch"`
}

func decodeV1(doc map[string]json.RawMessage) (*State, uint64, error) {
	var version int
	var index uint64
	if err := json.Unmarshal(doc["version"], &version); err != nil || version != 1 {
		return nil, 0, fmt.Errorf("snapshot: unknown format (no format field and version is not 1)")
	}
	if raw, ok := doc["index"]; ok {
		if err := json.Unmarshal(raw, &index); err != nil {
			return nil, 0, fmt.Errorf("snapshot: v1 index: %w", err)
		}
	}
	var v1 v1State
	if err := json.Unmarshal(doc["state"], &v1); err != nil {
		return nil, 0, fmt.Errorf("snapshot: v1 state: %w", err)
	}
	st := newState()
	if v1.Cluster != nil {
		c := Cluster{MaxVoters: DefaultMaxVoters}
		if err := json.Unmarshal(*v1.Cluster, &c); err != nil {
			return nil, 0, fmt.Errorf("snapshot: v1 cluster: %w", err)
		}
		if c.NDParams == nil {
			c.NDParams = DefaultNDParams()
		}
		c.normalizeParams()
		st.Cluster = &c
	}
	for u, g := range v1.Groups {
		g.UUID = u
		g.normalizeParams()
		st.Groups[u] = g
	}
	for i, raw := range v1.Nodes {
		n := Node{Powered: true} // v1 had no powered flag: every node was powered
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, 0, fmt.Errorf("snapshot: v1 node %d: %w", i, err)
		}
		st.Nodes[n.UUID] = &n
	}
	for u, i := range v1.Instances {
		i.UUID = u
		i.normalizeParams()
		st.Instances[u] = i
	}
	for _, j := range v1.Jobs {
		st.Jobs[j.ID] = j
		if Finalized(j.Status) {
			st.Finished = append(st.Finished, j.ID)
		}
	}
	st.NextJobID, st.Epoch = v1.NextJobID, v1.Epoch
	if st.NextJobID == 0 {
		st.NextJobID = 1
	}
	sortInt64(st.Finished)
	if err := st.check(); err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	st.reindex()
	return st, index, nil
}

func remarshal(in any, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
