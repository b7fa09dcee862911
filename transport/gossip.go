package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// MemberState is a gossip member's state as this member sees it.
type MemberState string

// Member states. Left is a member that said goodbye (Leave) before it
// stopped; dead is one that stopped answering and was not vindicated
// within the suspicion timeout.
const (
	StateAlive   MemberState = "alive"
	StateSuspect MemberState = "suspect"
	StateDead    MemberState = "dead"
	StateLeft    MemberState = "left"
)

func stateOf(s memberlist.NodeStateType) MemberState {
	switch s {
	case memberlist.StateAlive:
		return StateAlive
	case memberlist.StateSuspect:
		return StateSuspect
	case memberlist.StateLeft:
		return StateLeft
	default:
		return StateDead
	}
}

// Meta is what a member advertises about itself in its gossip node meta.
// Encoded, it must fit memberlist.MetaMaxSize (512 bytes).
type Meta struct {
	Role    string `json:"role,omitempty"`    // "candidate" (runs a Raft server) or "node"
	API     string `json:"api,omitempty"`     // API address (candidates)
	Agent   string `json:"agent,omitempty"`   // node agent address
	Version string `json:"version,omitempty"` // gntd version
}

func (m Meta) encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip meta is %d bytes, more than memberlist's limit of %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// Member is one gossip member as this member sees it.
type Member struct {
	Name  string      `json:"name"`
	Addr  string      `json:"addr"` // gossip address, host:port
	State MemberState `json:"state"`
	// Since is when this member last saw the state change (memberlist's
	// own record of it, on this member's clock).
	Since time.Time `json:"since"`
	Meta  Meta      `json:"meta"`
	// BadMeta is set when the member's meta could not be decoded.
	BadMeta bool `json:"bad_meta,omitempty"`
}

// GossipTiming are the failure detector's settings; see LANGossipTiming.
type GossipTiming struct {
	ProbeInterval    time.Duration // one member probed per interval
	ProbeTimeout     time.Duration // wait for a direct ack before asking others
	SuspicionMult    int           // suspicion timeout = SuspicionMult × max(1, log10 N) × ProbeInterval
	SuspicionMaxMult int           // unconfirmed suspicion lasts up to this × the timeout
	GossipInterval   time.Duration // broadcasts (suspect, dead, alive) go out this often
	GossipNodes      int           // to this many random members
	RetransmitMult   int           // each broadcast goes to RetransmitMult × ceil(log10(N+1)) members
	PushPull         time.Duration // full state exchange with one random member
	TCPTimeout       time.Duration // bound of a push/pull or join connection
	GossipToTheDead  time.Duration // keep gossiping to dead members (so they can refute)
	ReclaimDead      time.Duration // a dead member's name may move to another address after this
	Poll             time.Duration // how often the member table is read for changes
	// TCPPings lets a failed UDP probe also try TCP (memberlist's
	// default), for networks that drop UDP but pass TCP.
	TCPPings bool
}

// LANGossipTiming is tuned so that a member that stops answering is dead
// in every other member's view within 3 s in a cluster of 6 and within 5 s
// at 50–100 members, where memberlist's DefaultLANConfig takes 6–12 s,
// while a member that is merely slow (a loaded machine, a GC pause) is not
// declared dead. gossip_bench_test.go measures both (make bench).
//
// How memberlist decides: every ProbeInterval each member probes one other
// (round robin over a shuffled list, so with N members some member probes
// any given one about every interval). A probe is a UDP ping; without an
// ack within ProbeTimeout it also asks 3 others to ping and tries TCP, and
// any ack until the end of the interval counts. Without one, it suspects
// the member and gossips that; every member then runs a suspicion timer
// that starts at SuspicionMaxMult × T and falls to T as independent
// suspicions from other probers arrive (Lifeguard), where T =
// SuspicionMult × max(1, log10 N) × ProbeInterval. When a timer fires the
// member is dead, and that is gossiped too. A live member that hears it is
// suspected refutes at once, so a false death needs a member to stay
// silent for a whole probe interval and then for T. Detection takes about
// two probe intervals plus T.
//
// The settings, against the stock ones:
//   - ProbeInterval 300 ms (1 s) is the main lever: it scales detection
//     and the suspicion timeout. It is also the time an ack may take
//     before its member is suspected, so it must stay above the
//     scheduling delays of a loaded machine (up to a few hundred ms on a
//     busy 2-core host); and every member sends 1/ProbeInterval pings a
//     second. 300 ms is about the longest interval that still meets 3 s
//     at 6 members (400 ms gave 2.9 s at worst).
//   - ProbeTimeout 250 ms (500 ms): the wait for a direct ack before the
//     indirect pings and the TCP attempt, which then have the last 50 ms
//     (plenty on a LAN). A late direct ack still counts, so the longer
//     wait costs nothing; it saves the indirect and TCP probes a slow
//     scheduler would otherwise set off, which cost the prober and three
//     helpers far more than a ping.
//   - SuspicionMult 4 (4): T = 1.2 s up to 10 members, 2.4 s at 100, and a
//     member must stay silent 1.5–2.7 s to be declared dead. Lifeguard
//     then waits for k = SuspicionMult−2 = 2 confirmations, which come
//     within a few probe intervals even at 6 members.
//   - SuspicionMaxMult 3 (6): an unconfirmed suspicion lasts at most 3 × T;
//     the stock 6 × T would be 7.2 s at 6 members whenever the two
//     confirmations are slow to come.
//   - PushPull 15 s (30 s): anti-entropy, scaled up by memberlist beyond 32
//     members, heals missed broadcasts and partitions sooner.
//   - ReclaimDead 30 s (never): a node re-installed with a new address may
//     rejoin under its name once its old self has been dead that long
//     (Consul's choice).
//   - GossipInterval 200 ms, GossipNodes 3, RetransmitMult 4, TCPTimeout
//     10 s and GossipToTheDead 30 s are stock; compression is off (see
//     NewGossip). A broadcast goes to RetransmitMult × ceil(log10(N+1))
//     members in all (4 below 9 members): fewer would let a Leave miss
//     members of a small cluster, which then take it for a death.
//   - Poll 1 s: how often this package reads the member table for changes
//     memberlist reports no event for (suspect, alive again); deaths and
//     joins are events and are read within minRefresh.
func LANGossipTiming() GossipTiming {
	return GossipTiming{
		ProbeInterval: 300 * time.Millisecond, ProbeTimeout: 250 * time.Millisecond,
		SuspicionMult: 4, SuspicionMaxMult: 3,
		GossipInterval: 200 * time.Millisecond, GossipNodes: 3, RetransmitMult: 4,
		PushPull: 15 * time.Second, TCPTimeout: 10 * time.Second,
		GossipToTheDead: 30 * time.Second, ReclaimDead: 30 * time.Second,
		Poll: time.Second, TCPPings: true,
	}
}

// SuspicionTimeout is memberlist's suspicion timeout for n members once
// enough other members confirmed the suspicion (the minimum), and the
// longest one when none do.
func (t GossipTiming) SuspicionTimeout(n int) (min, max time.Duration) {
	scale := 1.0
	if n > 10 {
		scale = math.Log10(float64(n))
	}
	min = time.Duration(float64(t.SuspicionMult) * scale * float64(t.ProbeInterval))
	return min, min * time.Duration(max1(t.SuspicionMaxMult))
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// GossipConfig configures a gossip member.
type GossipConfig struct {
	Name   string // unique member name (the node name)
	BindIP string // the IP the member binds, advertises and dials from
	Port   int    // UDP and TCP port; 0 picks a free one (tests)
	// Key encrypts and authenticates all gossip (AES-GCM); 16, 24 or 32
	// bytes. Members without it can neither read nor join.
	Key []byte
	// Accept are more keys whose messages are read too (a renewal of the
	// key under way, see SetKeys); Key is the one messages are sent with.
	Accept [][]byte
	Meta   Meta
	Timing GossipTiming
	Log    hclog.Logger
}

// Gossip is one memberlist member. Its delegates never block: memberlist
// calls them with its member table locked, so they only flag that
// something changed; Gossip's own goroutine then reads the table and
// records every member's state with the time it changed.
type Gossip struct {
	ml    *memberlist.Memberlist
	keys  *memberlist.Keyring
	table *memberTable
	log   hclog.Logger
	addr  string
	tm    GossipTiming

	meta    atomic.Pointer[[]byte]
	kick    chan struct{} // delegates → run: memberlist saw an event
	metaCh  chan struct{} // SetMeta → run: broadcast the new meta
	changed chan struct{} // run → consumers: a member's state changed
	events  atomic.Uint64 // events memberlist reported
	stop    chan struct{}
	done    chan struct{}
	started time.Time

	rmu     sync.Mutex // serialises refresh
	mu      sync.Mutex
	members map[string]*record
	seq     uint64 // refresh round, to find members memberlist forgot
	closed  bool
}

// NewGossip starts a member. It is alone until Join.
func NewGossip(cfg GossipConfig) (*Gossip, error) {
	ip := net.ParseIP(cfg.BindIP)
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("gossip: bind address %q is not a specific IP", cfg.BindIP)
	}
	keys, err := memberlist.NewKeyring(nil, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("gossip: the key must be 16, 24 or 32 bytes, got %d", len(cfg.Key))
	}
	for _, k := range cfg.Accept {
		if err := keys.AddKey(k); err != nil {
			return nil, fmt.Errorf("gossip: a key to accept must be 16, 24 or 32 bytes, got %d", len(k))
		}
	}
	if cfg.Name == "" {
		return nil, errors.New("gossip: a member needs a name")
	}
	meta, err := cfg.Meta.encode()
	if err != nil {
		return nil, err
	}
	lg := cfg.Log
	if lg == nil {
		lg = hclog.NewNullLogger()
	}
	std := lg.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	nt, err := newBoundTransport(ip, cfg.Port, std)
	if err != nil {
		return nil, err
	}
	g := &Gossip{
		log: lg, tm: cfg.Timing,
		kick: make(chan struct{}, 1), metaCh: make(chan struct{}, 1), changed: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), members: map[string]*record{},
	}
	g.meta.Store(&meta)
	port := nt.GetAutoBindPort()
	g.addr = net.JoinHostPort(ip.String(), strconv.Itoa(port))

	t := cfg.Timing
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Transport = nt
	mc.BindAddr, mc.BindPort = ip.String(), port
	mc.AdvertiseAddr, mc.AdvertisePort = ip.String(), port
	mc.Keyring = keys
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxMult
	mc.GossipInterval, mc.GossipNodes, mc.RetransmitMult = t.GossipInterval, t.GossipNodes, t.RetransmitMult
	mc.PushPullInterval, mc.TCPTimeout = t.PushPull, t.TCPTimeout
	mc.DisableTcpPings = !t.TCPPings
	mc.GossipToTheDeadTime, mc.DeadNodeReclaimTime = t.GossipToTheDead, t.ReclaimDead
	// Gossip packets are small and a LAN is fast: compressing each one
	// (LZW, a fresh table per packet) was the largest single cost in a
	// profile of 100 members in one process (make bench).
	mc.EnableCompression = false
	mc.Delegate = (*gossipDelegate)(g)
	mc.Events = (*gossipEvents)(g)
	mc.Conflict = (*gossipConflicts)(g)
	mc.Logger = std
	ml, err := memberlist.Create(mc)
	if err != nil {
		nt.Shutdown()
		return nil, fmt.Errorf("gossip: %w", err)
	}
	table, err := newMemberTable(ml)
	if err != nil {
		ml.Shutdown()
		return nil, err
	}
	g.ml, g.keys, g.table, g.started = ml, keys, table, time.Now()
	g.refresh()
	go g.run()
	return g, nil
}

// SetKeys changes the member's keys while it runs (a renewal of the
// cluster key): messages go out encrypted with primary from now on, and
// messages encrypted with primary or any of accept are read; every other
// key is forgotten. Members that share one of the keys keep talking.
func (g *Gossip) SetKeys(primary []byte, accept ...[]byte) error {
	all := append([][]byte{primary}, accept...)
	for _, k := range all {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("gossip: a key must be 16, 24 or 32 bytes, got %d", n)
		}
	}
	for _, k := range all {
		if err := g.keys.AddKey(k); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
	}
	if err := g.keys.UseKey(primary); err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	keep := map[string]bool{string(primary): true}
	for _, k := range accept {
		keep[string(k)] = true
	}
	for _, k := range g.keys.GetKeys() {
		if !keep[string(k)] {
			if err := g.keys.RemoveKey(k); err != nil {
				return fmt.Errorf("gossip: %w", err)
			}
		}
	}
	return nil
}

// Keys returns the member's keys, the one it sends with first.
func (g *Gossip) Keys() [][]byte { return g.keys.GetKeys() }

// Addr is the member's gossip address (host:port).
func (g *Gossip) Addr() string { return g.addr }

// Started is when the member started.
func (g *Gossip) Started() time.Time { return g.started }

// Timing returns the member's failure-detector settings.
func (g *Gossip) Timing() GossipTiming { return g.tm }

// Events is the number of member events memberlist reported so far.
func (g *Gossip) Events() uint64 { return g.events.Load() }

// Join contacts the given gossip addresses (host:port) and merges their
// view of the cluster; it returns how many answered. It blocks up to
// TCPTimeout per unreachable address.
func (g *Gossip) Join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	n, err := g.ml.Join(addrs)
	g.poke()
	return n, err
}

// Members returns every member this member knows of, itself included,
// ordered by name. Members that died or left stay listed as such after
// memberlist itself forgets them.
func (g *Gossip) Members() []Member {
	g.refresh()
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Member, 0, len(g.members))
	for _, r := range g.members {
		out = append(out, r.Member)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Changed returns a channel that receives (coalesced) when some member's
// state, address or meta changed.
func (g *Gossip) Changed() <-chan struct{} { return g.changed }

// SetMeta changes what this member advertises; the change is gossiped in
// the background.
func (g *Gossip) SetMeta(m Meta) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	if old := g.meta.Load(); old != nil && string(*old) == string(b) {
		return nil
	}
	g.meta.Store(&b)
	select {
	case g.metaCh <- struct{}{}:
	default:
	}
	return nil
}

// Leave tells the others this member is going (they record it as left at
// once instead of suspecting it), then stops it. It waits up to timeout
// for the goodbye to go out.
func (g *Gossip) Leave(timeout time.Duration) error {
	if !g.markClosed() {
		return nil
	}
	err := g.ml.Leave(timeout)
	g.shutdown()
	return err
}

// Shutdown stops the member without a goodbye, as a crash would: the
// others find out through their failure detector.
func (g *Gossip) Shutdown() {
	if g.markClosed() {
		g.shutdown()
	}
}

func (g *Gossip) markClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	return true
}

func (g *Gossip) shutdown() {
	close(g.stop)
	<-g.done
	g.ml.Shutdown()
}

// run is Gossip's one goroutine: it reads the member table when memberlist
// reported an event and every Poll interval (a member becoming suspect or
// alive again is no event), and sends meta updates. Leave and Shutdown stop
// it.
func (g *Gossip) run() {
	defer close(g.done)
	poll := g.tm.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-g.stop:
			return
		case <-g.kick:
			// Events come in bursts (a cluster starting, a partition
			// healing): read the table at once, but at most every
			// minRefresh.
			if wait := minRefresh - time.Since(last); wait > 0 {
				select {
				case <-g.stop:
					return
				case <-time.After(wait):
				}
			}
		case <-tick.C:
		case <-g.metaCh:
			// UpdateNode waits for the broadcast to go out; bounded, so
			// that Leave and Shutdown are not held up long.
			if err := g.ml.UpdateNode(2 * time.Second); err != nil {
				g.log.Debug("gossip meta update", "error", err)
			}
		}
		g.refresh()
		last = time.Now()
	}
}

// minRefresh bounds how often events make run read the member table.
const minRefresh = 100 * time.Millisecond

// tombstoneTTL is how long a dead or left member stays listed after
// memberlist forgot it.
const tombstoneTTL = 24 * time.Hour

// record is a member as recorded, with the raw fields it was built from.
type record struct {
	Member
	ip   net.IP
	port uint16
	meta []byte
	seen uint64 // last refresh that found it in memberlist's table
}

// refresh reads memberlist's table and records what changed. It copies
// only members that changed, so reading the table often stays cheap.
func (g *Gossip) refresh() {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	now := time.Now()
	g.mu.Lock()
	g.seq++
	seq, changed := g.seq, false
	g.table.visit(func(n *memberlist.Node, st memberlist.NodeStateType, change time.Time) {
		r := g.members[n.Name]
		state := stateOf(st)
		if r == nil {
			r = &record{Member: Member{Name: n.Name}}
			g.members[n.Name] = r
		} else if r.State == state && r.port == n.Port && r.ip.Equal(n.Addr) && bytes.Equal(r.meta, n.Meta) {
			r.seen = seq
			return
		}
		changed = true
		r.seen = seq
		if r.State != state || r.Since.IsZero() {
			r.State, r.Since = state, change
			if change.IsZero() {
				r.Since = now
			}
		}
		r.ip, r.port = append(net.IP(nil), n.Addr...), n.Port
		r.Addr = net.JoinHostPort(r.ip.String(), strconv.Itoa(int(r.port)))
		if !bytes.Equal(r.meta, n.Meta) {
			r.meta = append([]byte(nil), n.Meta...)
			r.Meta, r.BadMeta = Meta{}, false
			if len(r.meta) > 0 && json.Unmarshal(r.meta, &r.Meta) != nil {
				r.BadMeta = true
			}
		}
	})
	for name, r := range g.members {
		if r.seen == seq {
			continue
		}
		switch {
		case r.State == StateAlive || r.State == StateSuspect:
			// Forgotten without being seen dead (it died and was reaped
			// between two reads): it is dead.
			r.State, r.Since = StateDead, now
			changed = true
		case now.Sub(r.Since) > tombstoneTTL:
			delete(g.members, name)
		}
	}
	g.mu.Unlock()
	if changed {
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
}

// poke asks run to read the table now.
func (g *Gossip) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// gossipDelegate answers memberlist's Delegate: the node meta, and no
// user messages or state of our own.
type gossipDelegate Gossip

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	if b := d.meta.Load(); b != nil && len(*b) <= limit {
		return *b
	}
	return nil
}
func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// gossipEvents answers memberlist's EventDelegate. memberlist calls it
// with its table locked: it only counts and flags.
type gossipEvents Gossip

func (e *gossipEvents) NotifyJoin(*memberlist.Node)   { (*Gossip)(e).event() }
func (e *gossipEvents) NotifyLeave(*memberlist.Node)  { (*Gossip)(e).event() }
func (e *gossipEvents) NotifyUpdate(*memberlist.Node) { (*Gossip)(e).event() }

func (g *Gossip) event() {
	g.events.Add(1)
	g.poke()
}

// gossipConflicts logs two members claiming one name from different
// addresses (memberlist keeps the first).
type gossipConflicts Gossip

func (c *gossipConflicts) NotifyConflict(existing, other *memberlist.Node) {
	c.log.Warn("gossip: two members claim one name; keeping the first", "name", existing.Name,
		"kept", existing.Address(), "refused", other.Address())
}

// boundTransport is memberlist's NetTransport with TCP dials leaving from
// the member's own IP (NetTransport dials unbound, so on a loopback
// cluster every stream would come from 127.0.0.1). UDP already leaves from
// the bound socket.
type boundTransport struct {
	*memberlist.NetTransport
	local *net.TCPAddr
}

func newBoundTransport(ip net.IP, port int, std *log.Logger) (*boundTransport, error) {
	var (
		nt  *memberlist.NetTransport
		err error
	)
	// With port 0 the TCP listener picks the port and the UDP one may find
	// it taken: try a few times.
	for try := 0; try < 10; try++ {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{ip.String()}, BindPort: port, Logger: std})
		if err == nil || port != 0 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	return &boundTransport{NetTransport: nt, local: &net.TCPAddr{IP: ip}}, nil
}

// DialTimeout implements memberlist.Transport.
func (t *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, LocalAddr: t.local}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}
