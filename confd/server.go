package confd

import (
	"context"
	"crypto/sha1"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
)

// Source is where the server reads the configuration it answers from.
type Source interface {
	// View calls fn with the state, which fn must neither change nor keep,
	// and with the name of the master node as this candidate knows it (""
	// if it knows none). It returns false without calling fn while it has
	// no configuration to answer from (a gntd that is not a candidate);
	// the server then stays silent.
	View(fn func(st *fsm.State, master string)) bool
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// Key is the cluster key file's contents; without one (see SetKey,
	// and SetKeys while the key is renewed) every packet is dropped.
	Key    []byte
	Source Source
	// Version is the PING answer (see View.Version).
	Version int
	Logger  hclog.Logger
	// Now is the clock requests are checked against (time.Now if nil).
	Now func() time.Time
	// Workers is the number of goroutines reading the socket
	// (GOMAXPROCS if 0).
	Workers int
	// ReplayCapacity bounds the replay cache (262144 MACs if 0).
	ReplayCapacity int
	// LogEvery is the least time between two log lines about dropped
	// packets of one kind (10 s if 0).
	LogEvery time.Duration
}

// Drop reasons, the labels of Stats.Dropped.
const (
	DropTooLarge    = "too_large"
	DropMagic       = "bad_magic"
	DropEnvelope    = "bad_envelope"
	DropHMAC        = "bad_hmac"
	DropTimestamp   = "bad_timestamp"
	DropReplay      = "replay"
	DropMessage     = "bad_message"
	DropProtocol    = "bad_protocol"
	DropType        = "unknown_type"
	DropNotServing  = "not_serving"
	DropNoKey       = "no_key"
	DropReplyFailed = "reply_failed"
)

var dropReasons = []string{DropTooLarge, DropMagic, DropEnvelope, DropHMAC, DropTimestamp, DropReplay,
	DropMessage, DropProtocol, DropType, DropNotServing, DropNoKey, DropReplyFailed}

// DropReasons lists every drop reason.
func DropReasons() []string { return append([]string(nil), dropReasons...) }

// Server answers confd requests on a UDP socket.
type Server struct {
	o      ServerOptions
	keys   atomic.Pointer[[][]byte]
	replay *replayCache

	answered [len(reqNames)]atomic.Uint64
	dropped  map[string]*dropCounter
}

type dropCounter struct {
	n          atomic.Uint64
	lastLog    atomic.Int64 // unix nanoseconds of the last log line
	suppressed atomic.Uint64
}

// NewServer returns a server; Serve runs it.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.ReplayCapacity <= 0 {
		o.ReplayCapacity = 1 << 18
	}
	if o.LogEvery <= 0 {
		o.LogEvery = 10 * time.Second
	}
	s := &Server{o: o, replay: newReplayCache(o.ReplayCapacity), dropped: map[string]*dropCounter{}}
	for _, r := range dropReasons {
		s.dropped[r] = &dropCounter{}
	}
	if len(o.Key) > 0 {
		s.SetKey(o.Key)
	}
	return s
}

// SetKey sets the cluster key (a gntd learns it when it joins).
func (s *Server) SetKey(key []byte) { s.SetKeys(key) }

// SetKeys sets the keys requests are accepted with, while the cluster key
// is renewed: a request signed with any of them is answered, and the
// answer is signed with the key that signed the request, so that a client
// holding either key reads it. No key means every packet is dropped.
func (s *Server) SetKeys(keys ...[]byte) {
	ks := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if len(k) > 0 {
			ks = append(ks, append([]byte(nil), k...))
		}
	}
	if len(ks) == 0 {
		s.keys.Store(nil)
		return
	}
	s.keys.Store(&ks)
}

// Stats are the server's counters since it started.
type Stats struct {
	Answered map[RequestType]uint64
	Dropped  map[string]uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := Stats{Answered: map[RequestType]uint64{}, Dropped: map[string]uint64{}}
	for i := range s.answered {
		st.Answered[RequestType(i)] = s.answered[i].Load()
	}
	for r, c := range s.dropped {
		st.Dropped[r] = c.n.Load()
	}
	return st
}

// Serve answers requests arriving on conn until ctx ends; then it closes
// conn and returns once every worker has stopped.
func (s *Server) Serve(ctx context.Context, conn *net.UDPConn) error {
	var wg sync.WaitGroup
	for i := 0; i < s.o.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(conn)
		}()
	}
	<-ctx.Done()
	conn.Close()
	wg.Wait()
	return nil
}

// maxDatagram is the largest UDP payload; reading into a buffer this big
// lets the server see (and refuse) datagrams over MaxPacket instead of
// answering a truncated prefix.
const maxDatagram = 65535

func (s *Server) work(conn *net.UDPConn) {
	w := newWorker()
	buf := make([]byte, maxDatagram)
	for {
		n, addr, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		reply := s.handle(w, buf[:n], addr)
		if reply == nil {
			continue
		}
		if _, err := conn.WriteToUDPAddrPort(reply, addr); err != nil && !errors.Is(err, net.ErrClosed) {
			s.drop(DropReplyFailed, addr, err)
		}
	}
}

// worker holds one goroutine's reusable buffers and MAC.
type worker struct {
	keys   *[][]byte
	macs   []*MAC
	mac    *MAC // of the key that verified the request being answered
	envBuf []byte
	msgBuf []byte
	ans    []byte
	msg    []byte
	out    []byte
}

func newWorker() *worker {
	return &worker{envBuf: make([]byte, 0, 4096), msgBuf: make([]byte, 0, 4096),
		ans: make([]byte, 0, 4096), msg: make([]byte, 0, 4096), out: make([]byte, 0, 8192)}
}

// handle processes one datagram and returns the reply packet, or nil when
// the request is dropped. The reply is valid until the next call with the
// same worker. It is the server's whole logic, without the socket.
func (s *Server) handle(w *worker, packet []byte, from netip.AddrPort) []byte {
	keys := s.keys.Load()
	if keys == nil {
		s.drop(DropNoKey, from, nil)
		return nil
	}
	if w.keys != keys {
		w.keys, w.macs = keys, w.macs[:0]
		for _, k := range *keys {
			w.macs = append(w.macs, NewMAC(k))
		}
	}
	env, envBuf, err := ParseEnvelope(packet, w.envBuf)
	w.envBuf = envBuf
	switch {
	case errors.Is(err, ErrTooLarge):
		s.drop(DropTooLarge, from, err)
		return nil
	case errors.Is(err, ErrMagic):
		s.drop(DropMagic, from, err)
		return nil
	case err != nil:
		s.drop(DropEnvelope, from, err)
		return nil
	}
	w.mac = nil
	for _, m := range w.macs {
		if m.Verify(env.Salt, env.Msg, env.HMAC) {
			w.mac = m
			break
		}
	}
	if w.mac == nil {
		s.drop(DropHMAC, from, ErrHMAC)
		return nil
	}
	now := s.o.Now().Unix()
	ts, ok := parseTimestamp(env.Salt)
	if !ok || ts < now-int64(MaxClockSkew.Seconds()) || ts > now+int64(MaxClockSkew.Seconds()) {
		s.drop(DropTimestamp, from, ErrTimestamp)
		return nil
	}
	if !s.replay.admit(w.mac.last(), ts, now) {
		s.drop(DropReplay, from, ErrReplay)
		return nil
	}
	req, msgBuf, err := ParseRequest(env.Msg, w.msgBuf)
	w.msgBuf = msgBuf
	switch {
	case errors.Is(err, ErrProtocol):
		s.drop(DropProtocol, from, err)
		return nil
	case errors.Is(err, ErrType):
		s.drop(DropType, from, err)
		return nil
	case err != nil:
		s.drop(DropMessage, from, err)
		return nil
	}
	var (
		status int
		serial int64
	)
	served := s.o.Source.View(func(st *fsm.State, master string) {
		w.ans, status, serial = AppendAnswer(w.ans[:0], View{State: st, Master: master, Version: s.o.Version}, &req)
	})
	if !served {
		s.drop(DropNotServing, from, nil)
		return nil
	}
	w.msg = AppendReplyMsg(w.msg[:0], status, w.ans, serial)
	w.out = AppendEnvelope(w.out[:0], w.mac, []byte(req.RSalt), w.msg)
	if len(w.out) > MaxPacket {
		// The answer does not fit in a datagram (CONFIG_QUERY of a whole
		// collection, say): say so rather than send nothing.
		w.msg = AppendReplyMsg(w.msg[:0], StatusError, answerCodes[ErrorInternal], serial)
		w.out = AppendEnvelope(w.out[:0], w.mac, []byte(req.RSalt), w.msg)
	}
	s.answered[req.Type].Add(1)
	return w.out
}

// parseTimestamp reads a request salt: a decimal unix time, as Ganeti's
// clients write it ("%d" % time.time()).
func parseTimestamp(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// drop counts a dropped packet and logs it, at most once per LogEvery per
// reason (with the number of lines held back since).
func (s *Server) drop(reason string, from netip.AddrPort, err error) {
	c := s.dropped[reason]
	c.n.Add(1)
	now := time.Now().UnixNano()
	last := c.lastLog.Load()
	if now-last < int64(s.o.LogEvery) || !c.lastLog.CompareAndSwap(last, now) {
		c.suppressed.Add(1)
		return
	}
	args := []any{"reason", reason, "from", from.String(), "suppressed", c.suppressed.Swap(0)}
	if err != nil {
		args = append(args, "error", err)
	}
	s.o.Logger.Info("dropped confd packet", args...)
}

// last is the raw MAC computed by the last Verify or Append.
func (m *MAC) last() [sha1.Size]byte { return m.sum }
