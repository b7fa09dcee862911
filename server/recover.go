package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
)

// Recovery from the loss of a majority of the voters (gntd recover).
//
// When most voters are gone for good, no leader can be elected and the
// cluster cannot change anything. gntd recover, run on the data dir of one
// surviving master candidate while its gntd is stopped, rewrites its Raft
// state so that it is the only voter (hashicorp/raft's RecoverCluster,
// the equivalent of Consul's peers.json and etcd's --force-new-cluster):
// the state it had (its snapshot and every entry of its log) is kept, and
// the entries it held but did not know to be committed become committed.
// Started again, it elects itself and leads alone; the other master
// candidates of the state come back as fresh gntds (empty data dir, the
// cluster key, --join), which the pool keeper adds as non-voters and
// promotes once caught up (docs/operations.md, "Disaster recovery").

// RecoverResult is what Recover did.
type RecoverResult struct {
	// Node is the Raft server ID (node name) now the only voter, at
	// Address.
	Node    string
	Address string
	// Before lists the configuration found (ID=suffrage@address).
	Before []string
	// Index is the last Raft index the state holds; Counts its objects.
	Index  uint64
	Counts fsm.Counts
	// Cluster is the cluster's name.
	Cluster string
}

// Recover makes the candidate whose data dir is dir the only voter of
// its Raft configuration. Its gntd must be stopped (raft.db is locked
// otherwise). raftAddr overrides the address recorded in the
// configuration (for a survivor that moved to another address).
func Recover(dir, raftAddr string, log hclog.Logger) (RecoverResult, error) {
	var res RecoverResult
	if log == nil {
		log = hclog.NewNullLogger()
	}
	d := dataDir{dir}
	id, err := d.readIdentity()
	if errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("%s has no %s: it is not the data dir of a gntd", dir, identityFile)
	}
	if err != nil {
		return res, err
	}
	if id.ClusterUUID == "" {
		return res, fmt.Errorf("%s names no cluster: this gntd never joined one, there is nothing to recover", d.file(identityFile))
	}
	if !d.hasRaft() {
		return res, fmt.Errorf("%s holds no Raft state (%s is missing): recover from the data dir of a master candidate", dir, d.raftPath())
	}
	st, err := d.checkRaftStore(id.Name)
	if err != nil {
		return res, err
	}
	if st.corrupt != nil {
		return res, fmt.Errorf("%s is corrupt (%v): recover from another surviving candidate", filepath.Join(d.raftPath(), raftDBFile), st.corrupt)
	}
	if st.lost != "" {
		return res, fmt.Errorf("this candidate's Raft state is lost (%s): recover from another surviving candidate", st.lost)
	}
	dbPath := filepath.Join(d.raftPath(), raftDBFile)
	store, err := openRaftBolt(dbPath)
	if err != nil {
		return res, fmt.Errorf("opening %s: %w (is its gntd still running? stop it first)", dbPath, err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(d.raftPath(), 2, log.Named("snapshots"))
	if err != nil {
		return res, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id.Name)
	rc.Logger = log.Named("raft")
	_, trans := raft.NewInmemTransport("")
	conf, err := raft.GetConfiguration(rc, &raftFSM{fsm: fsm.New(), log: log}, store, store, snaps, trans)
	if err != nil {
		return res, fmt.Errorf("reading the Raft configuration: %w", err)
	}
	res.Node, res.Cluster = id.Name, id.ClusterName
	for _, srv := range conf.Servers {
		res.Before = append(res.Before, fmt.Sprintf("%s=%s@%s", srv.ID, srv.Suffrage, srv.Address))
		if srv.ID == rc.LocalID {
			res.Address = string(srv.Address)
		}
	}
	if raftAddr != "" {
		res.Address = raftAddr
	}
	if res.Address == "" {
		return res, fmt.Errorf("%s is not in its own Raft configuration (%v): give its Raft address with --raft-addr", id.Name, res.Before)
	}
	f := fsm.New()
	one := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: raft.ServerAddress(res.Address), Suffrage: raft.Voter}}}
	if err := raft.RecoverCluster(rc, &raftFSM{fsm: f, log: log}, store, store, snaps, trans, one); err != nil {
		return res, fmt.Errorf("recovering: %w", err)
	}
	f.Read(func(st *fsm.State, index uint64) {
		res.Index, res.Counts = index, st.CountObjects()
	})
	return res, nil
}
