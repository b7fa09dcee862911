package server

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestApplyStopsOnNewerLog: at an entry this build cannot read (here a new
// leader's record of a newer log version) raftFSM stops the process with
// exit status 70 and says which entry and why, instead of applying the
// log past it. The test runs itself in a child process to see the exit.
func TestApplyStopsOnNewerLog(t *testing.T) {
	if os.Getenv("GNT_TEST_NEWER_LOG") == "1" {
		a := &raftFSM{fsm: fsm.New(), log: hclog.NewNullLogger()}
		data, err := fsm.Encode(fsm.LeaderEstablish{Node: "node9", LogVersion: fsm.LogVersion + 1})
		if err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		a.Apply(&raft.Log{Index: 7, Data: data})
		fmt.Println("applied past the entry")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestApplyStopsOnNewerLog$")
	cmd.Env = append(os.Environ(), "GNT_TEST_NEWER_LOG=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 70 {
		t.Fatalf("child ended with %v, want exit status 70; output:\n%s", err, out)
	}
	want := fmt.Sprintf("log entry 7: the leader elected on node9 writes log version %d and this gntd reads up to version %d; upgrade this gntd", fsm.LogVersion+1, fsm.LogVersion)
	if !strings.Contains(string(out), want) {
		t.Errorf("output does not say %q:\n%s", want, out)
	}
}
