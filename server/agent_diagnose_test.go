package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// commandsDir is a whitelist directory owned by this test's uid.
func commandsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "commands")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeCommand(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// diagnoseAgent is an agent whose whitelists are test directories.
func diagnoseAgent(t *testing.T, name string, minInterval time.Duration) (c *rpc.NodeClient, diagDir, repairDir string) {
	t.Helper()
	diagDir, repairDir = commandsDir(t), commandsDir(t)
	cfg := Config{DiagnoseCommandsDir: diagDir, RepairCommandsDir: repairDir, DiagnoseMinInterval: Duration{minInterval}}
	cfg.commandOwner = os.Getuid()
	_, c = agentOnly(t, name, cfg)
	return c, diagDir, repairDir
}

var testReportKey = rpc.DiagnoseKey([]byte(testClusterKey))

func verifyReport(t *testing.T, r rpc.SignedDiagnoseReport, node string) rpc.DiagnoseReport {
	t.Helper()
	rep, err := rpc.VerifyDiagnoseReport(r, rpc.DiagnoseVerify{Key: testReportKey, Node: node, Now: time.Now()})
	if err != nil {
		t.Fatalf("report %s: %v", r.Report, err)
	}
	return rep
}

func getReport(t *testing.T, addr string) (rpc.SignedDiagnoseReport, error) {
	t.Helper()
	cl := &http.Client{Transport: rpc.NewNodeTransport(testIdentity(t, "leader").ClientTLS())}
	resp, err := cl.Get("https://" + addr + rpc.DiagnoseReportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", rpc.DiagnoseReportPath, resp.StatusCode, body)
	}
	return rpc.DiagnoseReportFromHTTP(resp.Header, body)
}

// TestAgentDiagnose: over a real agent listener, the diagnose operation
// runs the named whitelisted command (or the built-in) and answers a
// signed report; a plain GET of the report path answers the last one
// without running anything (an Ok report before any); problems are Ok
// reports with the reason.
func TestAgentDiagnose(t *testing.T) {
	c, dir, _ := diagnoseAgent(t, "node21", time.Millisecond)
	ctx := context.Background()
	runs := filepath.Join(t.TempDir(), "runs")
	writeCommand(t, dir, "check-hw", fmt.Sprintf(`echo run >> %s; echo '{"status":"evacuate","details":{"disk":"sdb","n":'$(wc -l < %[1]s)'}}'`, runs))
	ran := func() int { b, _ := os.ReadFile(runs); return strings.Count(string(b), "run") }

	first, err := getReport(t, c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if rep := verifyReport(t, first, "node21"); !strings.Contains(string(rep.Data), `"status":"Ok"`) || !strings.Contains(string(rep.Data), "no self-diagnose result") {
		t.Fatalf("report before any collection: %s", rep.Data)
	}

	r, err := c.Diagnose(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep := verifyReport(t, r, "node21"); string(rep.Data) != `{"command":"","details":{},"status":"Ok"}` {
		t.Fatalf("built-in: %s", rep.Data)
	}
	for i := 1; i <= 2; i++ {
		r, err = c.Diagnose(ctx, "check-hw")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"details":{"disk":"sdb","n":%d},"status":"evacuate"}`, i)
		if rep := verifyReport(t, r, "node21"); string(rep.Data) != want {
			t.Fatalf("run %d: %s, want %s", i, rep.Data, want)
		}
		time.Sleep(5 * time.Millisecond) // past the minimum interval
	}
	last, err := getReport(t, c.Addr)
	if err != nil || string(last.Report) != string(r.Report) || last.Signature != r.Signature || ran() != 2 {
		t.Fatalf("GET after the runs: %+v %v (ran %d times)", last, err, ran())
	}

	// Refusals and broken commands are Ok reports, not errors.
	writeCommand(t, dir, "garbage", `echo hello`)
	os.Chmod(filepath.Join(dir, "garbage"), 0o777)
	for name, why := range map[string]string{"garbage": "want 0755 or stricter", "missing": "not whitelisted", "../bin/sh": "not a plain file name"} {
		r, err := c.Diagnose(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var data struct{ Status, Details string }
		json.Unmarshal(verifyReport(t, r, "node21").Data, &data)
		if data.Status != "Ok" || !strings.Contains(data.Details, why) {
			t.Errorf("%s: %+v, want Ok with %q", name, data, why)
		}
	}
}

// TestAgentDiagnoseMinInterval: within the minimum interval the agent
// answers its last result without running the command again.
func TestAgentDiagnoseMinInterval(t *testing.T) {
	c, dir, _ := diagnoseAgent(t, "node21", time.Hour)
	runs := filepath.Join(t.TempDir(), "runs")
	writeCommand(t, dir, "check-hw", fmt.Sprintf(`echo run >> %s; echo '{"status":"Ok"}'`, runs))
	a, err := c.Diagnose(context.Background(), "check-hw")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Diagnose(context.Background(), "check-hw")
	if err != nil || b.Timestamp != a.Timestamp || b.Signature != a.Signature {
		t.Fatalf("second diagnose: %+v %v", b, err)
	}
	if n, _ := os.ReadFile(runs); string(n) != "run\n" {
		t.Fatalf("the command ran %d times", strings.Count(string(n), "run"))
	}
}

// TestAgentRepairCommand: the repair command gets the input on stdin and
// its output comes back; a command that is not whitelisted is refused
// with not_allowed, one that fails with failed and its output.
func TestAgentRepairCommand(t *testing.T) {
	c, _, dir := diagnoseAgent(t, "node21", 0)
	ctx := context.Background()
	writeCommand(t, dir, "replace-disk", `echo "replacing $(cat)"; echo 'done' >&2`)
	writeCommand(t, dir, "broken", `echo 'controller offline'; exit 4`)
	res, err := c.RepairCommand(ctx, "replace-disk", `{"status":"live-repair","details":{"disk":"sdb"}}`)
	// stdout and stderr are two pipes: their order in Output is not fixed.
	if err != nil || !res.Changed || !strings.Contains(res.Output, "replacing {\"status\":\"live-repair\",\"details\":{\"disk\":\"sdb\"}}\n") ||
		!strings.Contains(res.Output, "done\n") {
		t.Fatalf("repair: %+v %v", res, err)
	}
	var ne *rpc.NodeError
	for _, name := range []string{"missing", "../../bin/sh"} {
		if _, err := c.RepairCommand(ctx, name, ""); !errors.As(err, &ne) || ne.ErrorCode != rpc.NodeCodeNotAllowed {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.RepairCommand(ctx, "broken", ""); !errors.Is(err, rpc.ErrNodeFailed) || !errors.As(err, &ne) ||
		!strings.Contains(ne.Output, "controller offline") || !strings.Contains(ne.Message, "exit status 4") {
		t.Fatalf("broken: %v", err)
	}
	// A diagnose command is not a repair command.
	if _, err := c.RepairCommand(ctx, "check-hw", ""); !errors.As(err, &ne) || ne.ErrorCode != rpc.NodeCodeNotAllowed {
		t.Errorf("diagnose command as repair: %v", err)
	}
}
