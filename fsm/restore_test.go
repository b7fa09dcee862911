package fsm

import (
	"bytes"
	"strings"
	"testing"
)

// decodedCopy returns the state of h as a snapshot decodes it.
func decodedCopy(t *testing.T, h *harness) *State {
	t.Helper()
	b, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := DecodeSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPrepareRestore: a saved state replaces the running one except for
// the running cluster's identity, CA, node removals and the Raft
// members' addresses; a restore whose Raft members are not master
// candidates of the saved state is refused.
func TestPrepareRestore(t *testing.T) {
	saved := newHarness()
	saved.initCluster("10.0.0.1")
	c := *saved.f.st.Cluster
	c.Tags = []string{"saved"}
	saved.f.st.Cluster = &c
	running := newHarness()
	running.uuids = 100
	running.initCluster("10.0.0.1")
	run := running.f.st
	run.PKI = &PKI{CACerts: "running-ca", CAKeySealed: "k", Serial: 3}
	run.RemovedNodes = map[string]int64{"gone": 5, "n1": 7}
	n1 := *run.LookupNode("n1")
	n1.Addrs = Addrs{API: "10.0.0.9:5080", Raft: "10.0.0.9:1817"}
	n1.PrimaryIP = "10.0.0.9"
	run.Nodes[n1.UUID] = &n1

	im, err := PrepareRestore(decodedCopy(t, saved), run, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	st := im.State()
	if st.Cluster.UUID != run.Cluster.UUID || st.Cluster.Name != run.Cluster.Name {
		t.Errorf("cluster identity %s/%s, want the running %s/%s", st.Cluster.Name, st.Cluster.UUID, run.Cluster.Name, run.Cluster.UUID)
	}
	if len(st.Cluster.Tags) != 1 || st.Cluster.Tags[0] != "saved" {
		t.Errorf("tags %v, want the saved ones", st.Cluster.Tags)
	}
	if st.PKI != run.PKI {
		t.Errorf("pki %+v, want the running CA", st.PKI)
	}
	if _, ok := st.RemovedNodes["gone"]; !ok {
		t.Errorf("the running cluster's removal of gone was dropped: %v", st.RemovedNodes)
	}
	if _, ok := st.RemovedNodes["n1"]; ok {
		t.Errorf("n1 is a node of the saved state but stays removed: %v", st.RemovedNodes)
	}
	if got := st.LookupNode("n1"); got.Addrs != n1.Addrs || got.PrimaryIP != "10.0.0.9" || st.NodeByIP("10.0.0.9") == nil {
		t.Errorf("n1's addresses %+v %s, want the running %+v %s", got.Addrs, got.PrimaryIP, n1.Addrs, n1.PrimaryIP)
	}
	// The image is what a replica restores, at the index it is labelled.
	var buf bytes.Buffer
	if _, err := im.Frozen(5000).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f := running.f
	if err := f.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if f.Index() != 5000 || f.st.Cluster.Tags[0] != "saved" {
		t.Errorf("restored at %d with tags %v", f.Index(), f.st.Cluster.Tags)
	}

	for _, tc := range []struct {
		name    string
		members []string
		saved   *State
		want    string
	}{
		{"member not in the snapshot", []string{"n1", "n9"}, decodedCopy(t, saved), "n9 are not master candidates"},
		{"no cluster saved", []string{"n1"}, newState(), "holds no cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PrepareRestore(tc.saved, run, tc.members); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	// The running n1's IP is another node's in the snapshot.
	clash := decodedCopy(t, saved)
	n2 := *clash.LookupNode("n1")
	n2.Name, n2.UUID, n2.PrimaryIP, n2.MasterCandidate = "n2", "u-n2", "10.0.0.9", false
	clash.Nodes[n2.UUID] = &n2
	clash.reindex()
	if _, err := PrepareRestore(clash, run, []string{"n1"}); err == nil || !strings.Contains(err.Error(), "which node n2 of the snapshot has too") {
		t.Errorf("an IP clash: %v", err)
	}
	if _, err := PrepareRestore(decodedCopy(t, saved), newState(), []string{"n1"}); err == nil || !strings.Contains(err.Error(), "not initialised") {
		t.Fatalf("into an uninitialised state: %v", err)
	}
}
