package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/gnt-cluster/gnt/integration"
	"github.com/gnt-cluster/gnt/server"
)

// Network faults cut, or lose part of, the Raft traffic between members
// (not the API, nor confd), or, for the gossip-only cut, memberlist's UDP
// traffic (1818/udp; its TCP, which push/pull and the fallback probes use,
// is left alone). Two ways exist:
//
//   - in process: each gntd's Raft transport goes through a fault wrapper
//     driven by POST /debug/faults. It needs neither root nor iptables. A
//     cut connection fails at once, and loss breaks the connection.
//   - iptables: DROP rules in a network namespace of the test's own, where
//     the whole run lives (so the host's rules are never touched). Packets
//     vanish as on a real network: a cut dial hangs until its timeout, an
//     open connection stalls, and loss makes TCP retransmit.
//
// Latency exists only in process (this kernel has no netem); the
// gossip-only cut only with iptables (the fault wrapper is the Raft
// transport's, and gossip has none).

// Network names.
const (
	InProcess = "in-process"
	IPTables  = "iptables"
)

type network interface {
	// block cuts Raft traffic between m and each peer, both ways.
	block(m *integration.Member, peers []*integration.Member)
	// cutTo loses what m sends to each peer over Raft; what they send
	// still arrives.
	cutTo(m *integration.Member, peers []*integration.Member)
	// loss drops Raft traffic of the members at random with probability p.
	loss(ms []*integration.Member, p float64)
	// gossipCut drops the gossip UDP packets between each member of a and
	// each of b, both ways.
	gossipCut(a, b []*integration.Member)
	// heal removes every fault this network set.
	heal(ms []*integration.Member)
}

// inProcess drives the members' fault wrappers.
type inProcess struct{ n *nemesis }

func (p inProcess) block(m *integration.Member, peers []*integration.Member) {
	p.n.request(m, server.FaultRequest{Block: raftAddrs(peers)})
}

func (p inProcess) cutTo(m *integration.Member, peers []*integration.Member) {
	p.n.request(m, server.FaultRequest{CutTo: raftAddrs(peers)})
}

func (p inProcess) loss(ms []*integration.Member, rate float64) {
	for _, m := range ms {
		p.n.request(m, server.FaultRequest{DropRate: &rate})
	}
}

func (p inProcess) gossipCut(a, b []*integration.Member) {
	// FaultKinds leaves the kind out of in-process runs.
	p.n.t.Errorf("gossip-cut needs iptables: gossip has no in-process fault wrapper")
}

func (p inProcess) heal([]*integration.Member) {} // healAll heals every wrapper

// ipTables adds DROP rules to the INPUT chain of the network namespace
// the run lives in. A rule for the ordered pair (from, to) drops Raft
// packets from from to to, both those to to's Raft port (requests on
// connections from dialed) and those from from's Raft port (answers on
// connections to dialed).
type ipTables struct {
	n  *nemesis
	mu sync.Mutex
}

func (p *ipTables) drop(from, to *integration.Member) {
	for _, port := range []string{"--dport", "--sport"} {
		p.iptables("-A", "INPUT", "-s", from.IP, "-d", to.IP, "-p", "tcp", port, raftPort, "-j", "DROP")
	}
}

func (p *ipTables) block(m *integration.Member, peers []*integration.Member) {
	for _, o := range peers {
		p.drop(m, o)
		p.drop(o, m)
	}
}

func (p *ipTables) cutTo(m *integration.Member, peers []*integration.Member) {
	for _, o := range peers {
		p.drop(m, o)
	}
}

func (p *ipTables) loss(ms []*integration.Member, rate float64) {
	for _, m := range ms {
		for _, port := range []string{"--dport", "--sport"} {
			p.iptables("-A", "INPUT", "-d", m.IP, "-p", "tcp", port, raftPort,
				"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(rate, 'f', 3, 64), "-j", "DROP")
		}
	}
}

// gossipCut drops UDP to the gossip port between the two sides: every
// gossip packet (probe, ack, broadcast) goes from a member's gossip port
// to another's.
func (p *ipTables) gossipCut(a, b []*integration.Member) {
	for _, x := range a {
		for _, y := range b {
			p.iptables("-A", "INPUT", "-s", x.IP, "-d", y.IP, "-p", "udp", "--dport", gossipPort, "-j", "DROP")
			p.iptables("-A", "INPUT", "-s", y.IP, "-d", x.IP, "-p", "udp", "--dport", gossipPort, "-j", "DROP")
		}
	}
}

// dropped sums the packets the DROP rules of the INPUT chain for proto
// (tcp, udp) have dropped since they were added.
func (p *ipTables) dropped(proto string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !inNetns() {
		return 0
	}
	out, err := exec.Command("iptables", "-w", "-L", "INPUT", "-n", "-v", "-x").CombinedOutput()
	if err != nil {
		p.n.logf("iptables -L INPUT: %v: %s", err, out)
		return 0
	}
	return droppedPackets(string(out), proto)
}

// droppedPackets sums the packet counts of the DROP rules for proto in the
// output of iptables -L -n -v -x.
func droppedPackets(out, proto string) int64 {
	var total int64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// pkts bytes target prot opt in out source destination ...;
		// iptables-nft shows the protocol's number.
		if len(f) >= 4 && f[2] == "DROP" && (f[3] == proto || f[3] == map[string]string{"tcp": "6", "udp": "17"}[proto]) {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				total += n
			}
		}
	}
	return total
}

func (p *ipTables) heal([]*integration.Member) { p.iptables("-F", "INPUT") }

func (p *ipTables) iptables(args ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !inNetns() {
		// Never touch the rules of a namespace this test did not make.
		p.n.t.Errorf("iptables %v outside the test's network namespace", args)
		return
	}
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		p.n.t.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

const (
	raftPort   = "1817"
	gossipPort = "1818"
)

// netnsEnv marks a test process that runs in a network namespace of its
// own (see inNetns).
const netnsEnv = "GNT_CHAOS_NETNS"

func inNetns() bool { return os.Getenv(netnsEnv) == "1" }

// iptablesUsable says whether runs can use iptables: as root, with
// iptables and unshare installed, and allowed to make a network namespace.
// When not, it says why.
func iptablesUsable() (bool, string) {
	if inNetns() {
		return true, ""
	}
	if os.Geteuid() != 0 {
		return false, "not root"
	}
	for _, tool := range []string{"iptables", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false, tool + " is not installed"
		}
	}
	if out, err := exec.Command("unshare", "--net", "--", "iptables", "-w", "-S", "INPUT").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("cannot use iptables in a new network namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return true, ""
}

// enterNetns prepares the namespace this process was started in: its
// loopback is down at first.
func enterNetns() error {
	if !inNetns() {
		return errors.New("not in a network namespace of the test's own")
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return nil
}
