package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gnt-cluster/gnt/server"
)

// Fault injection on a member's Raft traffic, through POST /debug/faults
// (the member must run with --debug; see server/faults.go). Blocking a
// peer on a member cuts Raft traffic between the two both ways; to split a
// cluster, block each side on the other side's members too.

// RaftAddr is the member's Raft address.
func (m *Member) RaftAddr() string { return m.IP + ":1817" }

// Faults sends one fault request to the member.
func (m *Member) Faults(req server.FaultRequest) error {
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.c.URL(m, "/debug/faults"), bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	resp, err := m.c.HTTP().Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: /debug/faults: %s: %s (is it running with --debug?)", m.Name, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Block cuts the member's Raft traffic with the given addresses (Raft
// addresses or bare IPs).
func (m *Member) Block(addrs ...string) error { return m.Faults(server.FaultRequest{Block: addrs}) }

// Partition cuts Raft traffic between the member and each peer, on both
// sides.
func (m *Member) Partition(peers ...*Member) error {
	var addrs []string
	for _, p := range peers {
		addrs = append(addrs, p.RaftAddr())
		if err := p.Block(m.RaftAddr()); err != nil {
			return err
		}
	}
	return m.Block(addrs...)
}

// Isolate cuts all of the member's Raft traffic.
func (m *Member) Isolate() error { return m.Faults(server.FaultRequest{BlockAll: true}) }

// Heal removes every fault the member applies.
func (m *Member) Heal() error { return m.Faults(server.FaultRequest{Heal: true}) }

// CutTo makes one-way cuts: what the member sends to each peer over Raft
// is lost, what they send it still arrives (see transport.Faults.CutTo).
func (m *Member) CutTo(peers ...*Member) error {
	var addrs []string
	for _, p := range peers {
		addrs = append(addrs, p.RaftAddr())
	}
	return m.Faults(server.FaultRequest{CutTo: addrs})
}
