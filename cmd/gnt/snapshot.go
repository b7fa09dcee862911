package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// clusterSnapshotCommand is gnt cluster snapshot: backups of the whole
// replicated state (rpc/snapshot.go has the file format).
func (e environment) clusterSnapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "save, inspect and restore backups of the cluster's whole state",
		Subcommands: []*cli.Command{
			{
				Name: "save",
				Usage: "save a consistent snapshot of the cluster's state, streamed from the leader, to FILE " +
					"(it holds secrets: the sealed CA key and the users' password hashes; it is written mode 0600)",
				ArgsUsage: "FILE",
				Action:    e.do(snapshotSave),
			},
			{
				Name:      "inspect",
				Usage:     "check a snapshot file (its size, sha256 and content) and print its header and what it holds",
				ArgsUsage: "FILE",
				Action:    e.snapshotInspect,
			},
			{
				Name: "restore",
				Usage: "replace the whole state of the running cluster with a snapshot file, as one Raft operation " +
					"(it keeps this cluster's name, UUID, CA and Raft membership; see docs/operations.md)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{forceFlag()},
				Action:    e.do(e.snapshotRestore),
			},
		},
	}
}

func snapshotSave(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	path := args[0]
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	h, err := s.api.SaveSnapshot(ctx, tmp)
	if err != nil {
		return fmt.Errorf("saving the snapshot (nothing written to %s): %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "saved %s: cluster %s, index %d (term %d), log version %d, %d bytes, sha256 %s, taken by %s\n",
		path, h.ClusterName, h.Index, h.Term, h.LogVersion, h.Size, h.SHA256, h.Leader)
	return nil
}

// readSnapshotFile reads and checks a whole snapshot file.
func readSnapshotFile(path string) (rpc.SnapshotHeader, *fsm.State, error) {
	f, err := os.Open(path)
	if err != nil {
		return rpc.SnapshotHeader{}, nil, err
	}
	defer f.Close()
	h, st, err := rpc.ReadSnapshot(f)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, st, nil
}

func (e environment) snapshotInspect(c *cli.Context) error {
	args := c.Args().Slice()
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	h, st, err := readSnapshotFile(args[0])
	if err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "File:          %s\n", args[0])
	fmt.Fprintf(w, "Cluster:       %s (%s)\n", h.ClusterName, h.ClusterUUID)
	fmt.Fprintf(w, "Taken:         %s by %s (gnt %s)\n", h.Created, h.Leader, h.GntVersion)
	fmt.Fprintf(w, "Raft index:    %d (term %d)\n", h.Index, h.Term)
	fmt.Fprintf(w, "Log version:   %d (this gnt reads up to %d)\n", h.LogVersion, fsm.LogVersion)
	fmt.Fprintf(w, "Size:          %d bytes\n", h.Size)
	fmt.Fprintf(w, "SHA-256:       %s (checked)\n", h.SHA256)
	n := st.CountObjects()
	fmt.Fprintf(w, "Node groups:   %d\n", n.Groups)
	fmt.Fprintf(w, "Nodes:         %d (master candidates: %s)\n", n.Nodes, strings.Join(candidateNames(st), ", "))
	fmt.Fprintf(w, "Instances:     %d\n", n.Instances)
	fmt.Fprintf(w, "Jobs:          %d queued or kept, %d archived\n", n.Jobs, n.ArchivedJobs)
	fmt.Fprintf(w, "Incidents:     %d\n", n.Incidents)
	fmt.Fprintf(w, "RAPI users:    %d\n", n.RAPIUsers)
	return nil
}

func candidateNames(st *fsm.State) []string {
	var out []string
	for _, n := range st.SortedNodes() {
		if n.MasterCandidate {
			out = append(out, n.Name)
		}
	}
	return out
}

func (e environment) snapshotRestore(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	path := args[0]
	// The whole file is checked here first: a damaged or foreign file is
	// refused before anyone is asked anything.
	h, st, err := readSnapshotFile(path)
	if err != nil {
		return err
	}
	if !c.Bool("force") {
		n := st.CountObjects()
		q := fmt.Sprintf("Replace the WHOLE state of the running cluster with the snapshot of %s taken %s at index %d "+
			"(%d nodes, %d instances, %d jobs)? Everything changed since is lost.",
			h.ClusterName, h.Created, h.Index, n.Nodes, n.Instances, n.Jobs)
		if err := e.confirm("restore a snapshot", q); err != nil {
			return err
		}
	}
	out, err := s.api.RestoreSnapshot(ctx, func() (io.Reader, error) { return os.Open(path) })
	if err != nil {
		return fmt.Errorf("restoring %s: %w", path, err)
	}
	fmt.Fprintf(s.stdout, "restored %s: the cluster's state starts again at index %d with %d nodes, %d instances, %d jobs, %d incidents; kept from this cluster: %s\n",
		path, out.Index, out.Counts.Nodes, out.Counts.Instances, out.Counts.Jobs, out.Counts.Incidents, strings.Join(out.Kept, ", "))
	return nil
}
