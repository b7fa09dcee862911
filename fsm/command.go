package fsm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// CommandType is the first byte of every log entry. Values are assigned by
// hand and never reused or renumbered: a log written by an older gntd must
// mean the same thing to a newer one.
type CommandType uint8

// Command types.
const (
	CmdClusterInit     CommandType = 1 // ClusterInit
	CmdJobSubmit       CommandType = 2 // JobSubmit
	CmdBatch           CommandType = 3 // a list of other commands, applied one by one
	CmdLeaderEstablish CommandType = 4 // LeaderEstablish
	CmdJobUpdate       CommandType = 5 // JobUpdate
	CmdNodeRegister    CommandType = 6 // NodeRegister
	CmdJobCancel       CommandType = 7 // JobCancel
	CmdJobArchive      CommandType = 8 // JobArchive
	CmdJobSubmitMany   CommandType = 9 // JobSubmitMany

	CmdNodeLiveness CommandType = 10 // NodeLiveness (liveness.go)

	CmdRepairRound   CommandType = 11 // RepairRound (maintenance.go)
	CmdMaintIncident CommandType = 12 // MaintIncident (maintenance.go)
	// CmdFrames is a batch in binary framing: for each command, its
	// length as a uvarint, then the command (type byte and body). It
	// replaces the JSON CmdBatch, which a replica still applies from
	// older logs, because decoding JSON scanned every command once more
	// on every replica.
	CmdFrames CommandType = 13
	// CmdJobSubmitFrames is a JobSubmit in binary framing (see
	// JobSubmit.encode); the JSON CmdJobSubmit still applies from older
	// logs.
	CmdJobSubmitFrames CommandType = 14
	// CmdJobUpdateFrames is a JobUpdate in binary framing (frames.go);
	// the JSON CmdJobUpdate still applies from older logs.
	CmdJobUpdateFrames CommandType = 15

	CmdRAPIUsersReplace CommandType = 16 // RAPIUsersReplace (rapiusers.go)
	CmdRAPIUserPut      CommandType = 17 // RAPIUserPut
	CmdRAPIUserRemove   CommandType = 18 // RAPIUserRemove

	CmdPKIRotate    CommandType = 19 // PKIRotate (pki.go)
	CmdPKIKeyRotate CommandType = 20 // PKIKeyRotate (pki.go)

	CmdFilterPut    CommandType = 21 // FilterPut (filters.go)
	CmdFilterRemove CommandType = 22 // FilterRemove

	CmdNodeStorage CommandType = 23 // NodeStorageReport (storage.go)
)

var commandNames = map[CommandType]string{
	CmdClusterInit:     "cluster-init",
	CmdJobSubmit:       "job-submit",
	CmdBatch:           "batch",
	CmdFrames:          "frames",
	CmdJobSubmitFrames: "job-submit-frames",
	CmdJobUpdateFrames: "job-update-frames",
	CmdLeaderEstablish: "leader-establish",
	CmdJobUpdate:       "job-update",
	CmdNodeRegister:    "node-register",
	CmdJobCancel:       "job-cancel",
	CmdJobArchive:      "job-archive",
	CmdJobSubmitMany:   "job-submit-many",

	CmdNodeLiveness: "node-liveness",

	CmdRepairRound:   "repair-round",
	CmdMaintIncident: "maint-incident",

	CmdRAPIUsersReplace: "rapi-users-replace",
	CmdRAPIUserPut:      "rapi-user-put",
	CmdRAPIUserRemove:   "rapi-user-remove",

	CmdPKIRotate:    "pki-rotate",
	CmdPKIKeyRotate: "pki-key-rotate",

	CmdFilterPut:    "filter-put",
	CmdFilterRemove: "filter-remove",

	CmdNodeStorage: "node-storage",
}

func (t CommandType) String() string {
	if n, ok := commandNames[t]; ok {
		return n
	}
	return fmt.Sprintf("command-%d", uint8(t))
}

// Command is a typed command body ready to be encoded into a log entry.
type Command interface {
	CommandType() CommandType
}

// NodeSpec describes a node's gntd as it presents itself.
type NodeSpec struct {
	Name        string    `json:"name"`
	UUID        string    `json:"uuid,omitempty"`
	PrimaryIP   string    `json:"primary_ip"`
	SecondaryIP string    `json:"secondary_ip,omitempty"`
	Addrs       Addrs     `json:"addrs"`
	Resources   Resources `json:"resources"`
	Version     string    `json:"version,omitempty"`
	// Hypervisor is the node agent's driver (Node.Hypervisor).
	Hypervisor string `json:"hypervisor,omitempty"`
}

// ClusterInit creates the cluster with its first node, which becomes the
// master candidate and master. Applied once, on a fresh state.
type ClusterInit struct {
	Now               int64          `json:"now"`
	Name              string         `json:"cluster_name"`
	UUID              string         `json:"cluster_uuid"`
	GroupUUID         string         `json:"group_uuid"`
	Node              NodeSpec       `json:"node"`
	CandidatePoolSize int            `json:"candidate_pool_size,omitempty"`
	MaxVoters         int            `json:"max_raft_voters,omitempty"`
	NDParams          map[string]any `json:"ndparams,omitempty"`
	// PKI is the cluster CA the initialising gntd made (its key sealed).
	PKI *PKI `json:"pki,omitempty"`
	// MaintdHarep, when set, records whether maintd does harep's work
	// (Maintenance.Harep); an init without it (logged before it
	// existed) leaves harep on, as it was.
	MaintdHarep *bool `json:"maintd_harep,omitempty"`
	// UIDPool is the cluster's initial user-id pool (empty: none).
	UIDPool []UIDRange `json:"uid_pool,omitempty"`
}

// JobSubmit queues a job. When every opcode only changes the configuration,
// Apply runs them at once as one transaction (the fast path): the job is
// recorded as success, or the whole submission fails and nothing changes.
type JobSubmit struct {
	Now int64             `json:"now"`
	Ops []json.RawMessage `json:"ops"`
	// UUIDs holds one proposer-drawn UUID per opcode (used by opcodes that
	// create an object).
	UUIDs []string `json:"uuids"`
	// Token is the client's name for this submission (header
	// X-Gnt-Submit-Token), empty when it gave none. A submission whose
	// token names a job the state still holds creates nothing and answers
	// with that job, so a client may resend a submission whose outcome it
	// did not learn (the connection broke, or leadership was lost while
	// committing) without running the job twice. Since LogVersion 1.
	Token string `json:"token,omitempty"`
}

// LeaderEstablish is written by a new leader after its Barrier: it records
// the master node and starts a new executor epoch, which fences every job
// update a previous leader might still send.
type LeaderEstablish struct {
	Now  int64  `json:"now"`
	Node string `json:"node"` // node name of the new leader's gntd
	// LogVersion is the new leader's LogVersion (0 in logs written before
	// there was one).
	LogVersion int `json:"log_version,omitempty"`
}

// LogVersion is the version of the log this build writes: its command
// types and bodies, and the opcodes inside job submissions. Raise it with
// any change an older gntd would apply differently or refuse: a new
// command type, a new field in a command or an opcode, a changed rule.
//
// Every new leader records its version first (LeaderEstablish). A replica
// whose build reads an older version stops at that entry (exit status 70,
// like an unknown command type) instead of applying what the new leader
// writes next with older rules and drifting from the other replicas
// without a word: strict decoding would refuse a field it does not know
// where a newer replica accepts it. The highest version recorded is kept
// in the state and its snapshots, and an older build refuses to restore
// such a snapshot.
//
// Version 0 is the log as builds wrote it before the version existed; it
// is not written (omitempty), so that those builds, which decode strictly
// and would refuse an unknown field, still apply the records of this one.
// Builds from this one on stop at a higher version; older ones cannot.
//
// TestLogSchema keeps each version's schema (commands, opcodes, frames)
// in testdata/log-schema-v<N>.txt and fails when the log changes while the
// version stays.
//
// Version 1 adds the submission token (JobSubmit.Token, the last frame of
// a CmdJobSubmitFrames entry when set). Version 2 adds it to
// JobSubmitMany (its "token" field). Version 3 adds the RAPI users
// (CmdRAPIUsersReplace, CmdRAPIUserPut, CmdRAPIUserRemove) and the
// cluster option rapi_anonymous_read (OP_CLUSTER_SET_PARAMS), and the
// cluster CA (ClusterInit.PKI).
// Version 4 adds the poison-job guard: job attempts (ActionAttempt, and
// ActionStart records one), which may fail a job, and the debugging
// opcode OP_TEST_CRASH.
// Version 5 adds the rotation of the cluster CA (CmdPKIRotate, and the
// phase of a rotation in PKI, which ClusterInit carries).
//
// Version 6 changes no entry's shape but what removing a node does: the
// state remembers the removal (RemovedNodes), and gntds refuse the removed
// node's older certificates; a gntd of version 5 would not.
//
// Version 7 adds the opcodes OP_GROUP_RENAME, OP_GROUP_ASSIGN_NODES,
// OP_CLUSTER_REDIST_CONF and OP_INSTANCE_QUERY_DATA.
//
// Version 8 adds the opcode OP_INSTANCE_MULTI_ALLOC.
//
// Version 9 adds the opcode OP_INSTANCE_GROW_DISK.
//
// Version 10 adds the renewal of cluster.key (CmdPKIKeyRotate, and its
// phase, key ID and sealed key in PKI).
//
// Version 11 adds the parameter model (params.go): the cluster's
// enabled_hypervisors, default_hypervisor, hvparams, beparams, nicparams,
// diskparams and osparams, a group's diskparams, an instance's
// hypervisor, hvparams, beparams and osparams, a NIC's vlan; an instance
// record may not hold a global hypervisor parameter.
//
// Version 12 adds the switch of maintd's harep work: maintd_harep of
// OP_CLUSTER_SET_PARAMS and ClusterInit, gnt_harep of the maintenance
// state (absent: on, as before).
//
// Version 13 adds the job filter rules (CmdFilterPut, CmdFilterRemove,
// JobCancel.Filter); while a rule that holds jobs exists no submission
// takes the configuration fast path.
//
// Version 14 changes no entry's shape but a rule: instances of disk
// templates file and sharedfile are accepted.
//
// Version 15 adds the parameter model's opcode fields: hvparams,
// beparams, nicparams, diskparams, osparams, enabled_hypervisors and
// default_hypervisor in OP_CLUSTER_SET_PARAMS; diskparams in OP_GROUP_ADD
// and OP_GROUP_SET_PARAMS; a NIC's vlan and beparams auto_balance,
// always_failover and spindle_use in OP_INSTANCE_CREATE; hvparams,
// osparams, nics, os_name, offline, runtime_mem and disk_template (the
// last two refused) and disk modify in OP_INSTANCE_SET_PARAMS; tags,
// conflicts_check, opportunistic_locking, identify_defaults and
// ignore_ipolicy in OP_INSTANCE_CREATE. Their
// parameters are checked against the tables of paramdefs.go.
//
// Version 16 changes no entry's shape but rules: a forthcoming instance
// may be unnamed (OP_INSTANCE_CREATE without instance_name, an instance
// record with an empty name), which a replica of version 15 refuses.
//
// Version 17 adds networks: the opcodes OP_NETWORK_ADD, _REMOVE,
// _SET_PARAMS, _CONNECT and _DISCONNECT, the tag kind network, a NIC's
// network and ip=pool (resolved in InstancePut; in OP_INSTANCE_CREATE and
// the NIC modifications of OP_INSTANCE_SET_PARAMS), and the network record
// of snapshots.
//
// Version 18 changes no entry's shape but a rule: iallocator and
// default_iallocator take a list of allocators, "name[,name...]", of any
// plain file names (the leader checks at submission which it can run),
// where a replica of version 17 accepts only "hail".
//
// Version 19 adds the storage-unit opcodes OP_NODE_QUERY_STORAGE,
// OP_NODE_MODIFY_STORAGE and OP_REPAIR_NODE_STORAGE (jobs that act on the
// nodes' agents; no configuration change).
//
// Version 20 adds the opcodes OP_INSTANCE_ACTIVATE_DISKS and
// OP_INSTANCE_DEACTIVATE_DISKS.
//
// Version 21 adds the opcode OP_NETWORK_RENAME.
//
// Version 22 adds maintd's gnt_balance_max_moves (OP_CLUSTER_SET_PARAMS
// maint_balance_max_moves): how many balancing moves one round makes.
//
// Version 23 adds the user-id pool: the cluster's uid_pool (ClusterInit's
// uid_pool, and uid_pool, add_uids and remove_uids of
// OP_CLUSTER_SET_PARAMS, which a replica of version 22 refuses).
//
// Version 24 adds the driver a node's gntd runs: hypervisor of the node
// record and of NodeRegister's and ClusterInit's node.
//
// Version 25 checks at submission a queued dry run of configuration
// opcodes without dependencies (JobSubmit, JobSubmitMany): one the checks
// refuse is refused as on the fast path instead of queued.
//
// Version 26 adds the nodes' storage units (CmdNodeStorage,
// NodeStorageReport, and a node record's storage).
//
// Version 27 adds the disk parameter format (raw, qcow2) of the file and
// sharedfile templates, and diskparams of an instance (only in the copy
// the node agents receive).
//
// Version 28 adds why a node takes no drbd disks (no_drbd of
// NodeStorageReport and of a node's storage).
//
// Version 29 changes no entry's shape but a rule: hypervisor parameters
// whose effective security_model and security_domain break Ganeti's rule
// (user needs a domain, none and pool take none) are refused at instance
// create and modify and cluster modify, where a replica of version 28
// accepts them.
//
// Version 30 adds an instance's network_port (the cluster's port pool,
// ports.go): InstancePut allocates it, and the first leader of version 30
// gives the records that need one theirs.
//
// Version 31 adds the opcodes OP_INSTANCE_CHANGE_GROUP and
// OP_GROUP_EVACUATE (opcodes_changegroup.go), which a replica of version
// 30 refuses as unknown, and OP_INSTANCE_MULTI_ALLOC's failed (the
// instances an allocator could not place), which it refuses as an
// unknown field.
//
// Version 32 lets the poison-job guard tell a leader that stepped down
// from one that died: JobUpdate.Incarnation and JobUpdate.Survived on
// start and attempt records, kept in the job's attempts (Attempt.Node,
// Attempt.Incarnation), which a replica of version 31 refuses as unknown
// fields.
//
// Version 33 adds a drbd disk's logical id (Disk.DRBD: port, secret and
// each node's minor), which InstancePut allocates and a replica of version
// 32 refuses as an unknown field: from version 33 InstancePut gives each
// drbd disk its port (from the pool network ports draw from) and minors,
// keeps them across changes, and refuses a drbd record without a secret
// (drbdids.go).
//
// Version 34 accepts wait_for_sync in OP_INSTANCE_SET_PARAMS (the job
// waits for the resync of the drbd disks it adds), which a replica of
// version 33 refuses as unsupported.
//
// Version 35 adds a node's boot id to its storage report
// (NodeStorageReport.BootID): a change of it queues jobs activating the
// disks of the drbd instances the node is the secondary of. It also
// refuses a routed NIC whose IP is the unspecified, a loopback or a
// multicast address (at submission and in a job's records), which a
// replica of version 34 accepts.
const LogVersion = 35

// Job update actions.
const (
	ActionWait     = "wait"     // opcode waits (for locks): queued -> waiting
	ActionStart    = "start"    // mark opcode running, recording the locks it holds
	ActionStep     = "step"     // record a completed step of a running opcode
	ActionFinish   = "finish"   // record an opcode's final status and result
	ActionApply    = "apply"    // apply a configuration opcode of an executor job
	ActionCancel   = "cancel"   // the executor stops the job: opcode and the rest canceled
	ActionPriority = "priority" // raise the opcode's priority by one (lock strategy exhausted)
	// ActionAttempt records that the executor resumes an opcode an
	// earlier executor started, before it runs anything of it; the
	// poison-job guard may fail the job instead, and a cancel requested
	// before is carried out instead (LogVersion 4).
	ActionAttempt = "attempt"
)

// JobUpdate records progress of the leader's executor on one opcode.
type JobUpdate struct {
	Now     int64           `json:"now"`
	Epoch   uint64          `json:"epoch"`
	JobID   int64           `json:"job_id"`
	OpIndex int             `json:"op_index"`
	Action  string          `json:"action"`
	Status  string          `json:"status,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Log     []string        `json:"log,omitempty"`
	// Locks (start) are the locks the executor holds for the opcode.
	Locks []LockDecl `json:"locks,omitempty"`
	// Step (step) is the index of the completed step: it must be the
	// number of steps recorded so far, so a step is recorded once.
	Step     int    `json:"step,omitempty"`
	StepName string `json:"step_name,omitempty"`
	// Changes (step, or finish with success) are configuration changes
	// the step made, applied in one transaction with its record; if one
	// is refused, nothing of the update is applied.
	Changes []StepChange `json:"changes,omitempty"`
	// Incarnation (start, attempt) is the incarnation of the proposing
	// executor's gntd, kept in the attempt it records (poison-job guard,
	// attempts.go). Since LogVersion 32.
	Incarnation string `json:"incarnation,omitempty"`
	// Survived (start, attempt) are earlier epochs whose leaders the
	// executor found running with the incarnation their attempts
	// recorded: the guard does not count them as deaths. Since
	// LogVersion 32.
	Survived []uint64 `json:"survived,omitempty"`
}

// JobCancel asks to cancel a job: a job that has not started is canceled
// at once; a running one is marked and stopped by the executor at its
// next step boundary.
type JobCancel struct {
	Now   int64  `json:"now"`
	JobID int64  `json:"job_id"`
	Who   string `json:"who,omitempty"` // for the job log: the reason trail's source
	// Filter, set by the leader's queue, is the REJECT filter rule that
	// applies to the job (which has not started): its opcodes are
	// canceled with a result naming the rule. Since LogVersion 13.
	Filter string `json:"filter,omitempty"`
}

// JobArchive moves finished jobs out of the active queue into the
// archive, where a summary stays queryable. The leader's archiver sends
// OlderThan (with its epoch); an operator names IDs.
type JobArchive struct {
	Now   int64   `json:"now"`
	Epoch uint64  `json:"epoch,omitempty"`
	IDs   []int64 `json:"ids,omitempty"`
	// OlderThan archives every finished job that ended more than this many
	// nanoseconds before Now.
	OlderThan int64 `json:"older_than,omitempty"`
}

// JobSpec is one job of a JobSubmitMany.
type JobSpec struct {
	Ops   []json.RawMessage `json:"ops"`
	UUIDs []string          `json:"uuids"`
}

// JobSubmitMany queues several jobs at once, all or none, with
// consecutive ids; relative dependencies (-1, -2, ...) name earlier jobs
// of the same submission. Every job goes to the executor.
type JobSubmitMany struct {
	Now  int64     `json:"now"`
	Jobs []JobSpec `json:"jobs"`
	// Token names the submission as JobSubmit.Token does: a submission
	// whose token names jobs the state still holds creates nothing and
	// answers with their ids. The first job records the token itself, job
	// k > 0 the token and "#k" (ManyJobToken), which no client token can
	// be. Since LogVersion 2.
	Token string `json:"token,omitempty"`
}

// NodeRegister records what a node's gntd reports about itself (addresses,
// resources, version). The node must already be in the configuration.
type NodeRegister struct {
	Now  int64    `json:"now"`
	Node NodeSpec `json:"node"`
}

// Batch is several commands in one log entry; each is applied on its own
// and gets its own response.
type Batch struct {
	Entries []BatchEntry `json:"entries"`
}

// BatchEntry is one command inside a Batch.
type BatchEntry struct {
	Type CommandType     `json:"t"`
	Body json.RawMessage `json:"b"`
}

// CommandType implementations.
func (ClusterInit) CommandType() CommandType     { return CmdClusterInit }
func (JobSubmit) CommandType() CommandType       { return CmdJobSubmit }
func (LeaderEstablish) CommandType() CommandType { return CmdLeaderEstablish }
func (JobUpdate) CommandType() CommandType       { return CmdJobUpdate }
func (NodeRegister) CommandType() CommandType    { return CmdNodeRegister }
func (JobCancel) CommandType() CommandType       { return CmdJobCancel }
func (JobArchive) CommandType() CommandType      { return CmdJobArchive }
func (JobSubmitMany) CommandType() CommandType   { return CmdJobSubmitMany }
func (Batch) CommandType() CommandType           { return CmdBatch }

// Encode turns a command into a log entry: one type byte, then the body.
// Job submissions and updates are written in binary frames (frames.go,
// types CmdJobSubmitFrames and CmdJobUpdateFrames, not the CommandType
// of their JSON form); every other command is JSON.
func Encode(c Command) ([]byte, error) {
	switch c := c.(type) {
	case JobSubmit:
		return c.encode()
	case JobUpdate:
		return c.encode()
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+1)
	out = append(out, byte(c.CommandType()))
	return append(out, body...), nil
}

// EncodeBatch packs already encoded commands into one CmdFrames log
// entry, copying them as they are.
func EncodeBatch(entries [][]byte) ([]byte, error) {
	size := 1
	for _, e := range entries {
		if len(e) == 0 {
			return nil, fmt.Errorf("empty entry in batch")
		}
		if t := CommandType(e[0]); t == CmdBatch || t == CmdFrames {
			return nil, fmt.Errorf("a batch cannot hold another batch")
		}
		size += len(e) + binary.MaxVarintLen64
	}
	out := make([]byte, 0, size)
	out = append(out, byte(CmdFrames))
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	return out, nil
}

// DecodeFrames splits the body of a CmdFrames entry (without its type
// byte) into its commands, which alias body. It checks the whole framing
// before returning anything, so a damaged entry is refused as a whole.
func DecodeFrames(body []byte) ([][]byte, *Error) {
	var out [][]byte
	for off := 0; off < len(body); {
		n, k := binary.Uvarint(body[off:])
		if k <= 0 {
			return nil, errf(CodeInval, "", "batch frame %d: bad length at offset %d", len(out), off)
		}
		off += k
		if n == 0 || n > uint64(len(body)-off) {
			return nil, errf(CodeInval, "", "batch frame %d: length %d at offset %d does not fit the %d bytes left", len(out), n, off, len(body)-off)
		}
		out = append(out, body[off:off+int(n)])
		off += int(n)
	}
	if len(out) == 0 {
		return nil, errf(CodeInval, "", "empty batch")
	}
	return out, nil
}

// Response is the result of applying one command.
type Response struct {
	// JobID is the id of the job a JobSubmit created.
	JobID int64 `json:"job_id,omitempty"`
	// JobIDs are the ids of the jobs a JobSubmitMany created, or those a
	// JobArchive archived.
	JobIDs []int64 `json:"job_ids,omitempty"`
	// Epoch is the executor epoch a LeaderEstablish started.
	Epoch uint64 `json:"epoch,omitempty"`
	// Job is the job as recorded after the command (JobSubmit, JobUpdate).
	Job *Job `json:"job,omitempty"`
	// Err is set when the command was refused; nothing changed then.
	Err *Error `json:"error,omitempty"`
	// Index is set when a JobSubmit or JobSubmitMany was a resend (its
	// token names a job already made): the index of the entry that made
	// the job, which is where the submission took effect, not the index of
	// the resend.
	Index uint64 `json:"index,omitempty"`
}

// BatchResponse is what Apply returns for a Batch: one Response per entry.
type BatchResponse []Response
