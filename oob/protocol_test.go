package oob

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestInterpret covers every exit status and payload case of the
// protocol, for every command.
func TestInterpret(t *testing.T) {
	type want struct {
		kind    ErrorKind // 0: success
		payload string    // JSON of Result.Payload on success
		msg     string    // substring of the error message
	}
	cases := []struct {
		name    string
		command string
		o       Outcome
		want    want
	}{
		// Exit 0, power changes: nothing (or null) on stdout.
		{"on ok", PowerOn, Outcome{}, want{payload: "null"}},
		{"off ok blank", PowerOff, Outcome{Stdout: []byte(" \n")}, want{payload: "null"}},
		{"cycle ok null", PowerCycle, Outcome{Stdout: []byte("null\n")}, want{payload: "null"}},
		{"on prints", PowerOn, Outcome{Stdout: []byte("done!\n")}, want{kind: KindBadOutput, msg: `power-on is expected to not return payload but got "done!\n"`}},
		{"off prints json", PowerOff, Outcome{Stdout: []byte(`{"powered": false}`)}, want{kind: KindBadOutput, msg: "power-off is expected to not return payload"}},
		{"cycle prints", PowerCycle, Outcome{Stdout: []byte("[]")}, want{kind: KindBadOutput, msg: "power-cycle is expected to not return payload"}},
		// Exit 0, power-status.
		{"status on", PowerStatus, Outcome{Stdout: []byte(`{"powered": true}`)}, want{payload: `{"powered":true}`}},
		{"status off extra keys", PowerStatus, Outcome{Stdout: []byte(`{ "powered": false, "source": "bmc" }` + "\n")}, want{payload: `{"powered":false}`}},
		{"status empty", PowerStatus, Outcome{}, want{kind: KindBadOutput, msg: "no output"}},
		{"status malformed", PowerStatus, Outcome{Stdout: []byte(`{"powered": tru`)}, want{kind: KindBadOutput, msg: "not JSON"}},
		{"status string", PowerStatus, Outcome{Stdout: []byte(`{"powered": "yes"}`)}, want{kind: KindBadOutput, msg: `boolean "powered" but got a string`}},
		{"status number", PowerStatus, Outcome{Stdout: []byte(`{"powered": 1}`)}, want{kind: KindBadOutput, msg: "but got a number"}},
		{"status list", PowerStatus, Outcome{Stdout: []byte(`[true]`)}, want{kind: KindBadOutput, msg: "expected to return a dict but got a list"}},
		{"status missing", PowerStatus, Outcome{Stdout: []byte(`{"power": true}`)}, want{kind: KindBadOutput, msg: `(no "powered")`}},
		{"status two values", PowerStatus, Outcome{Stdout: []byte(`{"powered": true}{"powered": false}`)}, want{kind: KindBadOutput, msg: "more than one JSON value"}},
		{"status trailing text", PowerStatus, Outcome{Stdout: []byte(`{"powered": true} ok`)}, want{kind: KindBadOutput, msg: "more than one JSON value"}},
		{"status null", PowerStatus, Outcome{Stdout: []byte(`null`)}, want{kind: KindBadOutput, msg: "dict but got null"}},
		// Exit 0, health.
		{"health ok", Health, Outcome{Stdout: []byte(`[["Ambient Temp", "OK"], ["PS Redundancy", "WARNING"], ["FAN 1 RPM", "CRITICAL"], ["CPU", "UNKNOWN"]]`)},
			want{payload: `[["Ambient Temp","OK"],["PS Redundancy","WARNING"],["FAN 1 RPM","CRITICAL"],["CPU","UNKNOWN"]]`}},
		{"health empty list", Health, Outcome{Stdout: []byte(`[]`)}, want{payload: `[]`}},
		{"health bad status", Health, Outcome{Stdout: []byte(`[["Temp", "HOT"]]`)}, want{kind: KindBadOutput, msg: "health item 'Temp' has invalid status 'HOT'"}},
		{"health lowercase status", Health, Outcome{Stdout: []byte(`[["Temp", "ok"]]`)}, want{kind: KindBadOutput, msg: "invalid status 'ok'"}},
		{"health dict", Health, Outcome{Stdout: []byte(`{"Temp": "OK"}`)}, want{kind: KindBadOutput, msg: "'health' is expected to return a list but got a dict"}},
		{"health triple", Health, Outcome{Stdout: []byte(`[["Temp", "OK", 3]]`)}, want{kind: KindBadOutput, msg: "health entry 0 is not an [item, status] pair"}},
		{"health number item", Health, Outcome{Stdout: []byte(`[[1, "OK"]]`)}, want{kind: KindBadOutput, msg: "health entry 0 must hold two strings"}},
		{"health flat", Health, Outcome{Stdout: []byte(`["Temp", "OK"]`)}, want{kind: KindBadOutput, msg: "health entry 0 is not an [item, status] pair"}},
		{"health empty", Health, Outcome{}, want{kind: KindBadOutput, msg: "no output"}},
		// Exit 1: failure, message from stderr.
		{"fail", PowerOn, Outcome{Exit: 1, Stderr: []byte("BMC unreachable\n")}, want{kind: KindFailed, msg: "OOB program execution failed (BMC unreachable)"}},
		{"fail multiline", PowerOff, Outcome{Exit: 1, Stderr: []byte("line one\n  line two\n")}, want{kind: KindFailed, msg: "(line one ; line two)"}},
		{"fail silent", PowerStatus, Outcome{Exit: 1}, want{kind: KindFailed, msg: "OOB program execution failed (exit status 1, nothing on stderr)"}},
		{"fail ignores stdout", Health, Outcome{Exit: 1, Stdout: []byte(`[["x","OK"]]`), Stderr: []byte("no")}, want{kind: KindFailed, msg: "(no)"}},
		// Other exits: unsupported or undefined.
		{"exit 2", PowerCycle, Outcome{Exit: 2, Stderr: []byte("cycle not supported")}, want{kind: KindUnsupported, msg: "OOB program execution failed (exit status 2: power-cycle is unsupported or undefined: cycle not supported)"}},
		{"exit 127", Health, Outcome{Exit: 127}, want{kind: KindUnsupported, msg: "exit status 127: health is unsupported or undefined)"}},
		{"killed", PowerOn, Outcome{Exit: -1, Signal: "killed"}, want{kind: KindFailed, msg: "OOB program execution failed (killed by killed)"}},
		// Runner verdicts.
		{"timeout", PowerOff, Outcome{Exit: -1, TimedOut: true, Timeout: 60 * time.Second}, want{kind: KindTimeout, msg: "OOB program execution timeout exceeded, OOB program execution aborted (after 1m0s)"}},
		{"timeout beats exit 0", PowerStatus, Outcome{Exit: 0, TimedOut: true, Stdout: []byte(`{"powered":true}`)}, want{kind: KindTimeout}},
		{"flood", PowerStatus, Outcome{Exit: -1, Flooded: true, Limit: 8, Stdout: []byte("yyyyyyyy")}, want{kind: KindBadOutput, msg: `power-status printed more than 8 bytes on stdout; the helper was killed (output starts with "yyyyyyyy")`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Interpret(c.command, c.o)
			if c.want.kind == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				got, _ := json.Marshal(r.Payload())
				if string(got) != c.want.payload {
					t.Errorf("payload %s, want %s", got, c.want.payload)
				}
				return
			}
			e, ok := AsError(err)
			if !ok {
				t.Fatalf("got %v (%v), want an *Error of kind %d", err, r, c.want.kind)
			}
			if e.Kind != c.want.kind {
				t.Errorf("kind %d, want %d (%v)", e.Kind, c.want.kind, e)
			}
			if !strings.Contains(e.Error(), c.want.msg) {
				t.Errorf("message %q does not contain %q", e.Error(), c.want.msg)
			}
		})
	}
}

func TestQuoteBounds(t *testing.T) {
	q := Quote([]byte(strings.Repeat("x", 1000)))
	if len(q) > maxQuote+40 || !strings.HasSuffix(q, "(and 744 more bytes)") {
		t.Errorf("quote of 1000 bytes: %q", q)
	}
	if Quote([]byte("a\x00b")) != `"a\x00b"` {
		t.Errorf("control bytes not escaped: %s", Quote([]byte("a\x00b")))
	}
}

func TestValidCommand(t *testing.T) {
	for _, c := range Commands {
		if !ValidCommand(c) {
			t.Errorf("%s not valid", c)
		}
	}
	for _, c := range []string{"", "power", "power-on ", "HEALTH", "status"} {
		if ValidCommand(c) {
			t.Errorf("%q valid", c)
		}
	}
	if !ChangesPower(PowerCycle) || ChangesPower(PowerStatus) || ChangesPower(Health) {
		t.Error("ChangesPower")
	}
}
