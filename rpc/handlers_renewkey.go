package rpc

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Renewal of cluster.key (gnt cluster renew-crypto --new-cluster-key),
// run on the leader.

// RenewKeyStatus is where a renewal of cluster.key stands, as POST and
// GET /2/gnt/renew-key answer.
type RenewKeyStatus struct {
	// Phase is "" (never renewed), "trust", "use" or "done" (fsm.PKI's
	// KeyPhase).
	Phase string `json:"phase"`
	// Started is true in the answer to the POST that started a renewal.
	Started bool `json:"started"`
	// Serial counts changes of the CA and of the key.
	Serial int64 `json:"serial"`
	// KeyID identifies the newest cluster key (a hash of it, never the
	// key); "" before the first renewal.
	KeyID string `json:"key_id"`
	// Nodes is every node of the configuration with what it last
	// reported to this leader.
	Nodes []RenewKeyNode `json:"nodes"`
}

// RenewKeyNode is one node's progress in a renewal of cluster.key.
type RenewKeyNode struct {
	Name string `json:"name"`
	// Offline nodes are not waited for.
	Offline bool `json:"offline,omitempty"`
	// Reported says whether the node joined this leader since it leads.
	Reported bool `json:"reported"`
	// HoldsNew: the node holds the newest key and accepts it.
	HoldsNew bool `json:"holds_new"`
	// UsesNew: the node signs and encrypts with the newest key.
	UsesNew bool `json:"uses_new"`
	// Age is the seconds since the node's last report.
	Age float64 `json:"age_seconds,omitempty"`
}

// KeyRenewal is what a join answer tells a gntd of a renewal of
// cluster.key: the phase, the new key's ID, and in phases trust and use
// the new key sealed under a key derived from the old one.
type KeyRenewal struct {
	Phase  string `json:"phase"`
	ID     string `json:"id"`
	Sealed string `json:"sealed,omitempty"`
}

// MaxJoinKeyIDs bounds JoinRequest.KeyIDs.
const MaxJoinKeyIDs = 2

// KeyRenewer is what a Backend implements to renew cluster.key; without
// it the routes answer 501.
type KeyRenewer interface {
	// RenewKey starts a renewal of cluster.key (or reports the one under
	// way). Leader only: others return ErrNotLeader.
	RenewKey(ctx context.Context) (RenewKeyStatus, error)
	// RenewKeyStatus reports the renewal. Leader only.
	RenewKeyStatus(ctx context.Context) (RenewKeyStatus, error)
}

// JoinKeyring is what a Backend implements to accept joins signed with
// more than one key (a renewal of cluster.key under way): JoinKeys
// returns every join key it accepts. Without it JoinKey alone is.
type JoinKeyring interface {
	JoinKeys() [][]byte
}

// joinKeys are the keys a signed join is checked against.
func (s *Server) joinKeys() [][]byte {
	if kr, ok := s.b.(JoinKeyring); ok {
		return kr.JoinKeys()
	}
	if k := s.b.JoinKey(); k != nil {
		return [][]byte{k}
	}
	return nil
}

// VerifyAny is Verify with several keys: the request is accepted when it
// is signed with any of them. The error is that of the first key.
func VerifyAny(keys [][]byte, tsHeader, sig string, body []byte, now time.Time) error {
	if len(keys) == 0 {
		return Verify(nil, tsHeader, sig, body, now)
	}
	var first error
	for _, k := range keys {
		err := Verify(k, tsHeader, sig, body, now)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
		if errors.Is(err, ErrBadTimestamp) {
			break // the same for every key
		}
	}
	return first
}

// validateKeyIDs checks the key IDs of a join.
func validateKeyIDs(ids []string) *APIError {
	if len(ids) > MaxJoinKeyIDs {
		return badRequest("key_ids", "a join reports at most %d key IDs, got %d", MaxJoinKeyIDs, len(ids))
	}
	for _, id := range ids {
		if id == "" || len(id) > fsm.MaxKeyIDLen {
			return badRequest("key_ids", "a key ID is 1 to %d hex digits, got %d characters", fsm.MaxKeyIDLen, len(id))
		}
		for i := 0; i < len(id); i++ {
			if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return badRequest("key_ids", "key ID %q: character %d is not a lower-case hex digit", id, i)
			}
		}
	}
	return nil
}

// handleRenewKey is POST /2/gnt/renew-key (start) and GET (report).
func (s *Server) handleRenewKey(start bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		kr, ok := s.b.(KeyRenewer)
		if !ok {
			writeError(w, &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeNotImplemented, Message: "this server cannot renew the cluster key"})
			return
		}
		serveRenewal(s, w, r, start, kr.RenewKey, kr.RenewKeyStatus)
	}
}
