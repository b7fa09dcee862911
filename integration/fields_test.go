package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// instanceStatus reads an instance's Ganeti status and oper_state
// through one member's API.
func (c *Cluster) instanceStatus(m *Member, name string) (status string, oper string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, err := c.ClientFor(m).Instance(ctx, name)
	if err != nil {
		return "", "", err
	}
	status, oper = "null", "null"
	if in.Status != nil {
		status = *in.Status
	}
	if in.OperState != nil {
		oper = fmt.Sprint(*in.OperState)
	}
	return status, oper, nil
}

// TestInstanceRuntimeFields: an instance's status and oper_state follow
// what its node's agent reports, on the leader and on a follower (which
// polls once it is asked); a shutdown gives
// ADMIN_down; the primary node's gntd killed gives ERROR_nodedown (its
// agent no longer answers), never a guess; /2/info names the agents'
// hypervisor.
func TestInstanceRuntimeFields(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 2, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	n21 := c.Member("node21")
	c.WaitAgent(n21, 30*time.Second)
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	want := func(m *Member, status, oper string) {
		t.Helper()
		c.Eventually(30*time.Second, 200*time.Millisecond, m.Name+" says "+status, func() error {
			s, o, err := c.instanceStatus(m, "web1")
			if err != nil {
				return err
			}
			if s != status || o != oper {
				return fmt.Errorf("status %s oper_state %s", s, o)
			}
			return nil
		})
	}
	want(leader, rpc.InstStatusRunning, "true")
	want(follower, rpc.InstStatusRunning, "true")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	in, err := c.ClientFor(follower).Instance(ctx, "web1")
	cancel()
	if err != nil || in.OperRAM == nil || *in.OperRAM != 256 || in.OperVCPUs == nil || *in.OperVCPUs != in.BEParams.VCPUs {
		t.Errorf("oper_ram %v oper_vcpus %v (beparams %+v): %v", in.OperRAM, in.OperVCPUs, in.BEParams, err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	info, err := c.ClientFor(leader).Info(ctx)
	cancel()
	if err != nil || !slices.Contains(info.EnabledHypervisors, "fake") || info.DefaultHypervisor == nil {
		t.Errorf("info hypervisors %v default %v: %v", info.EnabledHypervisors, info.DefaultHypervisor, err)
	}

	if out, err := c.GNT("instance", "shutdown", "web1"); err != nil {
		t.Fatalf("instance shutdown: %v\n%s", err, out)
	}
	want(leader, rpc.InstStatusAdminDown, "false")

	n21.Kill()
	want(leader, rpc.InstStatusNodeDown, "null")
	want(follower, rpc.InstStatusNodeDown, "null")
}
