package confd

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// testKey is a key file as Ganeti writes one: 40 hex characters and a
// newline, all of which is the key.
var testKey = []byte("0123456789abcdef0123456789abcdef01234567\n")

type golden struct {
	Key    string `json:"key"`
	Golden []struct {
		Name   string `json:"name"`
		Packet string `json:"packet"`
		Msg    string `json:"msg"`
		Salt   string `json:"salt"`
	} `json:"golden"`
}

func loadGolden(t testing.TB) golden {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if g.Key != string(testKey) {
		t.Fatalf("golden packets were made with another key")
	}
	return g
}

// TestGoldenPython: packets built by Ganeti's Python serializer (see
// testdata/gen_golden.py), among them the two examples of the confd
// design re-signed with the test key, open unchanged.
func TestGoldenPython(t *testing.T) {
	m := NewMAC(testKey)
	for _, g := range loadGolden(t).Golden {
		env, _, err := ParseEnvelope([]byte(g.Packet), nil)
		if err != nil {
			t.Errorf("%s: %v", g.Name, err)
			continue
		}
		if string(env.Msg) != g.Msg || string(env.Salt) != g.Salt {
			t.Errorf("%s: msg %q salt %q, want %q %q", g.Name, env.Msg, env.Salt, g.Msg, g.Salt)
		}
		if !m.Verify(env.Salt, env.Msg, env.HMAC) {
			t.Errorf("%s: HMAC does not verify", g.Name)
		}
		if NewMAC([]byte(strings.TrimSpace(string(testKey)))).Verify(env.Salt, env.Msg, env.HMAC) {
			t.Errorf("%s: verifies without the key file's newline; the whole file must be the key", g.Name)
		}
		if strings.HasPrefix(g.Name, "design-reply") {
			r, err := ParseReply(env.Msg)
			if err != nil || r.Status != 0 || string(r.Answer) != "0" || r.Serial != 42 {
				t.Errorf("%s: %+v %v", g.Name, r, err)
			}
			continue
		}
		req, _, err := ParseRequest(env.Msg, nil)
		if err != nil {
			t.Errorf("%s: %v", g.Name, err)
			continue
		}
		switch g.Name {
		case "design-request":
			if req.Type != ReqNodeRoleByName || req.Query.Kind != QueryString || req.Query.Str != "node1.example.com" ||
				req.RSalt != "9aa6ce92-8336-11de-af38-001d093e835f" {
				t.Errorf("%s: %+v", g.Name, req)
			}
		case "pip-by-ip":
			q := req.Query
			if q.Kind != QueryDict || !q.HasLink || q.Link != "br0" || !q.HasIP || q.IP != "192.0.2.10" || q.BadDict {
				t.Errorf("%s: %+v", g.Name, q)
			}
		case "pip-by-iplist":
			q := req.Query
			if !q.HasIPList || len(q.IPList) != 2 || q.IPList[1] != "192.0.2.11" || q.HasIP {
				t.Errorf("%s: %+v", g.Name, q)
			}
		case "master-fields":
			if q := req.Query; !q.HasFields || len(q.Fields) != 3 || q.Fields[2] != FieldMNodePip {
				t.Errorf("%s: %+v", g.Name, q)
			}
		case "ping-null-query":
			if req.Type != ReqPing || req.Query.Kind != QueryNone {
				t.Errorf("%s: %+v", g.Name, req)
			}
		case "non-ascii-query":
			if req.Query.Str != "n\u00f6de-\U0001F600" {
				t.Errorf("%s: %q", g.Name, req.Query.Str)
			}
		}
	}
}

// TestGoldenBuilt: what confd sends, byte for byte, with digests computed
// by Python's hmac module over the same salt and message.
func TestGoldenBuilt(t *testing.T) {
	m := NewMAC(testKey)
	reply := AppendEnvelope(nil, m, []byte("9aa6ce92-8336-11de-af38-001d093e835f"), AppendReplyMsg(nil, StatusOK, []byte("0"), 42))
	want := `plj0{"hmac":"4499c665cddc8c810883265ce68386f80e9593ed","msg":"{\"protocol\":1,\"status\":0,\"answer\":0,\"serial\":42}","salt":"9aa6ce92-8336-11de-af38-001d093e835f"}`
	if string(reply) != want {
		t.Errorf("reply packet\n got %s\nwant %s", reply, want)
	}
	req := AppendEnvelope(nil, m, []byte("1249637704"),
		AppendRequestMsg(nil, ReqNodeRoleByName, QueryJSON(Query{Kind: QueryString, Str: "node1.example.com"}), "9aa6ce92-8336-11de-af38-001d093e835f"))
	want = `plj0{"hmac":"80cec0e0c6c272b7561a5cf68ae1adb70d5475d1","msg":"{\"protocol\":1,\"type\":1,\"query\":\"node1.example.com\",\"rsalt\":\"9aa6ce92-8336-11de-af38-001d093e835f\"}","salt":"1249637704"}`
	if string(req) != want {
		t.Errorf("request packet\n got %s\nwant %s", req, want)
	}
}

// TestPythonAcceptsOurs runs Ganeti's LoadSignedJson (as transcribed in
// testdata/gen_golden.py) over packets confd builds, when python3 is here.
func TestPythonAcceptsOurs(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	m := NewMAC(testKey)
	packets := []string{
		string(AppendEnvelope(nil, m, []byte("rsalt-1"), AppendReplyMsg(nil, StatusOK, []byte(`"192.0.2.1"`), 7))),
		string(AppendEnvelope(nil, m, []byte("rsalt-\u00e9"), AppendReplyMsg(nil, StatusOK, asciiJSON([]byte("[\"n\u00f6de\",\"\U0001F600\"]")), 8))),
		string(BuildRequest(m, testNow, ReqNodePipByInstanceIP, Query{Kind: QueryDict, HasIP: true, IP: "192.0.2.10", HasLink: true, Link: "br\"0"}, "rs")),
	}
	in, _ := json.Marshal(map[string]any{"packets": packets})
	cmd := exec.Command(py, "testdata/gen_golden.py", "verify")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python refused our packets: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{
		`[{"answer": "192.0.2.1", "protocol": 1, "serial": 7, "status": 0}, "rsalt-1"]`,
		`[{"answer": ["n\u00f6de", "\ud83d\ude00"], "protocol": 1, "serial": 8, "status": 0}, "rsalt-\u00e9"]`,
		`[{"protocol": 1, "query": {"0": "br\"0", "1": "192.0.2.10"}, "rsalt": "rs", "type": 2}, "1700000000"]`,
	}
	if len(lines) != len(want) {
		t.Fatalf("python printed %q", out)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("packet %d as python reads it:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

// TestRoundTrip: requests and replies built here parse back to what was
// built, for every request type and query kind.
func TestRoundTrip(t *testing.T) {
	m := NewMAC(testKey)
	queries := []Query{
		{},
		{Kind: QueryString, Str: "node1.example.com"},
		{Kind: QueryString, Str: "quote\" back\\ nl\n tab\t uni\u00e9 \U0001F600 ctl\x01"},
		{Kind: QueryDict, HasIP: true, IP: "192.0.2.1"},
		{Kind: QueryDict, HasLink: true, Link: "br0", HasIPList: true, IPList: []string{"192.0.2.1", "2001:db8::1"}},
		{Kind: QueryDict, HasIPList: true, IPList: []string{}},
		{Kind: QueryDict, HasFields: true, Fields: []int{2, 0, 1}},
	}
	for _, typ := range RequestTypes() {
		for _, q := range queries {
			pkt := BuildRequest(m, testNow, typ, q, "rsalt-x")
			env, _, err := ParseEnvelope(pkt, nil)
			if err != nil || !m.Verify(env.Salt, env.Msg, env.HMAC) || string(env.Salt) != "1700000000" {
				t.Fatalf("%v %+v: %v", typ, q, err)
			}
			got, _, err := ParseRequest(env.Msg, nil)
			if err != nil {
				t.Fatalf("%v %+v: %v", typ, q, err)
			}
			if got.Type != typ || got.RSalt != "rsalt-x" || got.Protocol != 1 || !sameQuery(got.Query, q) {
				t.Errorf("%v: sent %+v, read %+v", typ, q, got)
			}
		}
	}
	for _, ans := range []string{`0`, `"192.0.2.1"`, `[[0,"192.0.2.1",3],[1,0,3]]`, `{"a":[1,2,{"b":null}]}`, `"\u00e9"`} {
		pkt := AppendEnvelope(nil, m, []byte("rs"), AppendReplyMsg(nil, StatusError, []byte(ans), 9))
		r, err := OpenReply(m, pkt, "rs")
		if err != nil || r.Status != StatusError || r.Serial != 9 || string(r.Answer) != ans {
			t.Errorf("reply %s: %+v %v", ans, r, err)
		}
		if _, err := OpenReply(m, pkt, "other"); err != ErrSalt {
			t.Errorf("reply for another rsalt: %v", err)
		}
	}
}

func sameQuery(a, b Query) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if a.IPList == nil && b.IPList != nil && len(b.IPList) == 0 || b.IPList == nil && a.IPList != nil && len(a.IPList) == 0 {
		a.IPList, b.IPList = nil, nil
		ja, _ = json.Marshal(a)
		jb, _ = json.Marshal(b)
	}
	return bytes.Equal(ja, jb)
}

func TestMACVerify(t *testing.T) {
	m := NewMAC(testKey)
	salt, msg := []byte("1700000000"), []byte(`{"x":1}`)
	d := m.Append(nil, salt, msg)
	if !m.Verify(salt, msg, d) {
		t.Fatal("own digest refused")
	}
	if !m.Verify(salt, msg, bytes.ToUpper(d)) {
		t.Error("upper-case digest refused; Ganeti compares case-insensitively")
	}
	for _, bad := range [][]byte{nil, d[:39], append(append([]byte(nil), d...), '0'), bytes.Repeat([]byte("g"), 40)} {
		if m.Verify(salt, msg, bad) {
			t.Errorf("digest %q accepted", bad)
		}
	}
	if m.Verify([]byte("1700000001"), msg, d) || m.Verify(salt, []byte(`{"x":2}`), d) {
		t.Error("digest of other data accepted")
	}
	if NewMAC([]byte("another key\n")).Verify(salt, msg, d) {
		t.Error("digest accepted under another key")
	}
}

func TestParseRequestType(t *testing.T) {
	for in, want := range map[string]RequestType{
		"node-role-byname": ReqNodeRoleByName, "NODE_ROLE_BYNAME": ReqNodeRoleByName,
		"CONFD_REQ_NODE_PIP_BY_INSTANCE_IP": ReqNodePipByInstanceIP, "11": ReqDataCollectors,
		"mc-pip-list": ReqMcPipList, "ping": ReqPing,
	} {
		if got, err := ParseRequestType(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "12", "-1", "node-role", "NODE ROLE BYNAME"} {
		if _, err := ParseRequestType(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
