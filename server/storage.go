package server

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
)

// The leader's storage recorder rides on the self-diagnose poller: each
// time the poller has asked a node for its self-diagnose report, it asks
// the node for its storage units (the node RPC's storage-list) and
// records them in the state (fsm.NodeStorageReport), fenced by the
// leadership's epoch, when they changed enough to matter to placement: a
// unit appeared or went, its allocatable flag or volume group changed,
// the driver's directories or volume group changed, or a size or free
// space moved by more than storageThreshold. An idle cluster writes
// nothing. A listing that failed in part (an LVM tool that is there but
// failed) is not recorded: the units it lacks would read as gone, so the
// last recorded report stays until a whole one comes.

// storageMinThreshold is the smallest change of a unit's size or free
// space that is recorded; larger units record changes of
// 1/storageThresholdDiv of their size.
const (
	storageMinThreshold = 8 // MiB
	storageThresholdDiv = 200
)

// storageThreshold is the change of a unit's figures worth a write.
func storageThreshold(size int64) int64 {
	return max(storageMinThreshold, size/storageThresholdDiv)
}

// storageLister is what the recorder needs of the node RPC.
type storageLister interface {
	StorageList(ctx context.Context, node *fsm.Node) (rpc.NodeStorageReport, error)
}

// storageRecorder records the nodes' storage units.
type storageRecorder struct {
	FSM   *fsm.FSM
	Apply jobs.Applier
	Epoch uint64
	List  storageLister
	Log   hclog.Logger
	// Warn logs a problem, rate-limited by kind (the poller's
	// logLimited).
	Warn  func(node, kind, msg string, args ...any)
	Clock func() time.Time
}

// storageCommand turns a node's listing into the command recording it,
// its units sorted by type and name.
func storageCommand(node string, rep rpc.NodeStorageReport) fsm.NodeStorageReport {
	c := fsm.NodeStorageReport{Node: node, FileDir: rep.FileDir, SharedFileDir: rep.SharedFileDir, VG: rep.VG, NoDRBD: rep.NoDRBD, BootID: rep.BootID,
		Units: make([]fsm.StorageUnit, 0, len(rep.Units))}
	for _, u := range rep.Units {
		c.Units = append(c.Units, fsm.StorageUnit{Type: u.Type, Name: u.Name, VG: u.VG, SizeMiB: u.Size, UsedMiB: u.Used, FreeMiB: u.Free, Allocatable: u.Allocatable})
	}
	sort.Slice(c.Units, func(i, j int) bool {
		a, b := c.Units[i], c.Units[j]
		return a.Type < b.Type || a.Type == b.Type && a.Name < b.Name
	})
	return c
}

// storageChanged says whether c differs from what the state holds enough
// to be written, and why (for the log).
func storageChanged(prev *fsm.NodeStorage, c *fsm.NodeStorageReport) (bool, string) {
	if prev == nil {
		return true, "first report"
	}
	if c.BootID != "" && prev.BootID != c.BootID {
		return true, "the node's boot id changed (it rebooted)"
	}
	if prev.FileDir != c.FileDir || prev.SharedFileDir != c.SharedFileDir || prev.VG != c.VG || prev.NoDRBD != c.NoDRBD {
		return true, "the driver's storage changed"
	}
	if len(prev.Units) != len(c.Units) {
		return true, "units appeared or went"
	}
	for i, u := range c.Units {
		p := prev.Units[i]
		switch {
		case p.Type != u.Type || p.Name != u.Name:
			return true, "units appeared or went"
		case p.VG != u.VG || p.Allocatable != u.Allocatable:
			return true, u.Type + " " + u.Name + " changed"
		case abs(p.SizeMiB-u.SizeMiB) > storageThreshold(u.SizeMiB) || abs(p.FreeMiB-u.FreeMiB) > storageThreshold(u.SizeMiB):
			return true, u.Type + " " + u.Name + " changed size or free space"
		}
	}
	return false, ""
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// record asks a node for its storage units and records them when they
// changed. It returns jobs.ErrFenced when a newer leader's epoch refused
// the write.
func (r *storageRecorder) record(ctx context.Context, n *fsm.Node) error {
	rep, err := r.List.StorageList(ctx, n)
	if err != nil {
		if ctx.Err() == nil {
			r.Warn(n.Name, "storage_failed", "storage units not listed", "node", n.Name, "error", err)
		}
		return nil
	}
	if len(rep.Errors) > 0 {
		r.Warn(n.Name, "storage_partial", "storage units listed in part; the last recorded report stays", "node", n.Name, "errors", rep.Errors)
		return nil
	}
	c := storageCommand(n.Name, rep)
	if e := fsm.CheckStorageUnits(c.Units); e != nil {
		r.Warn(n.Name, "storage_refused", "storage units not recorded", "node", n.Name, "error", e)
		return nil
	}
	var prev *fsm.NodeStorage
	known := false
	r.FSM.Read(func(st *fsm.State, _ uint64) {
		if cur := st.LookupNode(n.Name); cur != nil {
			known, prev = true, cur.Storage
		}
	})
	if !known {
		return nil // removed meanwhile
	}
	changed, why := storageChanged(prev, &c)
	if !changed {
		return nil
	}
	c.Now, c.Epoch = r.Clock().UnixNano(), r.Epoch
	resp, _, err := r.Apply.Apply(ctx, c)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.Warn(n.Name, "storage_apply", "recording storage units", "node", n.Name, "error", err)
		}
	case resp.Err != nil && errors.Is(resp.Err, fsm.ErrFenced):
		return jobs.ErrFenced
	case resp.Err != nil:
		r.Warn(n.Name, "storage_refused", "storage units not recorded", "node", n.Name, "error", resp.Err)
	default:
		r.Log.Debug("storage units recorded", "node", n.Name, "units", len(c.Units), "why", why)
	}
	return nil
}

// nodeStorage is the recorder's storageLister over the node RPC.
type nodeStorage struct{ n *nodeCaller }

// StorageList implements storageLister.
func (c nodeStorage) StorageList(ctx context.Context, node *fsm.Node) (rpc.NodeStorageReport, error) {
	cl, err := c.n.client(node)
	if err != nil {
		return rpc.NodeStorageReport{}, err
	}
	res, err := cl.Do(ctx, rpc.NodeRequest{Op: rpc.NodeOpStorageList})
	if err != nil {
		return rpc.NodeStorageReport{}, err
	}
	if res.Storage == nil {
		return rpc.NodeStorageReport{}, errors.New("the node answered storage-list without units")
	}
	return *res.Storage, nil
}
