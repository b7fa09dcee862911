package confd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Client sends requests to candidates' confd servers and picks, among the
// replies, the one with the highest configuration serial, as Ganeti's
// client library does (lib/confd/client.py).
type Client struct {
	// Key is the cluster key file's contents.
	Key []byte
	// Peers are the candidates' confd addresses (host:port).
	Peers []string
	// Now is the clock that stamps requests (time.Now if nil).
	Now func() time.Time
}

// Answer is one server's reply as the client received it.
type Answer struct {
	From  string `json:"from"`
	Reply Reply  `json:"-"`
}

// Result is the outcome of one query.
type Result struct {
	// Reply is the chosen reply: the highest serial among those received
	// (the first received among equals).
	Reply Reply
	// From is the address that sent the chosen reply.
	From string
	// Sent is how many candidates were asked, Needed how many replies the
	// client waited for, and Answers what came back, in arrival order.
	Sent, Needed int
	Answers      []Answer
	// Consistent is Ganeti's notion: no two replies with the same serial
	// had different answers.
	Consistent bool
	// Agreed says that every reply had the chosen reply's serial, status
	// and answer; it is false when a stale candidate answered too.
	Agreed bool
	// TimedOut is set when fewer than Needed replies came in time.
	TimedOut bool
}

// Errors of a query.
var (
	ErrNoPeers   = errors.New("confd: no candidate addresses to ask")
	ErrCoverage  = errors.New("confd: coverage exceeds the number of known candidates")
	ErrNoReplies = errors.New("confd: no candidate answered in time")
)

// NeededReplies is how many replies a query to n candidates waits for
// (Ganeti's _NeededReplies): all of fewer than three, all but one of three
// or four, a majority of five or more. (Ganeti's docstring says 4 -> 2;
// its code, followed here, gives 3.)
func NeededReplies(n int) int {
	switch {
	case n < 3:
		return n
	case n < 5:
		return n - 1
	default:
		return n/2 + 1
	}
}

// NewRSalt returns a random UUID (version 4), the rsalt of a request.
func NewRSalt() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// BuildRequest builds a signed request packet stamped now.
func BuildRequest(m *MAC, now time.Time, t RequestType, query Query, rsalt string) []byte {
	msg := AppendRequestMsg(nil, t, QueryJSON(query), rsalt)
	salt := strconv.AppendInt(nil, now.Unix(), 10)
	return AppendEnvelope(nil, m, salt, msg)
}

// OpenReply authenticates a reply packet and checks that it answers the
// request with rsalt.
func OpenReply(m *MAC, packet []byte, rsalt string) (Reply, error) {
	env, _, err := ParseEnvelope(packet, nil)
	if err != nil {
		return Reply{}, err
	}
	if !m.Verify(env.Salt, env.Msg, env.HMAC) {
		return Reply{}, ErrHMAC
	}
	if string(env.Salt) != rsalt {
		return Reply{}, ErrSalt
	}
	return ParseReply(env.Msg)
}

// Query sends one request to coverage candidates (0: min(#peers,
// DefaultCoverage); -1: all), chosen at random, and collects replies until
// NeededReplies(coverage) have come or ctx ends. Replies that fail
// authentication or answer another request are ignored. It fails only when
// it cannot send or no reply came; a Result with TimedOut set still
// carries the best reply received.
func (c *Client) Query(ctx context.Context, t RequestType, query Query, coverage int) (*Result, error) {
	if len(c.Peers) == 0 {
		return nil, ErrNoPeers
	}
	switch {
	case coverage == 0:
		coverage = min(len(c.Peers), DefaultCoverage)
	case coverage == -1:
		coverage = len(c.Peers)
	case coverage < 0 || coverage > len(c.Peers):
		return nil, fmt.Errorf("%w: %d asked, %d known", ErrCoverage, coverage, len(c.Peers))
	}
	peers := append([]string(nil), c.Peers...)
	shuffle(peers)
	peers = peers[:coverage]
	addrs := make([]netip.AddrPort, 0, len(peers))
	for _, p := range peers {
		a, err := netip.ParseAddrPort(p)
		if err != nil {
			ua, rerr := net.ResolveUDPAddr("udp", p)
			if rerr != nil {
				return nil, fmt.Errorf("confd: candidate address %q: %w", p, rerr)
			}
			a = ua.AddrPort()
		}
		addrs = append(addrs, netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	m := NewMAC(c.Key)
	rsalt := NewRSalt()
	packet := BuildRequest(m, now(), t, query, rsalt)
	if len(packet) > MaxPacket {
		return nil, fmt.Errorf("confd: request of %d bytes is larger than %d", len(packet), MaxPacket)
	}
	sent := 0
	var sendErr error
	for _, a := range addrs {
		if _, err := conn.WriteToUDPAddrPort(packet, a); err != nil {
			sendErr = err
			continue
		}
		sent++
	}
	if sent == 0 {
		return nil, fmt.Errorf("confd: sending the request: %w", sendErr)
	}
	res := &Result{Sent: sent, Needed: NeededReplies(sent), Consistent: true}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, maxDatagram)
	answered := map[netip.AddrPort]bool{}
	for len(answered) < res.Needed {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			res.TimedOut = true
			break
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		// Like Ganeti's client, count each answering address once; a
		// candidate bound to 0.0.0.0 may answer from another address than
		// the one asked.
		if answered[from] {
			continue
		}
		reply, err := OpenReply(m, buf[:n], rsalt)
		if err != nil {
			continue
		}
		answered[from] = true
		res.Answers = append(res.Answers, Answer{From: from.String(), Reply: reply})
	}
	if len(res.Answers) == 0 {
		return res, ErrNoReplies
	}
	res.choose()
	return res, nil
}

// choose picks the highest serial and works out Consistent and Agreed.
func (r *Result) choose() {
	best := 0
	for i, a := range r.Answers {
		if a.Reply.Serial > r.Answers[best].Reply.Serial {
			best = i
		}
	}
	r.Reply, r.From = r.Answers[best].Reply, r.Answers[best].From
	r.Consistent, r.Agreed = true, true
	for i, a := range r.Answers {
		same := a.Reply.Status == r.Reply.Status && jsonEqual(a.Reply.Answer, r.Reply.Answer)
		if a.Reply.Serial != r.Reply.Serial || !same {
			r.Agreed = false
		}
		for _, b := range r.Answers[:i] {
			if a.Reply.Serial == b.Reply.Serial && !jsonEqual(a.Reply.Answer, b.Reply.Answer) {
				r.Consistent = false
			}
		}
	}
}

// jsonEqual compares two JSON values by meaning (key order and spacing
// aside), as Ganeti compares decoded answers.
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func shuffle(s []string) {
	for i := len(s) - 1; i > 0; i-- {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(i+1)))
		if err != nil {
			continue
		}
		j := int(n.Int64())
		s[i], s[j] = s[j], s[i]
	}
}
