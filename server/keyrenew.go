package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// Renewal of cluster.key (gnt cluster renew-crypto --new-cluster-key),
// driven by the leader from what the gntds report in their joins, like
// the renewal of the CA (rotate.go):
//
//   - POST /2/gnt/renew-key makes a new key and applies phase trust: the
//     replicated state holds its ID and the key sealed under a key derived
//     from the old one. Every gntd learns it from its next join answer,
//     writes it to cluster.key.new, and from then on accepts both keys
//     (joins, node RPC, self-diagnose reports, confd, gossip) while it
//     still signs and encrypts with the old one.
//   - Once every node that is not offline reports holding the new key,
//     the leader applies phase use, with the CA key sealed under the new
//     key: each gntd signs and encrypts with the new key from its next
//     join on, and still accepts the old.
//   - Once every such node reports signing with the new key, the leader
//     applies phase done, which drops the sealed key from the state: each
//     gntd writes the new key over cluster.key, removes cluster.key.new,
//     and from then on refuses the old key.
//
// A gntd restarted in the middle finds both files and accepts both keys,
// signing with the old one (which every gntd accepts until phase done)
// until its next join tells it the phase.

// keyNewFile holds the new cluster key during a renewal.
const keyNewFile = "cluster.key.new"

// keySealLabel derives the key the new cluster key is sealed with (in
// the replicated state) from the old one.
const keySealLabel = "gnt cluster key seal v1"

// keyIDLabel derives a cluster key's ID, which names it in the state, in
// joins and in logs without revealing it.
const keyIDLabel = "gnt cluster key id v1"

// keyID is the ID of a cluster key: 16 hex digits of a hash of it.
func keyID(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	return hex.EncodeToString(rpc.DeriveKey(key, keyIDLabel))[:16]
}

// newClusterKey makes a cluster key in Ganeti's format: 40 hex digits
// and a newline.
func newClusterKey() ([]byte, error) {
	buf := make([]byte, 20)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(buf) + "\n"), nil
}

// checkClusterKey checks a key's format as readKey does.
func checkClusterKey(data []byte) error {
	k := strings.TrimSpace(string(data))
	if len(k) < 32 {
		return errors.New("too short to be a cluster key")
	}
	if _, err := hex.DecodeString(k); err != nil {
		return errors.New("not a hex cluster key")
	}
	return nil
}

// readKeyNew loads cluster.key.new, or returns nil when there is none.
func (d dataDir) readKeyNew() ([]byte, error) {
	path := d.file(keyNewFile)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %o; it must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := checkClusterKey(data); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return data, nil
}

// writeKeyFile writes a key file of the data dir atomically (mode 0600,
// fsynced, renamed into place, the directory fsynced).
func (d dataDir) writeKeyFile(name string, key []byte) error {
	if err := writeFileAtomic(d.file(name), key, 0o600); err != nil {
		return err
	}
	return syncDir(filepath.Dir(d.file(name)))
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// loadKeys reads cluster.key and, during a renewal, cluster.key.new: the
// gntd then accepts both and signs with the old one until its next join.
// A new key equal to the old one is what a crash between the two steps of
// phase done leaves; the new file is removed.
func (s *Server) loadKeys() error {
	key, err := s.dir.readKey()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	next, err := s.dir.readKeyNew()
	if err != nil {
		return err
	}
	if next != nil && bytes.Equal(next, key) {
		if err := os.Remove(s.dir.file(keyNewFile)); err != nil {
			return err
		}
		next = nil
	}
	s.setKeys(key, next)
	if next != nil {
		s.log.Info("a renewal of the cluster key was under way: accepting both keys until the next join", "old", keyID(key), "new", keyID(next))
	}
	return nil
}

// setKeys sets the key this gntd signs and encrypts with, and the other
// one it accepts during a renewal (nil otherwise). s.mu must be held, or
// the server not running yet.
func (s *Server) setKeys(primary, other []byte) {
	s.key, s.keyOther = primary, other
	s.joinKey = rpc.DeriveKey(primary, rpc.JoinKeyLabel)
	s.kickGossip() // the gossip keys derive from them
}

// clusterKeys returns the key this gntd signs with and the other one it
// accepts (nil outside a renewal).
func (s *Server) clusterKeys() (primary, other []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key, s.keyOther
}

// acceptedKeys derives, from every cluster key this gntd holds, the key
// of one purpose: the primary's first.
func (s *Server) acceptedKeys(derive func([]byte) []byte) [][]byte {
	p, o := s.clusterKeys()
	var out [][]byte
	for _, k := range [][]byte{p, o} {
		if len(k) > 0 {
			out = append(out, derive(k))
		}
	}
	return out
}

// otherKeys derives the key of one purpose from the other cluster key,
// during a renewal; none otherwise.
func (s *Server) otherKeys(derive func([]byte) []byte) [][]byte {
	if _, o := s.clusterKeys(); len(o) > 0 {
		return [][]byte{derive(o)}
	}
	return nil
}

// JoinKeys implements rpc.JoinKeyring: joins signed with either cluster
// key are accepted during a renewal.
func (s *Server) JoinKeys() [][]byte {
	return s.acceptedKeys(func(k []byte) []byte { return rpc.DeriveKey(k, rpc.JoinKeyLabel) })
}

// keyIDs is what this gntd reports in its joins: the IDs of the keys it
// holds, the one it signs with first.
func (s *Server) keyIDs() []string {
	p, o := s.clusterKeys()
	var ids []string
	for _, k := range [][]byte{p, o} {
		if len(k) > 0 {
			ids = append(ids, keyID(k))
		}
	}
	return ids
}

// keyHeld returns the held cluster key with the ID, or nil.
func (s *Server) keyHeld(id string) []byte {
	p, o := s.clusterKeys()
	for _, k := range [][]byte{p, o} {
		if len(k) > 0 && keyID(k) == id {
			return k
		}
	}
	return nil
}

// unsealWithKeys opens a value sealed under a key derived (with derive)
// from one of the cluster keys this gntd holds.
func (s *Server) unsealWithKeys(derive func([]byte) []byte, sealed string) ([]byte, error) {
	var first error
	for _, k := range s.acceptedKeys(derive) {
		plain, err := pki.Unseal(k, sealed)
		if err == nil {
			return plain, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("this gntd holds no cluster key")
	}
	return nil, first
}

func keySealKey(clusterKey []byte) []byte { return rpc.DeriveKey(clusterKey, keySealLabel) }

// currentKey is the cluster key of the state p: the one with p's key ID
// when this gntd holds it (right after a renewal ends, before this gntd's
// own next join), else the one it signs with.
func (s *Server) currentKey(p *fsm.PKI) []byte {
	if p != nil && p.KeyID != "" {
		if k := s.keyHeld(p.KeyID); k != nil {
			return k
		}
	}
	p0, _ := s.clusterKeys()
	return p0
}

// followKeyRenewal brings this gntd's keys to what a join answer says of
// a renewal of cluster.key (on every gntd, after each join).
func (s *Server) followKeyRenewal(kr *rpc.KeyRenewal) {
	if kr == nil || kr.ID == "" {
		return
	}
	primary, other := s.clusterKeys()
	next := s.keyHeld(kr.ID)
	switch kr.Phase {
	case fsm.KeyPhaseTrust, fsm.KeyPhaseUse:
		if next == nil {
			k, err := s.unsealWithKeys(keySealKey, kr.Sealed)
			if err != nil {
				s.log.Error("renewing the cluster key: the new key does not open with this gntd's key", "error", err)
				return
			}
			if err := checkClusterKey(k); err != nil || keyID(k) != kr.ID {
				s.log.Error("renewing the cluster key: the new key is not the one named", "id", kr.ID)
				return
			}
			if err := s.dir.writeKeyFile(keyNewFile, k); err != nil {
				s.log.Error("renewing the cluster key: writing the new key", "file", s.dir.file(keyNewFile), "error", err)
				return
			}
			next = k
			s.log.Info("renewing the cluster key: holding the new key beside the old, accepting both", "new", kr.ID, "file", s.dir.file(keyNewFile))
		}
		old := primary
		if bytes.Equal(old, next) {
			old = other
		}
		if old == nil {
			return // this gntd holds the new key alone already (a stale answer)
		}
		if kr.Phase == fsm.KeyPhaseTrust {
			if !bytes.Equal(primary, next) || !bytes.Equal(other, old) {
				s.mu.Lock()
				s.setKeys(old, next)
				s.mu.Unlock()
			}
			return
		}
		if !bytes.Equal(primary, next) || !bytes.Equal(other, old) {
			s.mu.Lock()
			s.setKeys(next, old)
			s.mu.Unlock()
			s.log.Info("renewing the cluster key: signing with the new key, accepting the old", "new", kr.ID)
		}
	case fsm.KeyPhaseDone:
		if next == nil {
			if keyID(primary) != kr.ID {
				s.log.Error("the cluster key was renewed and this gntd does not hold the new one; copy cluster.key from another node", "new", kr.ID, "held", keyID(primary))
			}
			return
		}
		if other == nil && bytes.Equal(primary, next) {
			return
		}
		if err := s.dir.writeKeyFile(keyFile, next); err != nil {
			s.log.Error("renewing the cluster key: writing the new key", "file", s.dir.file(keyFile), "error", err)
			return
		}
		if err := os.Remove(s.dir.file(keyNewFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("renewing the cluster key: removing the new key's file", "error", err)
		}
		s.mu.Lock()
		s.setKeys(next, nil)
		s.mu.Unlock()
		s.log.Info("the cluster key is renewed: the old key is dropped", "key", kr.ID)
	}
}

// keyRenewalOf is what a join answer says of a renewal of cluster.key.
func keyRenewalOf(p *fsm.PKI) *rpc.KeyRenewal {
	if p == nil || p.KeyPhase == "" {
		return nil
	}
	return &rpc.KeyRenewal{Phase: p.KeyPhase, ID: p.KeyID, Sealed: p.KeySealed}
}

// keyReport is what a node's last join said of its cluster keys.
type keyReport struct {
	ids []string // the one it signs with first
	at  time.Time
}

// keyRotation is the leader's record of the nodes' reports.
type keyRotation struct {
	mu      sync.Mutex // held while a phase change is applied, too
	reports map[string]keyReport
}

func (r *keyRotation) record(node string, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reports == nil {
		r.reports = map[string]keyReport{}
	}
	r.reports[node] = keyReport{ids: append([]string(nil), ids...), at: time.Now()}
}

func (r keyReport) holds(id string) bool {
	for _, x := range r.ids {
		if x == id {
			return true
		}
	}
	return false
}

func (r keyReport) uses(id string) bool { return len(r.ids) > 0 && r.ids[0] == id }

// nextKeyPhase says which phase a renewal of the key in phase moves to,
// given the new key's ID and the reports of members; "" means it stays.
// Offline nodes are not waited for, as in a renewal of the CA.
func nextKeyPhase(phase, id string, members []rotationMember, reports map[string]keyReport) string {
	return nextRotationPhase(phase, []rotationStep[keyReport]{
		{fsm.KeyPhaseTrust, fsm.KeyPhaseUse, func(r keyReport) bool { return r.holds(id) }},
		{fsm.KeyPhaseUse, fsm.KeyPhaseDone, func(r keyReport) bool { return r.uses(id) }},
	}, members, reports)
}

// keyProgress is the per-node view of a renewal of the key at now.
func keyProgress(id string, members []rotationMember, reports map[string]keyReport, now time.Time) []rpc.RenewKeyNode {
	out := make([]rpc.RenewKeyNode, 0, len(members))
	for _, m := range members {
		n := rpc.RenewKeyNode{Name: m.name, Offline: m.offline}
		if rep, ok := reports[m.name]; ok {
			n.Reported = true
			n.HoldsNew = rep.holds(id)
			n.UsesNew = rep.uses(id)
			n.Age = now.Sub(rep.at).Round(time.Millisecond).Seconds()
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// renewKeyStatus builds the answer of GET /2/gnt/renew-key.
func (s *Server) renewKeyStatus() (rpc.RenewKeyStatus, error) {
	p, members, _ := s.rotationView()
	if p == nil {
		return rpc.RenewKeyStatus{}, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster has no CA (it was initialised before TLS), and no sealed CA key to carry over"}
	}
	st := rpc.RenewKeyStatus{Phase: p.KeyPhase, Serial: p.Serial, KeyID: p.KeyID}
	r := &s.keyRot
	r.mu.Lock()
	st.Nodes = keyProgress(p.KeyID, members, r.reports, time.Now())
	r.mu.Unlock()
	return st, nil
}

// RenewKeyStatus implements rpc.KeyRenewer.
func (s *Server) RenewKeyStatus(ctx context.Context) (rpc.RenewKeyStatus, error) {
	if !s.isLeader() {
		return rpc.RenewKeyStatus{}, rpc.ErrNotLeader
	}
	return s.renewKeyStatus()
}

// RenewKey implements rpc.KeyRenewer: it makes a new cluster key and
// applies phase trust, unless a renewal of the key is under way already.
func (s *Server) RenewKey(ctx context.Context) (rpc.RenewKeyStatus, error) {
	if !s.isLeader() {
		return rpc.RenewKeyStatus{}, rpc.ErrNotLeader
	}
	r := &s.keyRot
	r.mu.Lock()
	p := s.pkiState()
	if p == nil {
		r.mu.Unlock()
		return rpc.RenewKeyStatus{}, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster has no CA (it was initialised before TLS), and no sealed CA key to carry over to a new key"}
	}
	started := false
	if !p.KeyRotating() {
		if err := s.startKeyRenewal(ctx, p); err != nil {
			r.mu.Unlock()
			return rpc.RenewKeyStatus{}, err
		}
		started = true
	}
	r.mu.Unlock()
	st, err := s.renewKeyStatus()
	st.Started = started
	return st, err
}

func (s *Server) startKeyRenewal(ctx context.Context, p *fsm.PKI) error {
	if p.Rotating() {
		return &fsm.Error{Code: fsm.CodeState, Msg: fmt.Sprintf("a renewal of the cluster CA is under way (phase %s); renew the key once it is done", p.Phase)}
	}
	old := s.currentKey(p)
	if old == nil {
		return errors.New("this gntd holds no cluster key")
	}
	if _, other := s.clusterKeys(); other != nil {
		// The last renewal's end has not reached this gntd yet.
		return &fsm.Error{Code: fsm.CodeState, Msg: "this gntd still holds two cluster keys from the last renewal; ask again after its next join"}
	}
	next, err := newClusterKey()
	if err != nil {
		return err
	}
	sealed, err := pki.Seal(keySealKey(old), next)
	if err != nil {
		return err
	}
	cmd := fsm.PKIKeyRotate{Now: time.Now().UnixNano(), Serial: p.Serial, Phase: fsm.KeyPhaseTrust,
		KeyID: keyID(next), KeySealed: sealed, CAKeySealed: p.CAKeySealed}
	resp, _, err := s.Apply(ctx, cmd)
	if err == nil && resp.Err != nil {
		err = resp.Err
	}
	if err != nil {
		return err
	}
	s.log.Info("renewing the cluster key: every gntd learns the new key and accepts both", "old", keyID(old), "new", cmd.KeyID)
	return nil
}

// keyRotationJoin records a join's key report and moves a renewal of the
// key on when every node is ready for its next phase (on the leader).
func (s *Server) keyRotationJoin(ctx context.Context, req rpc.JoinRequest) {
	r := &s.keyRot
	r.record(req.Node.Name, req.KeyIDs)
	if !s.pkiState().KeyRotating() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, members, _ := s.rotationView()
	if !p.KeyRotating() {
		return
	}
	next := nextKeyPhase(p.KeyPhase, p.KeyID, members, r.reports)
	if next == "" {
		return
	}
	cmd := fsm.PKIKeyRotate{Now: time.Now().UnixNano(), Serial: p.Serial, Phase: next, KeyID: p.KeyID, CAKeySealed: p.CAKeySealed}
	if next == fsm.KeyPhaseUse {
		cmd.KeySealed = p.KeySealed
		newKey, err := s.unsealWithKeys(keySealKey, p.KeySealed)
		if err != nil {
			s.log.Error("renewing the cluster key: the new key does not open with this leader's keys", "error", err)
			return
		}
		caKey, err := s.unsealWithKeys(pki.SealKey, p.CAKeySealed)
		if err != nil {
			s.log.Error("renewing the cluster key: the CA key does not open with this leader's keys", "error", err)
			return
		}
		if cmd.CAKeySealed, err = pki.Seal(pki.SealKey(newKey), caKey); err != nil {
			s.log.Error("renewing the cluster key: sealing the CA key", "error", err)
			return
		}
	}
	resp, _, err := s.Apply(ctx, cmd)
	if err == nil && resp.Err != nil {
		err = resp.Err
	}
	if err != nil {
		s.log.Warn("renewing the cluster key", "phase", next, "error", err)
		return
	}
	switch next {
	case fsm.KeyPhaseUse:
		s.log.Info("renewing the cluster key: every node holds the new key; signing with it, the CA key sealed under it", "new", p.KeyID)
	case fsm.KeyPhaseDone:
		s.log.Info("renewing the cluster key: every node signs with the new key; the old key is dropped", "new", p.KeyID)
	}
}

var _ rpc.KeyRenewer = (*Server)(nil)
var _ rpc.JoinKeyring = (*Server)(nil)

// joinSignatureRefused says whether a join was refused for its signature
// (a key the cluster no longer accepts).
func joinSignatureRefused(err error) bool {
	var ae *rpc.APIError
	return errors.As(err, &ae) && ae.ErrorCode == rpc.CodeUnauthorized && strings.Contains(ae.Message, rpc.ErrBadSignature.Error())
}
