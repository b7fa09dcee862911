package rpc

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
)

// NodeAgent is what the node RPC server calls: the node's hypervisor
// driver, adapted by the daemon (package server). Call runs one checked
// request; an error it returns should be a *NodeError (anything else is
// answered as failed).
type NodeAgent interface {
	Call(ctx context.Context, req NodeRequest) (NodeResult, error)
}

// Defaults of NodeServerOptions.
const (
	DefaultNodeMaxBody   = 1 << 20
	DefaultNodeMaxOpTime = 30 * time.Minute
	DefaultReplayEntries = 1 << 16
)

// NodeServerOptions configures a NodeServer.
type NodeServerOptions struct {
	// Node is this node's name: requests for another node are refused.
	Node string
	// Key returns the node RPC key (DeriveKey(clusterKey, NodeKeyLabel)),
	// nil while this gntd has no cluster key (every request is then
	// refused with no_key).
	Key func() []byte
	// Accept, when set, returns more node RPC keys requests are accepted
	// with (the other key while the cluster key is renewed).
	Accept func() [][]byte
	Agent  NodeAgent
	// Debug accepts debug-fault requests.
	Debug  bool
	Logger hclog.Logger
	// Now is the clock timestamps are checked against; default time.Now.
	Now func() time.Time
	// MaxOpTime bounds one operation. An operation does not end when its
	// caller hangs up: it runs to its end (or this bound), still holding
	// the instance, so that a retry finds it done rather than half done.
	MaxOpTime time.Duration
	// MaxBody and ReplayEntries default to DefaultNodeMaxBody and
	// DefaultReplayEntries.
	MaxBody       int64
	ReplayEntries int
}

// NodeServer serves the node RPC of one gntd.
type NodeServer struct {
	o      NodeServerOptions
	replay *replayCache
}

// NewNodeServer returns the node RPC server.
func NewNodeServer(o NodeServerOptions) *NodeServer {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxOpTime <= 0 {
		o.MaxOpTime = DefaultNodeMaxOpTime
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultNodeMaxBody
	}
	if o.ReplayEntries <= 0 {
		o.ReplayEntries = DefaultReplayEntries
	}
	return &NodeServer{o: o, replay: newReplayCache(o.ReplayEntries)}
}

// Handler is the HTTP handler of the node RPC.
func (s *NodeServer) Handler() http.Handler { return http.HandlerFunc(s.serve) }

func writeNodeError(w http.ResponseWriter, e *NodeError) {
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	body, _ := json.Marshal(e)
	writeRaw(w, e.Status, body)
}

func (s *NodeServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != NodePath {
		writeNodeError(w, &NodeError{Status: http.StatusNotFound, ErrorCode: CodeNotFound, Message: "the node RPC answers POST " + NodePath + " only"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeNodeError(w, &NodeError{Status: http.StatusMethodNotAllowed, ErrorCode: CodeMethod, Message: "POST a signed node request"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.o.MaxBody+1))
	if err != nil {
		writeNodeError(w, NewNodeError(NodeCodeBadRequest, "reading the request body: %v", err))
		return
	}
	if int64(len(body)) > s.o.MaxBody {
		writeNodeError(w, NewNodeError(NodeCodeTooLarge, "request body is larger than %d bytes", s.o.MaxBody))
		return
	}
	key := s.o.Key()
	if len(key) == 0 {
		writeNodeError(w, NewNodeError(NodeCodeNoKey, "this gntd has no cluster key yet"))
		return
	}
	now := s.o.Now()
	tsHeader, sig := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature)
	keys := [][]byte{key}
	if s.o.Accept != nil {
		keys = append(keys, s.o.Accept()...)
	}
	if err := VerifyAny(keys, tsHeader, sig, body, now); err != nil {
		writeNodeError(w, NewNodeError(NodeCodeUnauthorized, "%v", err))
		return
	}
	var mac [32]byte
	raw, _ := hex.DecodeString(sig) // Verify checked it is 32 bytes of hex
	copy(mac[:], raw)
	ts, _ := strconv.ParseInt(tsHeader, 10, 64)
	if !s.replay.admit(mac, ts, now.Unix()) {
		writeNodeError(w, NewNodeError(NodeCodeReplayed, "this request was seen before (or is older than what this node can still tell apart); sign a new one"))
		return
	}
	req, err := DecodeNodeRequest(body)
	if err != nil {
		writeNodeError(w, err.(*NodeError))
		return
	}
	if req.Node != s.o.Node {
		writeNodeError(w, NewNodeError(NodeCodeWrongNode, "this request is for node %s; this is %s", req.Node, s.o.Node))
		return
	}
	if req.Op == NodeOpDebugFault && !s.o.Debug {
		writeNodeError(w, NewNodeError(NodeCodeNotAllowed, "debug-fault needs gntd --debug"))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.o.MaxOpTime)
	defer cancel()
	start := time.Now()
	res, err := s.o.Agent.Call(ctx, req)
	uuid := ""
	if req.Instance != nil {
		uuid = req.Instance.UUID
	}
	if err != nil {
		var ne *NodeError
		if !errors.As(err, &ne) {
			ne = NewNodeError(NodeCodeFailed, "%v", err)
		}
		s.o.Logger.Info("node rpc", "op", req.Op, "instance", uuid, "error", ne.Message, "code", ne.ErrorCode, "took", time.Since(start))
		writeNodeError(w, ne)
		return
	}
	if req.Op != NodeOpStatus && req.Op != NodeOpList && req.Op != NodeOpDiagnose && req.Op != NodeOpOSList {
		s.o.Logger.Info("node rpc", "op", req.Op, "instance", uuid, "changed", res.Changed, "took", time.Since(start))
	}
	body, err = json.Marshal(res)
	if err != nil {
		writeNodeError(w, NewNodeError(NodeCodeFailed, "encoding the answer: %v", err))
		return
	}
	writeRaw(w, http.StatusOK, body)
}
