package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaintdBadNodeSpoilsOnlyItsIncident: node21's self-diagnose asks for
// a repair command that is not a plain file name, node23's report is
// longer than an incident may keep, node22 asks for a good repair
// command. Each bad one fails only its own node's incident, with its
// reason in maintd's /1/status and on its page, while node22's incident
// runs its repair command and completes: one node never stalls the rounds
// of the others (before, the leader's every round was refused).
func TestMaintdBadNodeSpoilsOnlyItsIncident(t *testing.T) {
	state := map[string]string{}
	c := repairCluster(t, ClusterOptions{
		ExtraArgs: []string{"--diagnose-min-interval", "500ms"},
		MemberArgs: func(name, dataDir string) []string {
			dir, rdir := dataDir+"-diagnose", dataDir+"-repair"
			for _, d := range []string{dir, rdir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			st := filepath.Join(filepath.Dir(dataDir), name+"-diagnose-state.json")
			state[name] = st
			if err := os.WriteFile(st, []byte(`{"status":"Ok"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "hw-check"), []byte("#!/bin/sh\ncat "+st+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rdir, "reseat"), []byte("#!/bin/sh\necho '{\"reseated\":true}'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"--diagnose-commands-dir", dir, "--repair-commands-dir", rdir}
		},
	})
	if out, code := c.GNTExit("cluster", "modify", "--diagnose-data-collector-filename", "hw-check"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	big := fmt.Sprintf(`{"status":"evacuate","details":%q}`, strings.Repeat("x", 20<<10))
	for node, report := range map[string]string{
		"node21": `{"status":"live-repair","command":"../../bin/sh"}`,
		"node22": `{"status":"live-repair","command":"reseat"}`,
		"node23": big,
	} {
		if err := os.WriteFile(state[node], []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]func(in incident) error{
		"node21": func(in incident) error {
			if in.RepairStatus != "failed" || !strings.Contains(in.Reason, "plain file name") {
				return fmt.Errorf("node21's incident is %s (%s), want failed for its repair command", in.RepairStatus, in.Reason)
			}
			return nil
		},
		"node22": func(in incident) error {
			if in.RepairStatus != "completed" || len(in.Jobs) != 1 {
				return fmt.Errorf("node22's incident is %s (%s), jobs %v; want completed by its repair job", in.RepairStatus, in.Reason, in.Jobs)
			}
			return nil
		},
		"node23": func(in incident) error {
			if in.RepairStatus != "failed" || !strings.Contains(in.Reason, "bad self-diagnose report") {
				return fmt.Errorf("node23's incident is %s (%s), want failed for its report", in.RepairStatus, in.Reason)
			}
			return nil
		},
	}
	var list []incident
	c.Eventually(60*time.Second, 200*time.Millisecond, "each node's incident where it should be", func() error {
		leader := c.WaitLeader(10 * time.Second)
		list = nil
		if _, err := maintdGet(leader, "/1/status", &list); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, in := range list {
			check := want[in.Node]
			if check == nil {
				return fmt.Errorf("unexpected incident on %s: %+v", in.Node, in)
			}
			if err := check(in); err != nil {
				return err
			}
			seen[in.Node] = true
		}
		if len(seen) != len(want) {
			return fmt.Errorf("incidents %+v, want one on each of node21, node22, node23", list)
		}
		return nil
	})
	for _, in := range list {
		t.Logf("incident on %s: %s: %s", in.Node, in.RepairStatus, in.Reason)
	}
	// The job of node22's repair succeeded.
	for _, in := range list {
		if in.Node == "node22" {
			j, err := c.job(in.Jobs[0])
			if err != nil || j.Status != "success" {
				t.Fatalf("node22's repair job %d: %+v, %v", in.Jobs[0], j, err)
			}
		}
	}
	// The web page shows the reasons.
	req, _ := http.NewRequest(http.MethodGet, "https://"+c.WaitLeader(10*time.Second).IP+":1816/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := c.HTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{"plain file name", "bad self-diagnose report"} {
		if !strings.Contains(string(page), s) {
			t.Errorf("maintd's page does not show %q", s)
		}
	}
}
