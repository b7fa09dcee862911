package fsm

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const (
	testBcrypt = "$2a$04$abcdefghijklmnopqrstuuQ8eCjq0w7cLk2yP0rU7v8s7W5r1lYfC" // shape only
	testHA1    = "7046452df2cbb530877058712cf17bd4"
)

func (h *harness) serial() int64 {
	var n int64
	h.f.Read(func(s *State, _ uint64) { n = s.Cluster.SerialNo })
	return n
}

func (h *harness) users() string {
	var b strings.Builder
	h.f.Read(func(s *State, _ uint64) {
		for _, u := range s.SortedRAPIUsers() {
			b.WriteString(u.Name + ":" + u.Scheme + ":" + u.Access() + " ")
		}
	})
	return strings.TrimSpace(b.String())
}

// TestRAPIUsers applies the three user commands and checks the list, the
// serial number, and that a refused command changes nothing.
func TestRAPIUsers(t *testing.T) {
	h := newHarness()
	if r := h.apply(RAPIUserPut{Now: h.now, Mode: PutAdd, User: RAPIUser{Name: "jack", Scheme: SchemeHA1, Hash: testHA1}}).(Response); r.Err == nil {
		t.Fatal("a user was added before the cluster exists")
	}
	h.initCluster("192.0.2.1")
	step := func(c Command, wantErr string, wantUsers string) {
		t.Helper()
		before, hash := h.serial(), h.f.Hash()
		r := h.apply(c).(Response)
		switch {
		case wantErr != "":
			if r.Err == nil || !strings.Contains(r.Err.Msg, wantErr) {
				t.Fatalf("%T: error %v, want one containing %q", c, r.Err, wantErr)
			}
			if h.f.Hash() != hash || h.serial() != before {
				t.Fatalf("%T: a refused command changed the state", c)
			}
		case r.Err != nil:
			t.Fatalf("%T: %v", c, r.Err)
		case h.serial() != before+1:
			t.Fatalf("%T: serial %d -> %d, want one more", c, before, h.serial())
		}
		if got := h.users(); got != wantUsers {
			t.Fatalf("%T: users %q, want %q", c, got, wantUsers)
		}
	}
	jack := RAPIUser{Name: "jack", Scheme: SchemeBcrypt, Hash: testBcrypt, Read: true}
	fred := RAPIUser{Name: "fred", Scheme: SchemeHA1, Hash: testHA1, Write: true}
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{jack, fred}}, "", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{jack, jack}}, "listed twice", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{{Name: "x", Scheme: SchemeHA1, Hash: "ABC"}}}, "32 lower-case hex", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{{Name: "x", Scheme: "cleartext", Hash: "secret"}}}, "scheme", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{{Name: "x", Scheme: SchemeBcrypt, Hash: "secret"}}}, "bcrypt hash", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{{Name: "a:b", Scheme: SchemeHA1, Hash: testHA1}}}, "not allowed", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUserPut{Now: h.now, Mode: PutAdd, User: jack}, "exists already", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUserPut{Now: h.now, Mode: PutPasswd, User: RAPIUser{Name: "nobody", Scheme: SchemeHA1, Hash: testHA1}}, "does not exist", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUserPut{Now: h.now, Mode: "upsert", User: jack}, "mode", "fred:ha1:write jack:bcrypt:read")
	step(RAPIUserPut{Now: h.now, Mode: PutAdd, User: RAPIUser{Name: "auto", Scheme: SchemeHA1, Hash: testHA1, Read: true, Write: true}}, "",
		"auto:ha1:read,write fred:ha1:write jack:bcrypt:read")
	// passwd keeps the access whatever the command says.
	step(RAPIUserPut{Now: h.now, Mode: PutPasswd, User: RAPIUser{Name: "jack", Scheme: SchemeHA1, Hash: testHA1, Write: true}}, "",
		"auto:ha1:read,write fred:ha1:write jack:ha1:read")
	step(RAPIUserRemove{Now: h.now, Name: "nobody"}, "does not exist", "auto:ha1:read,write fred:ha1:write jack:ha1:read")
	step(RAPIUserRemove{Now: h.now, Name: "auto"}, "", "fred:ha1:write jack:ha1:read")

	// Users survive a snapshot, and the restored state hashes the same.
	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("secret")) {
		t.Fatal("snapshot holds a password")
	}
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != h.f.Hash() {
		t.Fatal("restored state differs")
	}
	g.Read(func(s *State, _ uint64) {
		if u := s.RAPIUser("fred"); u == nil || u.Hash != testHA1 || !u.CanWrite() {
			t.Fatalf("restored fred = %+v", u)
		}
	})

	step(RAPIUsersReplace{Now: h.now}, "", "")
	if g.Hash() == h.f.Hash() {
		t.Fatal("the users are not part of the state's hash")
	}
}

// TestRAPIUserSnapshotRecords: a snapshot with a user listed twice or a
// user whose hash is not one is refused as a whole.
func TestRAPIUserSnapshotRecords(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	h.apply(RAPIUsersReplace{Now: h.now, Users: []RAPIUser{{Name: "fred", Scheme: SchemeHA1, Hash: testHA1}}})
	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	line := `{"t":"rapi_user","v":{"name":"fred","scheme":"ha1","hash":"` + testHA1 + `"}}` + "\n"
	if !bytes.Contains(data, []byte(line)) {
		t.Fatalf("no rapi_user record in\n%s", data)
	}
	for name, bad := range map[string][]byte{
		"twice":     bytes.Replace(data, []byte(line), []byte(line+line), 1),
		"cleartext": bytes.Replace(data, []byte(line), []byte(`{"t":"rapi_user","v":{"name":"fred","scheme":"cleartext","hash":"pw"}}`+"\n"), 1),
		"unknown":   bytes.Replace(data, []byte(line), []byte(`{"t":"rapi_user","v":{"name":"fred","scheme":"ha1","hash":"`+testHA1+`","admin":true}}`+"\n"), 1),
	} {
		if _, _, err := DecodeSnapshot(bytes.NewReader(bad)); err == nil {
			t.Errorf("%s: snapshot accepted", name)
		}
	}
}

// TestRAPIUsersOlderSnapshot: the version-2 snapshot of an older build
// restores with no users and anonymous reads off.
func TestRAPIUsersOlderSnapshot(t *testing.T) {
	data, err := os.ReadFile("testdata/snapshot-v2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f := New()
	if err := f.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	f.Read(func(s *State, _ uint64) {
		if len(s.RAPIUsers) != 0 || s.RAPIAnonymousRead() {
			t.Fatalf("users %v, anonymous read %v", s.RAPIUsers, s.RAPIAnonymousRead())
		}
	})
}

// TestRAPIAnonymousReadOption: OP_CLUSTER_SET_PARAMS sets the option and
// bumps the serial number.
func TestRAPIAnonymousReadOption(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	before := h.serial()
	r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_CLUSTER_SET_PARAMS","rapi_anonymous_read":true}`)}, UUIDs: []string{"u"}}).(Response)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	h.f.Read(func(s *State, _ uint64) {
		if !s.RAPIAnonymousRead() || s.Cluster.SerialNo != before+1 {
			t.Fatalf("anonymous read %v, serial %d (was %d)", s.RAPIAnonymousRead(), s.Cluster.SerialNo, before)
		}
	})
}
