package fsm

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var updateSchema = flag.Bool("update-log-schema", false, "record this build's log schema in testdata/log-schema-v<LogVersion>.txt, if that version has none yet")

// logSchema describes what an older replica must be able to read in this
// build's log: every command's JSON fields and their types (recursively,
// the model types they carry included), every opcode's, and the binary
// frames of a fixed job submission, job update and batch.
func logSchema() string {
	var b strings.Builder
	fmt.Fprintf(&b, "log version %d\n", LogVersion)
	cmds := []Command{ClusterInit{}, JobSubmit{}, Batch{}, LeaderEstablish{}, JobUpdate{}, NodeRegister{}, JobCancel{},
		JobArchive{}, JobSubmitMany{}, NodeLiveness{}, RepairRound{}, MaintIncident{},
		RAPIUsersReplace{}, RAPIUserPut{}, RAPIUserRemove{}, PKIRotate{}, PKIKeyRotate{}, FilterPut{}, FilterRemove{}, NodeStorageReport{}}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].CommandType() < cmds[j].CommandType() })
	for _, c := range cmds {
		fmt.Fprintf(&b, "command %d %s %s\n", c.CommandType(), c.CommandType(), schemaOf(reflect.TypeOf(c), map[reflect.Type]bool{}))
	}
	for _, id := range sortedKeys(opcodeTypes) {
		fmt.Fprintf(&b, "opcode %s %s\n", id, schemaOf(reflect.TypeOf(opcodeTypes[id]()), map[reflect.Type]bool{}))
	}
	sub, _ := Encode(JobSubmit{Now: 1, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{"u"}, Token: "t"})
	upd, _ := Encode(JobUpdate{Now: 1, Epoch: 2, JobID: 3, OpIndex: 0, Action: ActionStep, Status: StatusSuccess, Result: json.RawMessage(`1`),
		Log: []string{"l"}, Step: 1, StepName: "s", Locks: []LockDecl{{Level: "node", Names: []string{"n"}}}})
	batch, _ := EncodeBatch([][]byte{sub, upd})
	fmt.Fprintf(&b, "frames job-submit %s\nframes job-update %s\nframes batch %s\n", hex.EncodeToString(sub), hex.EncodeToString(upd), hex.EncodeToString(batch))
	return b.String()
}

// schemaOf writes a type as JSON sees it: objects with their field names
// (embedded structs flattened), arrays, maps, and named types by name.
func schemaOf(t reflect.Type, seen map[reflect.Type]bool) string {
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), seen)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return t.String()
		}
		return "[" + schemaOf(t.Elem(), seen) + "]"
	case reflect.Map:
		return "map[" + t.Key().String() + "]" + schemaOf(t.Elem(), seen)
	case reflect.Struct:
		if seen[t] {
			return t.String()
		}
		if t.Implements(reflect.TypeFor[json.Unmarshaler]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
			return t.String() + "(custom)"
		}
		seen[t] = true
		defer delete(seen, t)
		var fields []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			if f.Anonymous && tag == "" {
				inner := schemaOf(f.Type, seen)
				fields = append(fields, strings.TrimSuffix(strings.TrimPrefix(inner, "{"), "}"))
				continue
			}
			name := f.Name
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
			fields = append(fields, name+":"+schemaOf(f.Type, seen))
		}
		return "{" + strings.Join(fields, ",") + "}"
	}
	return t.String()
}

// TestLogSchema keeps testdata/log-schema-v<LogVersion>.txt equal to
// logSchema(): a change to what the log holds fails here until LogVersion
// is raised and the new version's schema recorded beside the old ones
// (-update-log-schema writes only a version that has none yet), so that
// older replicas stop before they misread it.
func TestLogSchema(t *testing.T) {
	path := fmt.Sprintf("testdata/log-schema-v%d.txt", LogVersion)
	got := logSchema()
	want, err := os.ReadFile(path)
	if *updateSchema {
		switch {
		case err == nil && string(want) != got:
			t.Fatalf("%s records log version %d already, and this build writes something else: raise fsm.LogVersion", path, LogVersion)
		case errors.Is(err, os.ErrNotExist):
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	if err != nil {
		t.Fatalf("%v (record this version's schema with go test ./fsm -run TestLogSchema -update-log-schema)", err)
	}
	if got == string(want) {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	var diff []string
	for i := 0; i < max(len(g), len(w)); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			diff = append(diff, fmt.Sprintf("recorded: %s\nthis build: %s", b, a))
		}
	}
	t.Fatalf("the log this build writes differs from %s:\n%s\n\nAn older gntd would apply such entries differently or refuse them: raise fsm.LogVersion, then record the new version's schema with go test ./fsm -run TestLogSchema -update-log-schema",
		path, strings.Join(diff, "\n"))
}
