package confd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

func testServer(t testing.TB) *Server {
	return NewServer(ServerOptions{Key: testKey, Source: fixedSource(testState(t), ""), Version: 10000,
		Now: func() time.Time { return testNow }})
}

func sign(msg string, ts int64) []byte {
	return AppendEnvelope(nil, NewMAC(testKey), []byte(strconv.FormatInt(ts, 10)), []byte(msg))
}

const goodMsg = `{"protocol":1,"type":1,"query":"node5","rsalt":"r1"}`

// TestBadInput: what the server drops without a word, and why.
func TestBadInput(t *testing.T) {
	now := testNow.Unix()
	good := sign(goodMsg, now)
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []struct {
		name   string
		packet []byte
		reason string
	}{
		{"empty", nil, DropMagic},
		{"short", []byte("plj"), DropMagic},
		{"other magic", append([]byte("plj1"), good[4:]...), DropMagic},
		{"magic only", []byte("plj0"), DropEnvelope},
		{"not an object", []byte(`plj0[]`), DropEnvelope},
		{"trailing garbage", append(append([]byte(nil), good...), 'x'), DropEnvelope},
		{"two objects", append(append([]byte(nil), good...), good[4:]...), DropEnvelope},
		{"missing hmac", []byte(`plj0{"msg":"{}","salt":"1700000000"}`), DropEnvelope},
		{"msg not a string", []byte(`plj0{"msg":{},"salt":"1700000000","hmac":"00"}`), DropEnvelope},
		{"non-UTF-8", []byte("plj0{\"msg\":\"\xff\",\"salt\":\"1\",\"hmac\":\"00\"}"), DropEnvelope},
		{"lone surrogate", []byte(`plj0{"msg":"\ud800","salt":"1","hmac":"00"}`), DropEnvelope},
		{"control char in string", []byte("plj0{\"msg\":\"a\nb\",\"salt\":\"1\",\"hmac\":\"00\"}"), DropEnvelope},
		{"deeply nested extra key", []byte(`plj0{"x":` + deep + `,"msg":"","salt":"1","hmac":"00"}`), DropTooLarge},
		{"nested beyond the limit", []byte(`plj0{"x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `,"msg":"","salt":"1","hmac":"00"}`), DropEnvelope},
		{"oversized", append(append([]byte(nil), good...), bytes.Repeat([]byte(" "), 65507-len(good))...), DropTooLarge},
		{"wrong hmac", sign(goodMsg, now)[:0], DropMagic},
		{"unsigned", []byte(`plj0{"msg":"` + strings.ReplaceAll(goodMsg, `"`, `\"`) + `","salt":"1700000000","hmac":"0000000000000000000000000000000000000000"}`), DropHMAC},
		{"other key", AppendEnvelope(nil, NewMAC([]byte("another key\n")), []byte("1700000000"), []byte(goodMsg)), DropHMAC},
		{"key without its newline", AppendEnvelope(nil, NewMAC(testKey[:40]), []byte("1700000000"), []byte(goodMsg)), DropHMAC},
		{"too old", sign(goodMsg, now-301), DropTimestamp},
		{"too new", sign(goodMsg, now+301), DropTimestamp},
		{"salt not a number", AppendEnvelope(nil, NewMAC(testKey), []byte("17e8"), []byte(goodMsg)), DropTimestamp},
		{"salt with fraction", AppendEnvelope(nil, NewMAC(testKey), []byte("1700000000.5"), []byte(goodMsg)), DropTimestamp},
		{"msg not JSON", sign(`{"protocol":1,`, now), DropMessage},
		{"msg not an object", sign(`[1]`, now), DropMessage},
		{"no rsalt", sign(`{"protocol":1,"type":1,"query":"node5"}`, now), DropMessage},
		{"empty rsalt", sign(`{"protocol":1,"type":1,"query":"node5","rsalt":""}`, now), DropMessage},
		{"no type", sign(`{"protocol":1,"query":"node5","rsalt":"r"}`, now), DropMessage},
		{"type not a number", sign(`{"protocol":1,"type":"1","query":"node5","rsalt":"r"}`, now), DropMessage},
		{"type fraction", sign(`{"protocol":1,"type":1.0,"query":"node5","rsalt":"r"}`, now), DropMessage},
		{"query a number", sign(`{"protocol":1,"type":1,"query":5,"rsalt":"r"}`, now), DropMessage},
		{"query a list", sign(`{"protocol":1,"type":1,"query":["node5"],"rsalt":"r"}`, now), DropMessage},
		{"query deeply nested", sign(`{"protocol":1,"type":1,"query":{"x":`+strings.Repeat("[", 1000)+strings.Repeat("]", 1000)+`},"rsalt":"r"}`, now), DropMessage},
		{"protocol 2", sign(`{"protocol":2,"type":1,"query":"node5","rsalt":"r"}`, now), DropProtocol},
		{"protocol 0", sign(`{"protocol":0,"type":1,"query":"node5","rsalt":"r"}`, now), DropProtocol},
		{"no protocol", sign(`{"type":1,"query":"node5","rsalt":"r"}`, now), DropMessage},
		{"unknown type 12", sign(`{"protocol":1,"type":12,"query":"node5","rsalt":"r"}`, now), DropType},
		{"unknown type -1", sign(`{"protocol":1,"type":-1,"query":"node5","rsalt":"r"}`, now), DropType},
		{"huge type", sign(`{"protocol":1,"type":99999999999999,"query":"node5","rsalt":"r"}`, now), DropType},
	}
	for _, c := range cases {
		s := testServer(t)
		if reply := s.handle(newWorker(), c.packet, fuzzFrom); reply != nil {
			t.Errorf("%s: answered %s", c.name, reply)
			continue
		}
		st := s.Stats()
		if st.Dropped[c.reason] != 1 {
			t.Errorf("%s: dropped %v, want %s", c.name, st.Dropped, c.reason)
		}
	}
}

// TestTruncationsAndBitFlips: no prefix of a valid packet, and no packet
// with one bit flipped in its MAC or payload, is answered, except where
// the flip leaves the signed content intact (a case change of a hex digit
// of the MAC, which Ganeti accepts too).
func TestTruncationsAndBitFlips(t *testing.T) {
	good := sign(goodMsg, testNow.Unix())
	s := testServer(t)
	if s.handle(newWorker(), good, fuzzFrom) == nil {
		t.Fatal("the valid packet is not answered")
	}
	for n := 0; n < len(good); n++ {
		if reply := testServer(t).handle(newWorker(), good[:n], fuzzFrom); reply != nil {
			t.Errorf("prefix of %d bytes answered", n)
		}
	}
	env, _, _ := ParseEnvelope(good, nil)
	macStart := bytes.Index(good, env.HMAC)
	for i := len(Magic); i < len(good); i++ {
		for bit := 0; bit < 8; bit++ {
			p := append([]byte(nil), good...)
			p[i] ^= 1 << bit
			reply := testServer(t).handle(newWorker(), p, fuzzFrom)
			if reply == nil {
				continue
			}
			inMAC := i >= macStart && i < macStart+40
			if inMAC && bit == 5 && bytes.EqualFold(p[i:i+1], good[i:i+1]) {
				continue // 'a' <-> 'A': the same digest
			}
			t.Errorf("byte %d bit %d flipped (%q -> %q) and still answered", i, bit, good[i], p[i])
		}
	}
}

// TestReplay: an exact replay is refused; the same question asked again
// (a new rsalt, so a new MAC) is answered.
func TestReplay(t *testing.T) {
	s := testServer(t)
	w := newWorker()
	p := sign(goodMsg, testNow.Unix())
	if s.handle(w, p, fuzzFrom) == nil {
		t.Fatal("first request not answered")
	}
	if s.handle(w, p, fuzzFrom) != nil {
		t.Error("replay answered")
	}
	// Upper-case MAC digits are the same MAC: still a replay.
	up := bytes.Replace(p, []byte(`"hmac":"`), []byte(`"hmac":"`), 1)
	env, _, _ := ParseEnvelope(p, nil)
	up = bytes.Replace(up, env.HMAC, bytes.ToUpper(env.HMAC), 1)
	if s.handle(w, up, fuzzFrom) != nil {
		t.Error("replay with an upper-case MAC answered")
	}
	if s.handle(w, sign(strings.Replace(goodMsg, "r1", "r2", 1), testNow.Unix()), fuzzFrom) == nil {
		t.Error("a new request is refused")
	}
	if got := s.Stats().Dropped[DropReplay]; got != 2 {
		t.Errorf("replays counted: %d", got)
	}
}

// TestReplayCacheBounded: a full cache forgets the oldest timestamps and
// refuses from then on whatever is stamped at or before them, but keeps
// answering the current second.
func TestReplayCacheBounded(t *testing.T) {
	c := newReplayCache(replayShards * 4)
	now := int64(1000)
	mac := func(i int) (m [20]byte) {
		m[0] = byte(i % replayShards)
		m[1], m[2] = byte(i>>8), byte(i)
		return m
	}
	// Fill shard 0 with four MACs stamped now-10 .. now-7.
	for i := 0; i < 4; i++ {
		if !c.admit(mac(i*replayShards), now-10+int64(i), now) {
			t.Fatalf("fresh MAC %d refused", i)
		}
	}
	// A fifth evicts the oldest bucket (now-10): floor = now-10.
	if !c.admit(mac(4*replayShards), now, now) {
		t.Fatal("current request refused")
	}
	if c.admit(mac(0), now-10, now) {
		t.Error("a request stamped at the floor was answered: it may be a replay of a forgotten one")
	}
	if c.admit(mac(1*replayShards), now-9, now) {
		t.Error("a remembered MAC was answered again")
	}
	if !c.admit(mac(99*replayShards), now-8, now) { // evicts now-9, floor now-9
		t.Error("a new request above the floor was refused")
	}
	if n := c.len(); n > replayShards*4 {
		t.Errorf("cache holds %d, capacity %d", n, replayShards*4)
	}
	// Entries out of the window go first, without raising the floor.
	c2 := newReplayCache(replayShards * 2)
	c2.admit(mac(0), now-400, now-200)
	c2.admit(mac(replayShards), now-399, now-200)
	if !c2.admit(mac(2*replayShards), now, now) || !c2.admit(mac(3*replayShards), now-300, now) {
		t.Error("expired entries raised the floor")
	}
}

// TestNotServing: a gntd that holds no configuration stays silent; one
// without a key too.
func TestNotServing(t *testing.T) {
	s := NewServer(ServerOptions{Key: testKey, Source: noSource{}, Now: func() time.Time { return testNow }})
	if s.handle(newWorker(), sign(goodMsg, testNow.Unix()), fuzzFrom) != nil || s.Stats().Dropped[DropNotServing] != 1 {
		t.Error("answered without a configuration")
	}
	s = NewServer(ServerOptions{Source: fixedSource(testState(t), ""), Now: func() time.Time { return testNow }})
	if s.handle(newWorker(), sign(goodMsg, testNow.Unix()), fuzzFrom) != nil || s.Stats().Dropped[DropNoKey] != 1 {
		t.Error("answered without a key")
	}
	s.SetKey(testKey)
	if s.handle(newWorker(), sign(goodMsg, testNow.Unix()), fuzzFrom) == nil {
		t.Error("not answered after SetKey")
	}
}

// TestServerKeyRenewal: while the cluster key is renewed the server
// answers requests signed with either key, each answer signed with the
// request's key; once the old key is dropped its requests are refused.
func TestServerKeyRenewal(t *testing.T) {
	newKey := []byte("fedcba9876543210fedcba9876543210fedcba98\n")
	s := testServer(t)
	w := newWorker()
	signWith := func(key []byte, rsalt string) []byte {
		return AppendEnvelope(nil, NewMAC(key), []byte(strconv.FormatInt(testNow.Unix(), 10)),
			[]byte(strings.Replace(goodMsg, "r1", rsalt, 1)))
	}
	answeredWith := func(reply, key []byte) bool {
		env, _, err := ParseEnvelope(reply, nil)
		return err == nil && NewMAC(key).Verify(env.Salt, env.Msg, env.HMAC)
	}
	if s.handle(w, signWith(newKey, "a"), fuzzFrom) != nil {
		t.Fatal("a request with a key not yet accepted was answered")
	}
	s.SetKeys(testKey, newKey)
	for i, key := range [][]byte{testKey, newKey} {
		reply := s.handle(w, signWith(key, fmt.Sprint("b", i)), fuzzFrom)
		if reply == nil || !answeredWith(reply, key) {
			t.Fatalf("key %d: not answered, or not with the request's key", i)
		}
	}
	s.SetKeys(newKey)
	if s.handle(w, signWith(testKey, "c"), fuzzFrom) != nil {
		t.Fatal("a request with the dropped key was answered")
	}
	if reply := s.handle(w, signWith(newKey, "d"), fuzzFrom); reply == nil || !answeredWith(reply, newKey) {
		t.Fatal("the new key's request was not answered with it")
	}
	if d := s.Stats().Dropped[DropHMAC]; d != 2 {
		t.Fatalf("%d requests dropped for their HMAC, want 2", d)
	}
	s.SetKeys()
	if s.handle(w, signWith(newKey, "e"), fuzzFrom) != nil {
		t.Fatal("answered without a key")
	}
}

type noSource struct{}

func (noSource) View(func(*fsm.State, string)) bool { return false }

// TestAnswerTooLarge: an answer that does not fit a datagram becomes an
// internal error rather than silence.
func TestAnswerTooLarge(t *testing.T) {
	s := NewServer(ServerOptions{Key: testKey, Source: fsmSource{f: bigFSM(t, 100, 2000)}, Now: func() time.Time { return testNow }})
	reply := s.handle(newWorker(), sign(`{"protocol":1,"type":10,"query":"/instances","rsalt":"r"}`, testNow.Unix()), fuzzFrom)
	r, err := OpenReply(NewMAC(testKey), reply, "r")
	if err != nil || r.Status != StatusError || string(r.Answer) != "1" || r.Serial != 1000 {
		t.Errorf("%+v %v", r, err)
	}
}

// TestServeAndQuery runs a server on a loopback socket and queries it
// with the client, as gntd and gnt do.
func TestServeAndQuery(t *testing.T) {
	addrs := startServers(t, fsmSource{f: testFSM(t), master: "node2"}, fsmSource{f: testFSM(t), master: "node2"})
	c := &Client{Key: testKey, Peers: addrs}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Query(ctx, ReqNodeRoleByName, str("node2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Reply.Answer) != "0" || res.Reply.Serial != 17 || res.Sent != 2 || res.Needed != 2 || len(res.Answers) != 2 || !res.Agreed || !res.Consistent {
		t.Errorf("%+v", res)
	}
	res, err = c.Query(ctx, ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP = true, "192.0.2.10" }), 1)
	if err != nil || string(res.Reply.Answer) != `"192.0.2.5"` || res.Sent != 1 {
		t.Errorf("%+v %v", res, err)
	}
	if _, err := c.Query(ctx, ReqPing, Query{}, 3); err == nil {
		t.Error("coverage 3 of 2 accepted")
	}
}

// TestClientPicksHighestSerial: of a stale and an up-to-date candidate,
// the client returns the newer answer and says the replies disagreed.
func TestClientPicksHighestSerial(t *testing.T) {
	stale := testFSM(t)
	fresh := restore(t, 18, []*fsm.Node{
		{Name: "node1", PrimaryIP: "192.0.2.1", MasterCandidate: true},
		{Name: "node5", PrimaryIP: "192.0.2.5", Drained: true},
	}, nil)
	addrs := startServers(t, fsmSource{f: stale}, fsmSource{f: fresh})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ { // both orders of arrival, whichever comes
		res, err := (&Client{Key: testKey, Peers: addrs}).Query(ctx, ReqNodeRoleByName, str("node5"), -1)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Reply.Answer) != "3" || res.Reply.Serial != 18 || res.Agreed || !res.Consistent || len(res.Answers) != 2 {
			t.Fatalf("%+v", res)
		}
	}
	// A wrong key: every reply is refused, the query times out.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := (&Client{Key: []byte("wrong\n"), Peers: addrs}).Query(ctx2, ReqPing, Query{}, 0); err != ErrNoReplies {
		t.Errorf("wrong key: %v", err)
	}
}

func startServers(t *testing.T, srcs ...Source) []string {
	var addrs []string
	for _, src := range srcs {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		s := NewServer(ServerOptions{Key: testKey, Source: src, Version: 10000, Workers: 2})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Serve(ctx, conn); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		addrs = append(addrs, conn.LocalAddr().String())
	}
	return addrs
}

func TestNeededReplies(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4, 8: 5} {
		if got := NeededReplies(n); got != want {
			t.Errorf("NeededReplies(%d) = %d, want %d", n, got, want)
		}
	}
}
