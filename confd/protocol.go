package confd

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Transport and protocol constants, with Ganeti's names and values
// (src/Ganeti/Constants.hs, lib/confd/client.py).
const (
	// DefaultPort is confd's UDP port (defaultConfdPort).
	DefaultPort = 1814
	// Magic starts every packet: "plain json 0" (confdMagicFourcc).
	Magic = "plj0"
	// ProtocolVersion is the only inner protocol version (confdProtocolVersion).
	ProtocolVersion = 1
	// MaxClockSkew bounds |request timestamp - server clock|
	// (confdMaxClockSkew = 2 * nodeMaxClockSkew).
	MaxClockSkew = 300 * time.Second
	// MaxPacket is the largest datagram either side sends or accepts
	// (maxUdpDataSize). A request or reply that would be larger is not sent.
	MaxPacket = 61440
	// DefaultCoverage is how many candidates a client asks by default, at
	// most (CONFD_DEFAULT_REQ_COVERAGE).
	DefaultCoverage = 6
	// ExpireTimeout is how long a client waits for replies by default
	// (CONFD_CLIENT_EXPIRE_TIMEOUT).
	ExpireTimeout = 10 * time.Second
)

// RequestType is a request's "type" (CONFD_REQ_*).
type RequestType int

// Request types, numbered as Ganeti numbers them (Confd/Types.hs).
const (
	ReqPing                RequestType = 0
	ReqNodeRoleByName      RequestType = 1
	ReqNodePipByInstanceIP RequestType = 2
	ReqClusterMaster       RequestType = 3
	ReqNodePipList         RequestType = 4
	ReqMcPipList           RequestType = 5
	ReqInstancesIPsList    RequestType = 6
	ReqNodeDrbd            RequestType = 7
	ReqNodeInstances       RequestType = 8
	ReqInstanceDisks       RequestType = 9
	ReqConfigQuery         RequestType = 10
	ReqDataCollectors      RequestType = 11
)

var reqNames = [...]string{
	"PING", "NODE_ROLE_BYNAME", "NODE_PIP_BY_INSTANCE_IP", "CLUSTER_MASTER",
	"NODE_PIP_LIST", "MC_PIP_LIST", "INSTANCES_IPS_LIST", "NODE_DRBD",
	"NODE_INSTANCES", "INSTANCE_DISKS", "CONFIG_QUERY", "DATA_COLLECTORS",
}

// Known reports whether t is one of Ganeti's request types.
func (t RequestType) Known() bool { return t >= 0 && int(t) < len(reqNames) }

// String is Ganeti's name without the CONFD_REQ_ prefix.
func (t RequestType) String() string {
	if t.Known() {
		return reqNames[t]
	}
	return "UNKNOWN_" + strconv.Itoa(int(t))
}

// RequestTypes lists every request type in numeric order.
func RequestTypes() []RequestType {
	out := make([]RequestType, len(reqNames))
	for i := range out {
		out[i] = RequestType(i)
	}
	return out
}

// ParseRequestType reads a request type as Ganeti names it
// (NODE_ROLE_BYNAME, with or without CONFD_REQ_), in the CLI's spelling
// (node-role-byname), or as its number.
func ParseRequestType(s string) (RequestType, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if t := RequestType(n); t.Known() {
			return t, nil
		}
		return 0, fmt.Errorf("unknown confd request type %d (known: 0..%d)", n, len(reqNames)-1)
	}
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "confd_req_"), "-", "_"))
	for i, n := range reqNames {
		if n == name {
			return RequestType(i), nil
		}
	}
	return 0, fmt.Errorf("unknown confd request type %q", s)
}

// Reply statuses (CONFD_REPL_STATUS_*).
const (
	StatusOK             = 0
	StatusError          = 1
	StatusNotImplemented = 2
)

// Node roles, the answer of NODE_ROLE_BYNAME (CONFD_NODE_ROLE_*).
const (
	RoleMaster    = 0
	RoleCandidate = 1
	RoleOffline   = 2
	RoleDrained   = 3
	RoleRegular   = 4
)

// RoleName names a node role code.
func RoleName(r int) string {
	switch r {
	case RoleMaster:
		return "master"
	case RoleCandidate:
		return "master-candidate"
	case RoleOffline:
		return "offline"
	case RoleDrained:
		return "drained"
	case RoleRegular:
		return "regular"
	}
	return "unknown"
}

// Error codes, the answer of a reply with StatusError (CONFD_ERROR_*).
const (
	ErrorUnknownEntry = 0
	ErrorInternal     = 1
	ErrorArgument     = 2
)

// ErrorName names an error code.
func ErrorName(e int) string {
	switch e {
	case ErrorUnknownEntry:
		return "unknown entry"
	case ErrorInternal:
		return "internal error"
	case ErrorArgument:
		return "argument error"
	}
	return "unknown error " + strconv.Itoa(e)
}

// Keys of a dict query (CONFD_REQQ_*). They are strings because they are
// JSON object keys.
const (
	QueryLink   = "0"
	QueryIP     = "1"
	QueryIPList = "2"
	QueryFields = "3"
)

// Fields of a CLUSTER_MASTER dict query (CONFD_REQFIELD_*).
const (
	FieldName     = 0 // master node name
	FieldIP       = 1 // cluster master IP
	FieldMNodePip = 2 // master node primary IP
)
