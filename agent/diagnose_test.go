package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParseDiagnose: good outputs and their canonical forms.
func TestParseDiagnose(t *testing.T) {
	for _, tc := range []struct {
		out, canon, status, command, details string
	}{
		{`{"status":"Ok"}`, `{"status":"Ok"}`, "Ok", "", ""},
		{"\n  {\"status\": \"evacuate\", \"details\": {\"disk\": \"sdb\", \"bay\": 3}}\n\n",
			`{"details":{"bay":3,"disk":"sdb"},"status":"evacuate"}`, "evacuate", "", `{"bay":3,"disk":"sdb"}`},
		{`{"details":[{"z":1,"a":{"y":null,"b":true}}],"command":"fix-raid","status":"live-repair"}`,
			`{"command":"fix-raid","details":[{"a":{"b":true,"y":null},"z":1}],"status":"live-repair"}`, "live-repair", "fix-raid", `[{"a":{"b":true,"y":null},"z":1}]`},
		// Numbers as printed, no HTML escaping, unknown fields kept.
		{`{"status":"evacuate-failover","details":{"temp":71.50,"big":12345678901234567890,"e":1E400},"note":"<&>"}`,
			`{"details":{"big":12345678901234567890,"e":1E400,"temp":71.50},"note":"<&>","status":"evacuate-failover"}`, "evacuate-failover", "", `{"big":12345678901234567890,"e":1E400,"temp":71.50}`},
		{`{"status":"Ok","details":null,"command":""}`, `{"command":"","details":null,"status":"Ok"}`, "Ok", "", "null"},
		{`{"status":"Ok","status":"evacuate"}`, `{"status":"evacuate"}`, "evacuate", "", ""}, // the last of duplicate keys
		{`{"status":"Ok","details":"\u00e9\ud83d\ude00"}`, `{"details":"é😀","status":"Ok"}`, "Ok", "", `"é😀"`},
	} {
		d, err := ParseDiagnose([]byte(tc.out))
		if err != nil {
			t.Errorf("%q: %v", tc.out, err)
			continue
		}
		if string(d.Canonical) != tc.canon || d.Status != tc.status || d.Command != tc.command || string(d.Details) != tc.details {
			t.Errorf("%q:\n got %s %q %q %s\nwant %s %q %q %s", tc.out, d.Canonical, d.Status, d.Command, d.Details, tc.canon, tc.status, tc.command, tc.details)
		}
	}
}

// TestParseDiagnoseRefusals: a table of bad outputs, each refused with
// its reason.
func TestParseDiagnoseRefusals(t *testing.T) {
	for _, tc := range []struct{ out, why string }{
		{"", "no output"},
		{" \n\t", "no output"},
		{"null", "not a JSON object"},
		{"[]", "not a JSON object"},
		{`[{"status":"Ok"}]`, "not a JSON object"},
		{`"Ok"`, "not a JSON object"},
		{"42", "not a JSON object"},
		{"Ok", "not JSON"},
		{"{", "not JSON"},
		{`{"status":"Ok"`, "not JSON"},
		{`{'status':'Ok'}`, "not JSON"},
		{`{"status":"Ok",}`, "not JSON"},
		{"\x00", "not JSON"},
		{`{}`, `no "status"`},
		{`{"Status":"Ok"}`, `no "status"`},
		{`{"status":null}`, `"status" is null`},
		{`{"status":1}`, `"status" is not a string`},
		{`{"status":true}`, `"status" is not a string`},
		{`{"status":["Ok"]}`, `"status" is not a string`},
		{`{"status":"ok"}`, `unknown "status" "ok"`},
		{`{"status":"OK"}`, `unknown "status"`},
		{`{"status":"evacuate "}`, `unknown "status"`},
		{`{"status":""}`, `unknown "status"`},
		{`{"status":"reboot"}`, `unknown "status"`},
		{`{"status":"Ok","command":1}`, `"command" is not a string`},
		{`{"status":"live-repair","command":null}`, `"command" is not a string`},
		{`{"status":"live-repair","command":["a"]}`, `"command" is not a string`},
		{`{"status":"Ok"}{"status":"Ok"}`, "more than one JSON value"},
		{`{"status":"Ok"} {"status":"evacuate"}`, "more than one JSON value"},
		{`{"status":"Ok"}x`, "more than one JSON value"},
		{`{"status":"Ok"}]`, "more than one JSON value"},
		{"{\"status\":\"Ok\"}\n0", "more than one JSON value"},
	} {
		d, err := ParseDiagnose([]byte(tc.out))
		if !errors.Is(err, ErrBadDiagnose) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %+v %v, want a refusal with %q", tc.out, d, err, tc.why)
		}
	}
}

func TestBuiltinAndOkDiagnosis(t *testing.T) {
	b := BuiltinDiagnosis()
	if string(b.Canonical) != `{"command":"","details":{},"status":"Ok"}` || b.Status != DiagnoseOk {
		t.Errorf("builtin %s", b.Canonical)
	}
	if again, err := ParseDiagnose(b.Canonical); err != nil || string(again.Canonical) != string(b.Canonical) || string(again.Details) != string(b.Details) {
		t.Errorf("builtin does not parse to itself: %+v %v", again, err)
	}
	o := OkDiagnosis(`broken "x" <y>`)
	if string(o.Canonical) != `{"details":"broken \"x\" <y>","status":"Ok"}` || string(o.Details) != `"broken \"x\" <y>"` {
		t.Errorf("ok: %s %s", o.Canonical, o.Details)
	}
}

// FuzzParseDiagnose: ParseDiagnose never panics; what it accepts has a
// valid status and a canonical form that parses to itself (so identical
// states give identical bytes however they were printed); what it
// refuses wraps ErrBadDiagnose and, reported as Ok, is itself a valid
// result. Run with go test -fuzz FuzzParseDiagnose ./agent; the corpus is
// in testdata/fuzz.
func FuzzParseDiagnose(f *testing.F) {
	for _, s := range []string{
		`{"status":"Ok"}`, `{"status":"live-repair","command":"fix","details":{"a":[1,2.50,"x"]}}`,
		`{"status":"evacuate","details":null}`, ` {"status":"evacuate-failover"} `, `{"status":"Ok"}{}`,
		`{"status":1}`, `[]`, `null`, ``, `{"status":"Ok","details":1e999}`, "{\"status\":\"Ok\",\"details\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		d, err := ParseDiagnose(out)
		if err != nil {
			if !errors.Is(err, ErrBadDiagnose) {
				t.Fatalf("refusal does not wrap ErrBadDiagnose: %v", err)
			}
			ok := OkDiagnosis(err.Error())
			if back, err := ParseDiagnose(ok.Canonical); err != nil || back.Status != DiagnoseOk || !bytes.Equal(back.Canonical, ok.Canonical) {
				t.Fatalf("the Ok report of a refusal is not a result: %s %v", ok.Canonical, err)
			}
			return
		}
		if !ValidDiagnoseStatus(d.Status) {
			t.Fatalf("accepted status %q", d.Status)
		}
		if !json.Valid(d.Canonical) || (d.Details != nil && !json.Valid(d.Details)) {
			t.Fatalf("invalid canonical JSON %q / %q", d.Canonical, d.Details)
		}
		back, err := ParseDiagnose(d.Canonical)
		if err != nil {
			t.Fatalf("canonical form refused: %v\n%s", err, d.Canonical)
		}
		if !bytes.Equal(back.Canonical, d.Canonical) || back.Status != d.Status || back.Command != d.Command || !bytes.Equal(back.Details, d.Details) {
			t.Fatalf("canonical form is not stable:\n%s\n%s", d.Canonical, back.Canonical)
		}
	})
}

func diagnoser(t *testing.T, min time.Duration) (*Diagnoser, Commands) {
	t.Helper()
	c := whitelist(t)
	c.Timeout = 2 * time.Second
	return NewDiagnoser(DiagnoseConfig{Commands: c, MinInterval: min}), c
}

// TestDiagnoserReportsProblemsAsOk: whatever goes wrong with the command
// is a result with status Ok and the reason in details, never an error.
func TestDiagnoserReportsProblemsAsOk(t *testing.T) {
	d, c := diagnoser(t, -1)
	c.Timeout = 300 * time.Millisecond
	d.cfg.Commands = c
	script(t, c, "garbage", `echo 'all good'`)
	script(t, c, "trailing", `echo '{"status":"evacuate"} {"status":"Ok"}'`)
	script(t, c, "unknown", `echo '{"status":"reboot"}'`)
	script(t, c, "types", `echo '{"status":"live-repair","command":7}'`)
	script(t, c, "silent", `true`)
	script(t, c, "fails", `echo '{"status":"evacuate"}'; echo 'smartctl: not found' >&2; exit 2`)
	script(t, c, "sleepy", `sleep 30`)
	p := script(t, c, "open", `echo '{"status":"evacuate"}'`)
	os.Chmod(p, 0o777)
	c.MaxOutput = 64
	d.cfg.Commands = c
	script(t, c, "chatty", `echo '{"status":"evacuate","details":"`+strings.Repeat("x", 100)+`"}'`)
	for _, tc := range []struct{ name, why string }{
		{"garbage", `self-diagnose command garbage: not a self-diagnose result: not JSON`},
		{"trailing", "more than one JSON value"},
		{"unknown", `unknown \"status\" \"reboot\"`},
		{"types", `\"command\" is not a string`},
		{"silent", "no output"},
		{"fails", "self-diagnose command fails exited with exit status 2; stderr: smartctl: not found"},
		{"sleepy", "self-diagnose command sleepy timed out after 300ms; its process group was killed"},
		{"open", "want 0755 or stricter"},
		{"missing", "not whitelisted: no missing in"},
		{"../etc/passwd", "not a plain file name"},
		{"chatty", "printed more than 64 bytes"},
	} {
		got, err := d.Collect(context.Background(), tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		g := got.Diagnosis
		if g.Status != DiagnoseOk || g.Command != "" || !strings.Contains(string(g.Details), tc.why) ||
			!strings.HasPrefix(string(g.Canonical), `{"details":"`) || !strings.HasSuffix(string(g.Canonical), `","status":"Ok"}`) {
			t.Errorf("%s: %s, want Ok with %q", tc.name, g.Canonical, tc.why)
		}
		if got.Command != tc.name {
			t.Errorf("%s: collected as %q", tc.name, got.Command)
		}
	}
	b, _ := d.Collect(context.Background(), "")
	if string(b.Diagnosis.Canonical) != string(BuiltinDiagnosis().Canonical) {
		t.Errorf("builtin: %s", b.Diagnosis.Canonical)
	}
}

// TestDiagnoserChangingOutput: a command whose output changes each time
// gives a new result per run, and the same bytes for the same state
// however it is printed.
func TestDiagnoserChangingOutput(t *testing.T) {
	d, c := diagnoser(t, -1)
	counter := filepath.Join(t.TempDir(), "count")
	script(t, c, "count", fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s
if [ $((n %% 2)) = 1 ]; then echo '{"status":"evacuate","details":{"run":'$n',"disk":"sdb"}}'
else printf '{ "details" : { "disk" : "sdb" , "run" : %%d } ,\n "status":"evacuate" }' $n; fi`, counter))
	var prev string
	for i := 1; i <= 4; i++ {
		got, err := d.Collect(context.Background(), "count")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"details":{"disk":"sdb","run":%d},"status":"evacuate"}`, i)
		if s := string(got.Diagnosis.Canonical); s != want || s == prev {
			t.Fatalf("run %d: %s, want %s", i, s, want)
		}
		prev = string(got.Diagnosis.Canonical)
	}
	if last, ok := d.Last(); !ok || string(last.Diagnosis.Canonical) != prev {
		t.Errorf("last %+v", last)
	}
}

// TestDiagnoserCaches: within MinInterval the last result of the same
// command is returned without a run; concurrent collections share one
// run; another command runs.
func TestDiagnoserCaches(t *testing.T) {
	d, c := diagnoser(t, time.Hour)
	log := filepath.Join(t.TempDir(), "runs")
	script(t, c, "slow", fmt.Sprintf(`echo run >> %s; sleep 0.3; echo '{"status":"Ok","details":"'$(wc -l < %[1]s)'"}'`, log))
	script(t, c, "other", `echo '{"status":"live-repair","command":"fix"}'`)
	if _, ok := d.Last(); ok {
		t.Fatal("a last result before any run")
	}
	var wg sync.WaitGroup
	res := make([]Collected, 10)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := d.Collect(context.Background(), "slow")
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		}()
	}
	wg.Wait()
	for _, r := range res {
		if string(r.Diagnosis.Canonical) != `{"details":"1","status":"Ok"}` || !r.At.Equal(res[0].At) {
			t.Errorf("concurrent collection: %s at %v", r.Diagnosis.Canonical, r.At)
		}
	}
	again, _ := d.Collect(context.Background(), "slow")
	if !again.At.Equal(res[0].At) {
		t.Error("collected again within MinInterval")
	}
	if o, _ := d.Collect(context.Background(), "other"); o.Diagnosis.Status != DiagnoseLiveRepair || o.Diagnosis.Command != "fix" {
		t.Errorf("other command: %s", o.Diagnosis.Canonical)
	}
	if runs, _ := os.ReadFile(log); string(runs) != "run\n" {
		t.Errorf("slow ran %d times", strings.Count(string(runs), "run"))
	}

	// A caller that gives up does not stop the run; its result is kept.
	d2, c2 := diagnoser(t, time.Hour)
	script(t, c2, "slow", `sleep 0.3; echo '{"status":"evacuate"}'`)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := d2.Collect(ctx, "slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("collect with a short deadline: %v", err)
	}
	r, err := d2.Collect(context.Background(), "slow")
	if err != nil || r.Diagnosis.Status != DiagnoseEvacuate {
		t.Fatalf("after the cancelled caller: %+v %v", r, err)
	}
}
