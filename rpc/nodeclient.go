package rpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Default bounds of a NodeClient call. An operation may run two scripts
// of the exec driver (status, then the operation) of up to 5 minutes
// each; a query runs one.
const (
	DefaultNodeOpTimeout    = 11 * time.Minute
	DefaultNodeQueryTimeout = 6 * time.Minute
)

// NodeClient calls one node's agent. Every method bounds its call with
// a timeout (OpTimeout, or QueryTimeout for status and list; a shorter
// deadline of ctx wins) and returns one of:
//
//   - nil: done, or already so (NodeResult.Changed says which);
//   - a *NodeError: the node answered no. errors.Is tells
//     ErrNodeNotSupported, ErrNodeNotFound, ErrNodeState (nothing was
//     changed), ErrNodeFailed (attempted and failed: Output has what it
//     printed), ErrNodeBadRequest, ErrNodeUnauthorized;
//   - a *NodeTransportError (errors.Is ErrNodeTransport): no answer. The
//     operation may or may not have happened; every operation but
//     repair-command is idempotent, so the caller asks again (or asks
//     for the status).
type NodeClient struct {
	Node string // the node's name, which requests are bound to
	Addr string // its agent's address, host:port
	key  []byte

	HTTP *http.Client
	// Scheme is "https" (the node RPC of every gntd, with NewNodeClientTLS)
	// or "http" (test servers).
	Scheme       string
	OpTimeout    time.Duration
	QueryTimeout time.Duration
	Now          func() time.Time
}

// NewNodeClient returns a client of the agent of node at addr, signing
// with key: DeriveKey(clusterKey, NodeKeyLabel), see NodeKey.
func NewNodeClient(node, addr string, key []byte) *NodeClient {
	return &NodeClient{
		Node: node, Addr: addr, key: key,
		HTTP: &http.Client{Transport: nodeTransport}, Scheme: "http",
		OpTimeout: DefaultNodeOpTimeout, QueryTimeout: DefaultNodeQueryTimeout, Now: time.Now,
	}
}

// NewNodeTransport is an HTTP transport for node RPC over mutual TLS with
// cfg (the calling gntd's node certificate); share one among the clients
// of NewNodeClientTLS.
func NewNodeTransport(cfg *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 5 * time.Second,
	}
}

// NewNodeClientTLS is NewNodeClient over HTTPS through tr (NewNodeTransport).
func NewNodeClientTLS(node, addr string, key []byte, tr *http.Transport) *NodeClient {
	c := NewNodeClient(node, addr, key)
	c.HTTP, c.Scheme = &http.Client{Transport: tr}, "https"
	return c
}

// NodeKey derives the node RPC key from the cluster key (the contents of
// cluster.key).
func NodeKey(clusterKey []byte) []byte { return DeriveKey(clusterKey, NodeKeyLabel) }

var nodeTransport = &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 4,
	IdleConnTimeout:     90 * time.Second,
}

// SignNodeRequest encodes req and signs it as sent at ts; it returns the
// body and the headers to send with it. NodeClient uses it; tests use it
// to forge requests.
func SignNodeRequest(key []byte, req NodeRequest, ts time.Time) ([]byte, http.Header, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(key, ts.Unix(), body))
	return body, h, nil
}

// NewNonce returns a random request nonce.
func NewNonce() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Do sends one request (Node and Nonce filled in) and returns the answer.
func (c *NodeClient) Do(ctx context.Context, req NodeRequest) (NodeResult, error) {
	req.Node, req.Nonce = c.Node, NewNonce()
	timeout := c.OpTimeout
	switch req.Op {
	case NodeOpStatus, NodeOpList, NodeOpDebugFault, NodeOpDiagnose, NodeOpOSList, NodeOpStorageList:
		timeout = c.QueryTimeout
	case NodeOpStop:
		timeout += time.Duration(req.Timeout * float64(time.Second))
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	body, h, err := SignNodeRequest(c.key, req, c.Now())
	if err != nil {
		return NodeResult{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Scheme+"://"+c.Addr+NodePath, bytes.NewReader(body))
	if err != nil {
		return NodeResult{}, err
	}
	hreq.Header = h
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		return NodeResult{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: req.Op, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return NodeResult{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: req.Op, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		ne := &NodeError{}
		if json.Unmarshal(data, ne) != nil || ne.ErrorCode == "" {
			ne = NewNodeError(NodeCodeFailed, "HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
		}
		ne.Status, ne.Node, ne.Op = resp.StatusCode, c.Node, req.Op
		return NodeResult{}, ne
	}
	var res NodeResult
	if err := json.Unmarshal(data, &res); err != nil {
		return NodeResult{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: req.Op, Err: fmt.Errorf("undecodable answer: %w", err)}
	}
	return res, nil
}

// Status returns the instance's record on the node (ErrNodeNotFound when
// it has none); only inst.UUID is needed.
func (c *NodeClient) Status(ctx context.Context, inst fsm.Instance) (NodeInstanceStatus, error) {
	res, err := c.Do(ctx, NodeRequest{Op: NodeOpStatus, Instance: &inst})
	if err != nil {
		return NodeInstanceStatus{}, err
	}
	if res.Status == nil {
		return NodeInstanceStatus{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: NodeOpStatus, Err: fmt.Errorf("answer without a status")}
	}
	return *res.Status, nil
}

// List returns every instance the node has a record of.
func (c *NodeClient) List(ctx context.Context) ([]NodeInstanceStatus, error) {
	res, err := c.Do(ctx, NodeRequest{Op: NodeOpList})
	if err != nil {
		return nil, err
	}
	if res.Instances == nil {
		res.Instances = []NodeInstanceStatus{}
	}
	return res.Instances, nil
}

// Start makes the instance run on the node.
func (c *NodeClient) Start(ctx context.Context, inst fsm.Instance) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpStart, Instance: &inst})
}

// Stop shuts the instance down on the node: gracefully within timeout
// (0: the driver's default, Ganeti's 120 s), then forcibly; at once with
// force.
func (c *NodeClient) Stop(ctx context.Context, inst fsm.Instance, timeout time.Duration, force bool) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpStop, Instance: &inst, Timeout: timeout.Seconds(), Force: force})
}

// Reboot reboots the instance once per opID (starting it if stopped);
// rebootType is soft, hard or full ("" = hard).
func (c *NodeClient) Reboot(ctx context.Context, inst fsm.Instance, opID, rebootType string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpReboot, Instance: &inst, OpID: opID, RebootType: rebootType})
}

// Remove forgets the stopped instance on the node, with its disks.
func (c *NodeClient) Remove(ctx context.Context, inst fsm.Instance) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpRemove, Instance: &inst})
}

// DiskCreate creates the local storage of a configured disk.
func (c *NodeClient) DiskCreate(ctx context.Context, inst fsm.Instance, disk string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpDiskCreate, Instance: &inst, Disk: disk})
}

// DiskRemove removes a disk's local storage.
func (c *NodeClient) DiskRemove(ctx context.Context, inst fsm.Instance, disk string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpDiskRemove, Instance: &inst, Disk: disk})
}

// DiskAttach connects a present disk to the instance (hot-plug if it
// runs).
func (c *NodeClient) DiskAttach(ctx context.Context, inst fsm.Instance, disk string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpDiskAttach, Instance: &inst, Disk: disk})
}

// DiskDetach disconnects a disk from the instance, keeping its storage.
func (c *NodeClient) DiskDetach(ctx context.Context, inst fsm.Instance, disk string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpDiskDetach, Instance: &inst, Disk: disk})
}

// DiskReplace recreates a disk's storage on the node and resyncs it from
// its peer, once per opID.
func (c *NodeClient) DiskReplace(ctx context.Context, inst fsm.Instance, disk, opID string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpDiskReplace, Instance: &inst, Disk: disk, OpID: opID})
}

// InstallOS installs (or reinstalls) inst.OS on the stopped instance's
// disks, once per opID.
func (c *NodeClient) InstallOS(ctx context.Context, inst fsm.Instance, opID string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpOSInstall, Instance: &inst, OpID: opID})
}

// MigratePrepare readies this client's node, the target, to receive
// migration id of inst from sourceNode.
func (c *NodeClient) MigratePrepare(ctx context.Context, inst fsm.Instance, id, sourceNode string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpMigratePrepare, Instance: &inst, Migration: id, PeerNode: sourceNode})
}

// MigrateSend sends the running instance from this client's node, the
// source, to the prepared target.
func (c *NodeClient) MigrateSend(ctx context.Context, inst fsm.Instance, id, targetNode, targetAddr string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpMigrateSend, Instance: &inst, Migration: id, PeerNode: targetNode, Peer: targetAddr})
}

// MigrateReceive delivers a handoff to this client's node, the target;
// a source's agent calls it.
func (c *NodeClient) MigrateReceive(ctx context.Context, h NodeHandoff) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpMigrateReceive, Handoff: &h})
}

// MigrateFinish resumes the received instance on this client's node, the
// target.
func (c *NodeClient) MigrateFinish(ctx context.Context, inst fsm.Instance, id string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpMigrateFinish, Instance: &inst, Migration: id})
}

// MigrateAbort gives migration id up on this client's node. Abort on the
// source first: it refuses (ErrNodeState) once the instance was sent,
// and then the target must be finished instead.
func (c *NodeClient) MigrateAbort(ctx context.Context, inst fsm.Instance, id string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpMigrateAbort, Instance: &inst, Migration: id})
}

// SetFault arms (or with f.Clear first clears) injected failures of a
// fake driver; the node's gntd must run with --debug. It returns the
// faults armed afterwards.
func (c *NodeClient) SetFault(ctx context.Context, f NodeFault) ([]NodeFault, error) {
	res, err := c.Do(ctx, NodeRequest{Op: NodeOpDebugFault, Fault: &f})
	return res.Faults, err
}

// Diagnose makes the node collect its self-diagnose result with the named
// command ("" for the built-in; the node returns its last result when it
// ran that command within its minimum interval) and returns the signed
// report, unverified: see VerifyDiagnoseReport.
func (c *NodeClient) Diagnose(ctx context.Context, command string) (SignedDiagnoseReport, error) {
	res, err := c.Do(ctx, NodeRequest{Op: NodeOpDiagnose, Command: command})
	if err != nil {
		return SignedDiagnoseReport{}, err
	}
	if res.Report == nil {
		return SignedDiagnoseReport{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: NodeOpDiagnose, Err: fmt.Errorf("answer without a report")}
	}
	return *res.Report, nil
}

// OSList asks the node for the OS definitions in its search path.
func (c *NodeClient) OSList(ctx context.Context) (NodeOSReport, error) {
	res, err := c.Do(ctx, NodeRequest{Op: NodeOpOSList})
	if err != nil {
		return NodeOSReport{}, err
	}
	if res.OS == nil {
		return NodeOSReport{}, &NodeTransportError{Node: c.Node, Addr: c.Addr, Op: NodeOpOSList, Err: fmt.Errorf("answer without an OS report")}
	}
	return *res.OS, nil
}

// RepairCommand runs the whitelisted repair command on the node with
// input on its stdin; Output has what it printed. Unlike every other
// operation it is not idempotent: a transport error leaves unknown
// whether it ran, and the caller must not simply send it again.
func (c *NodeClient) RepairCommand(ctx context.Context, command, input string) (NodeResult, error) {
	return c.Do(ctx, NodeRequest{Op: NodeOpRepairCommand, Command: command, Input: input})
}
