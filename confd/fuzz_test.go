package confd

import (
	"bytes"
	"encoding/json"
	"github.com/gnt-cluster/gnt/fsm"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

var fuzzFrom = netip.MustParseAddrPort("127.0.0.1:40000")

var (
	fuzzStateOnce sync.Once
	fuzzState     *fsm.State
)

// fuzzServer answers from a small fixed configuration at testNow. The
// configuration is built once; the server (with its replay cache) is new
// for every input, so that an input run twice is answered twice.
func fuzzServer(t testing.TB) *Server {
	fuzzStateOnce.Do(func() { fuzzState = testState(t) })
	return NewServer(ServerOptions{Key: testKey, Source: fixedSource(fuzzState, "node1"), Version: 10000,
		Now: func() time.Time { return testNow }, ReplayCapacity: 64})
}

// checkReply: a reply, if any, opens with the key and answers rsalt.
func checkReply(t *testing.T, reply []byte, rsalt string) {
	if reply == nil {
		return
	}
	if len(reply) > MaxPacket {
		t.Fatalf("reply of %d bytes", len(reply))
	}
	r, err := OpenReply(NewMAC(testKey), reply, rsalt)
	if err != nil {
		t.Fatalf("server sent a reply its own client refuses: %v\n%s", err, reply)
	}
	if !json.Valid(r.Answer) {
		t.Fatalf("answer is not JSON: %s", r.Answer)
	}
	for _, c := range reply {
		if c >= utf8.RuneSelf {
			t.Fatalf("reply is not ASCII: %q", reply)
		}
	}
}

// envelopeOracle: whatever ParseEnvelope accepts, encoding/json reads the
// same way.
func envelopeOracle(t *testing.T, packet []byte) {
	env, _, err := ParseEnvelope(packet, nil)
	if err != nil {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(packet[len(Magic):], &m); err != nil {
		t.Fatalf("ParseEnvelope accepted what encoding/json refuses (%v): %q", err, packet)
	}
	for k, got := range map[string][]byte{"msg": env.Msg, "salt": env.Salt, "hmac": env.HMAC} {
		if s, ok := m[k].(string); !ok || s != string(got) {
			t.Fatalf("%s: ParseEnvelope read %q, encoding/json %q, in %q", k, got, m[k], packet)
		}
	}
}

// FuzzPacket feeds raw datagrams to the server's handler.
func FuzzPacket(f *testing.F) {
	for _, g := range loadGolden(f).Golden {
		f.Add([]byte(g.Packet))
	}
	m := NewMAC(testKey)
	f.Add(BuildRequest(m, testNow, ReqNodeRoleByName, Query{Kind: QueryString, Str: "node2"}, "r1"))
	f.Add(BuildRequest(m, testNow, ReqNodePipByInstanceIP, Query{Kind: QueryDict, HasIPList: true, IPList: []string{"192.0.2.10", "x"}}, "r2"))
	f.Add(BuildRequest(m, testNow, ReqConfigQuery, Query{Kind: QueryString, Str: "/cluster/name"}, "r3"))
	f.Add([]byte("plj0"))
	f.Add([]byte("plj0{}"))
	f.Add([]byte(`plj0{"msg":"\ud800","salt":"1","hmac":"00"}`))
	f.Fuzz(func(t *testing.T, packet []byte) {
		s := fuzzServer(t)
		envelopeOracle(t, packet)
		reply := s.handle(newWorker(), packet, fuzzFrom)
		if reply != nil {
			env, _, _ := ParseEnvelope(packet, nil)
			req, _, err := ParseRequest(env.Msg, nil)
			if err != nil {
				t.Fatalf("answered a request it cannot parse: %v", err)
			}
			checkReply(t, reply, req.RSalt)
		}
	})
}

// FuzzRequest feeds message bodies, signed by the harness with the test
// key and a valid timestamp, so that everything after authentication is
// exercised: the request decoder and every answer.
func FuzzRequest(f *testing.F) {
	for _, g := range loadGolden(f).Golden {
		f.Add([]byte(g.Msg))
	}
	for _, typ := range RequestTypes() {
		f.Add(AppendRequestMsg(nil, typ, []byte(`"node1"`), "r"))
		f.Add(AppendRequestMsg(nil, typ, []byte(`{"0":"br0","1":"192.0.2.10","2":["192.0.2.10",1],"3":[0,1,2,9]}`), "r"))
		f.Add(AppendRequestMsg(nil, typ, nil, "r"))
	}
	f.Add([]byte(`{"protocol":1,"type":10,"query":"/nodes/uuid-node1/name","rsalt":"r"}`))
	f.Add([]byte(`{"protocol":1,"type":1,"query":[[[[[[[[[[[[]]]]]]]]]]]],"rsalt":"r"}`))
	f.Add([]byte(`{"protocol":2,"type":1,"query":"node1","rsalt":"r"}`))
	m := NewMAC(testKey)
	salt := []byte(strconv.FormatInt(testNow.Unix(), 10))
	f.Fuzz(func(t *testing.T, msg []byte) {
		s := fuzzServer(t)
		req, _, err := ParseRequest(msg, nil)
		if err == nil {
			// The decoder accepts only JSON that encoding/json accepts.
			var v map[string]any
			if jerr := json.Unmarshal(msg, &v); jerr != nil {
				t.Fatalf("ParseRequest accepted what encoding/json refuses (%v): %q", jerr, msg)
			}
			if rs, _ := v["rsalt"].(string); rs != req.RSalt {
				t.Fatalf("rsalt %q, encoding/json reads %q", req.RSalt, rs)
			}
		}
		packet := AppendEnvelope(nil, m, salt, msg)
		reply := s.handle(newWorker(), packet, fuzzFrom)
		if (reply != nil) != (err == nil) && len(packet) <= MaxPacket {
			t.Fatalf("reply %v for a request the decoder judged %v", reply != nil, err)
		}
		checkReply(t, reply, req.RSalt)
		if reply != nil && bytes.Contains(reply, []byte(`"status":0`)) && req.Type == ReqNodeRoleByName {
			// An OK role answer is one of the five roles.
			r, _ := OpenReply(m, reply, req.RSalt)
			if n, err := strconv.Atoi(string(r.Answer)); err != nil || n < 0 || n > 4 {
				t.Fatalf("role answer %s", r.Answer)
			}
		}
	})
}
