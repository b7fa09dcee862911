package fsm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestParseUIDPool: the text form, good and bad; want is FormatUIDPool
// of the result, or "error: " and a part of the message.
func TestParseUIDPool(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"1000", "1000"},
		{"1000-1009,1020", "1000-1009, 1020"},
		{"1020, 1000-1009", "1000-1009, 1020"},
		{" 1000 - 1009 ,,", "1000-1009"},
		{"1000-1000", "1000"},
		{"1-1,2", "1, 2"},
		{"4294967294", "4294967294"},
		{"2000-1000", "error: lower bound 2000 is larger than the higher bound 1000"},
		{"0", "error: uid 0 is root's"},
		{"0-10", "error: uid 0 is root's"},
		{"4294967295", "error: above the highest allowed, 4294967294"},
		{"99999999999", "error: not a user id"},
		{"1000-1010,1005", "error: ranges 1000-1010 and 1005 overlap"},
		{"1000,1000", "error: ranges 1000 and 1000 overlap"},
		{"1-2-3", "error: not a user id"},
		{"-5", "error: not a user id"},
		{"5-", "error: not a user id"},
		{"abc", "error: not a user id"},
		{"+5", "error: not a user id"},
		{"0x10", "error: not a user id"},
		{"10 20", "error: not a user id"},
		{"1000-70000", "error: more than 65536 user ids, over the limit"},
		{"1-65536", "1-65536"},
		{"1-65536,70000", "error: more than 65536 user ids"},
		{strings.Repeat("1,", 40000), "error: over the limit of 65536"},
	} {
		got, e := ParseUIDPool("uid_pool", c.in)
		var s string
		if e != nil {
			s = "error: " + e.Msg
			if e.Field != "uid_pool" || e.Code != CodeInval {
				t.Errorf("%q: error %+v: want field uid_pool, code inval", c.in, e)
			}
		} else {
			s = FormatUIDPool(got)
		}
		if strings.HasPrefix(c.want, "error: ") {
			if !strings.HasPrefix(s, "error: ") || !strings.Contains(s, strings.TrimPrefix(c.want, "error: ")) {
				t.Errorf("%q: got %q, want %q", c.in, s, c.want)
			}
		} else if s != c.want {
			t.Errorf("%q: got %q, want %q", c.in, s, c.want)
		}
	}
	many := make([]string, MaxUIDPoolRanges+1)
	for i := range many {
		many[i] = fmt.Sprint(1000 + 2*i)
	}
	if _, e := ParseUIDPool("uid_pool", strings.Join(many, ",")); e == nil || !strings.Contains(e.Msg, "more than 1024 ranges") {
		t.Errorf("%d ranges: %v, want the limit named", len(many), e)
	}
	if _, e := ParseUIDPool("uid_pool", strings.Join(many[:MaxUIDPoolRanges], ",")); e != nil {
		t.Errorf("%d ranges: %v", MaxUIDPoolRanges, e)
	}
}

func TestUIDRangesFromJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{`[]`, ""},
		{`[[1020,1020],[1000,1009]]`, "1000-1009, 1020"},
		{`[[1000]]`, "error: item 0 has 1 numbers"},
		{`[[1000,1001,1002]]`, "error: item 0 has 3 numbers"},
		{`[[0,5]]`, "error: uid 0 is root's"},
		{`[[-5,5]]`, "error: below 1"},
		{`[[5,1]]`, "error: larger than the higher bound"},
		{`[[1,10],[10,20]]`, "error: overlap"},
	} {
		var pairs [][]int64
		if err := json.Unmarshal([]byte(c.in), &pairs); err != nil {
			t.Fatal(err)
		}
		got, e := UIDRangesFromJSON("add_uids", pairs)
		var s string
		if e != nil {
			s = "error: " + e.Msg
		} else {
			s = FormatUIDPool(got)
		}
		if strings.HasPrefix(c.want, "error: ") {
			if !strings.Contains(s, strings.TrimPrefix(c.want, "error: ")) {
				t.Errorf("%s: got %q, want %q", c.in, s, c.want)
			}
		} else if s != c.want {
			t.Errorf("%s: got %q, want %q", c.in, s, c.want)
		}
	}
}

// FuzzParseUIDPool: no input crashes the parser; what it accepts is a
// valid pool, whose text form reads back to the same pool.
func FuzzParseUIDPool(f *testing.F) {
	for _, s := range []string{"", "1000-1009,1020", "0", "1-2-3", " 5 , 6-7 ", "4294967294", "1000-1010,1005", "-", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, e := ParseUIDPool("uid_pool", s)
		if e != nil {
			if e.Field != "uid_pool" || !strings.HasPrefix(e.Msg, "uid_pool: ") {
				t.Fatalf("%q: error %+v does not name the field", s, e)
			}
			return
		}
		if e := CheckUIDPool("uid_pool", p); e != nil {
			t.Fatalf("%q: accepted %v, which CheckUIDPool refuses: %v", s, p, e)
		}
		if UIDPoolSize(p) > MaxUIDPoolSize {
			t.Fatalf("%q: %d uids accepted", s, UIDPoolSize(p))
		}
		q, e := ParseUIDPool("uid_pool", FormatUIDPool(p))
		if e != nil || !reflect.DeepEqual(p, q) && !(len(p) == 0 && len(q) == 0) {
			t.Fatalf("%q: %v formats as %q, which reads back as %v, %v", s, p, FormatUIDPool(p), q, e)
		}
	})
}

// TestUIDPoolModify: OP_CLUSTER_SET_PARAMS sets, adds to and removes from
// the pool as Ganeti does (set, then add, then remove); a refused change
// leaves the pool as it was; the pool survives a snapshot.
func TestUIDPoolModify(t *testing.T) {
	h := newHarness()
	if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(), UIDPool: []UIDRange{{2000, 2000}, {1000, 1009}},
		Node: NodeSpec{Name: "n1", UUID: h.uuid(), PrimaryIP: "192.0.2.1"}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	pool := func(f *FSM) string {
		var s string
		f.Read(func(st *State, _ uint64) { s = FormatUIDPool(st.Cluster.UIDPool) })
		return s
	}
	if got := pool(h.f); got != "1000-1009, 2000" {
		t.Fatalf("after init: %q", got)
	}
	for _, c := range []struct {
		op   string
		want string // the pool after, or "error: ..." (the pool unchanged)
	}{
		{`"add_uids":[[3000,3004]]`, "1000-1009, 2000, 3000-3004"},
		{`"add_uids":[[3000,3004],[4000,4000]]`, "1000-1009, 2000, 3000-3004, 4000"}, // an exact range again: no change, as Ganeti
		{`"add_uids":[[3002,3010]]`, "error: ranges 3000-3004 and 3002-3010 overlap"},
		{`"add_uids":[[0,3]]`, "error: uid 0 is root's"},
		{`"remove_uids":[[2000,2000]]`, "1000-1009, 3000-3004, 4000"},
		{`"remove_uids":[[1000,1004]]`, "error: 1000-1004 is not a range of the uid pool (1000-1009, 3000-3004, 4000)"},
		{`"remove_uids":[[4000,4000],[4000,4000]]`, "error: remove_uids: ranges 4000 and 4000 overlap"},
		{`"add_uids":[[1,70000]]`, "error: over the limit"},
		{`"uid_pool":[[500,509]],"add_uids":[[600,600]],"remove_uids":[[500,509]]`, "600"},
		{`"uid_pool":[[500,509]],"remove_uids":[[600,600]]`, "error: 600 is not a range of the uid pool (500-509)"},
		{`"uid_pool":[]`, ""},
		{`"remove_uids":[[1,1]]`, "error: 1 is not a range of the uid pool (empty)"},
		{`"uid_pool":[[1000,1001,1002]]`, "error: item 0 has 3 numbers"},
		{`"uid_pool":[[1000,1009],[1020,1020]]`, "1000-1009, 1020"},
	} {
		before := pool(h.f)
		op := json.RawMessage(`{"OP_ID":"OP_CLUSTER_SET_PARAMS",` + c.op + `}`)
		r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{op}, UUIDs: []string{h.uuid()}}).(Response)
		got := pool(h.f)
		if strings.HasPrefix(c.want, "error: ") {
			if r.Err == nil || !strings.Contains(r.Err.Error(), strings.TrimPrefix(c.want, "error: ")) {
				t.Errorf("%s: error %v, want %q", c.op, r.Err, c.want)
			}
			if got != before {
				t.Errorf("%s: refused, but the pool changed from %q to %q", c.op, before, got)
			}
			continue
		}
		if r.Err != nil {
			t.Errorf("%s: %v", c.op, r.Err)
		} else if got != c.want {
			t.Errorf("%s: pool %q, want %q", c.op, got, c.want)
		}
	}
	if got := pool(restored(t, snapshotOf(t, h.f))); got != "1000-1009, 1020" {
		t.Errorf("restored from a snapshot: %q", got)
	}
	h2 := newHarness()
	r := h2.apply(ClusterInit{Now: h2.now, Name: "c", UUID: h2.uuid(), GroupUUID: h2.uuid(), UIDPool: []UIDRange{{0, 10}},
		Node: NodeSpec{Name: "n1", UUID: h2.uuid(), PrimaryIP: "192.0.2.1"}}).(Response)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "uid 0") {
		t.Errorf("init with uid 0 in the pool: %v", r.Err)
	}
}

// TestSecurityModelRule: OP_CLUSTER_SET_PARAMS refuses effective kvm
// parameters that break Ganeti's security_model/security_domain rule, and
// changes nothing.
func TestSecurityModelRule(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	for _, c := range []struct{ hv, want string }{
		{`{"security_model":"user"}`, "security_model=user needs security_domain"},
		{`{"security_domain":"nobody"}`, `security_domain "nobody" goes only with security_model=user, not none`},
		{`{"security_model":"pool","security_domain":"nobody"}`, "not pool"},
		{`{"security_model":"user","security_domain":"nobody"}`, ""},
		{`{"security_model":"pool"}`, `security_domain "nobody" goes only with security_model=user, not pool (reset it in the same change: security_domain=default)`},
		{`{"security_model":"pool","security_domain":"default"}`, ""},
	} {
		before := h.f.Hash()
		op := json.RawMessage(`{"OP_ID":"OP_CLUSTER_SET_PARAMS","hvparams":{"kvm":` + c.hv + `}}`)
		r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{op}, UUIDs: []string{h.uuid()}}).(Response)
		switch {
		case c.want == "" && r.Err != nil:
			t.Errorf("%s: %v", c.hv, r.Err)
		case c.want != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), c.want) || r.Err.Field != "hvparams.kvm.security_domain"):
			t.Errorf("%s: %v, want %q on hvparams.kvm.security_domain", c.hv, r.Err, c.want)
		case c.want != "" && h.f.Hash() != before:
			t.Errorf("%s: refused, but the state changed", c.hv)
		}
	}
}
