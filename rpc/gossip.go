package rpc

// GossipStatus is a gntd's view of the gossip members, in its status
// (GET /2/gnt/status).
type GossipStatus struct {
	// Addr is this gntd's own gossip address.
	Addr    string         `json:"addr"`
	Members []GossipMember `json:"members"`
	// Unknown names the members (not dead or left) that are not nodes of
	// the configuration as this gntd's state has it; they are reported,
	// never added. Always empty on a gntd that holds no state.
	Unknown []string `json:"unknown"`
}

// GossipMember is one gossip member as a gntd sees it.
type GossipMember struct {
	Name    string  `json:"name"`
	Addr    string  `json:"addr"`
	State   string  `json:"state"` // alive, suspect, dead or left
	Since   float64 `json:"since"` // when the state changed, float seconds
	Role    string  `json:"role,omitempty"`
	API     string  `json:"api,omitempty"`
	Agent   string  `json:"agent,omitempty"`
	Version string  `json:"version,omitempty"`
}

// NodeLivenessUnknown is a node's gnt_liveness before any leader
// recorded one.
const NodeLivenessUnknown = "unknown"
