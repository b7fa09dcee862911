package fsm

import "strings"

// PKI is the cluster's certificate authority as the replicated state holds
// it: the CA certificates every gntd trusts, and the CA key sealed with a
// key derived from cluster.key (package pki), so that whichever candidate
// leads can sign node certificates while the state alone reveals nothing.
type PKI struct {
	// CACerts are the trusted CA certificates in PEM, newest first: one,
	// or two while the CA is being rotated.
	CACerts string `json:"ca_certs"`
	// CAKeySealed is the newest CA's private key, sealed.
	CAKeySealed string `json:"ca_key_sealed"`
	// Serial counts changes of the CA (1 at init).
	Serial int64 `json:"serial"`
	// Phase is where a rotation of the CA (gnt cluster renew-crypto)
	// stands: "" before any, then PhaseTrust, PhaseIssue, PhaseDone.
	// Since LogVersion 5.
	Phase string `json:"phase,omitempty"`
	// KeyPhase is where a renewal of cluster.key (gnt cluster
	// renew-crypto --new-cluster-key) stands: "" before any, then
	// KeyPhaseTrust, KeyPhaseUse, KeyPhaseDone. Since LogVersion 10.
	KeyPhase string `json:"key_phase,omitempty"`
	// KeyID identifies the new cluster key of a renewal (a hash of it
	// that reveals nothing of it; package server makes it).
	KeyID string `json:"key_id,omitempty"`
	// KeySealed is the new cluster key sealed under a key derived from
	// the old one, while the renewal is in phase trust or use; every
	// gntd holding the old key learns the new one from it. Phase done
	// drops it.
	KeySealed string `json:"key_sealed,omitempty"`
}

// Phases of a rotation of the cluster CA (PKIRotate).
const (
	// PhaseTrust: CACerts holds the new CA and the old one, every gntd
	// learns to trust both, and node certificates stay as they are.
	PhaseTrust = "trust"
	// PhaseIssue: every gntd trusts the new CA; nodes get certificates
	// of the new CA, the old ones are still accepted.
	PhaseIssue = "issue"
	// PhaseDone: every node holds a certificate of the new CA; CACerts
	// holds the new CA only and the old one's certificates are refused.
	PhaseDone = "done"
)

// PKIRotate moves a rotation of the cluster CA to its next phase
// (gnt cluster renew-crypto). The proposer computes everything: for
// PhaseTrust the new CA first and the old certificates after it, with the
// new CA's key sealed; for PhaseIssue the same PKI; for PhaseDone the new
// CA only. Serial is the PKI serial the proposer saw: the command is
// refused when the CA changed since, so that two proposers cannot both
// move it.
type PKIRotate struct {
	Now    int64  `json:"now"`
	Serial int64  `json:"serial"`
	Phase  string `json:"phase"`
	// CACerts and CAKeySealed are the PKI after the command.
	CACerts     string `json:"ca_certs"`
	CAKeySealed string `json:"ca_key_sealed"`
}

// CommandType implements Command.
func (PKIRotate) CommandType() CommandType { return CmdPKIRotate }

// Rotating reports whether a rotation of the CA is under way.
func (p *PKI) Rotating() bool {
	return p != nil && (p.Phase == PhaseTrust || p.Phase == PhaseIssue)
}

func (s *State) applyPKIRotate(c *PKIRotate) Response {
	old := s.PKI
	if s.Cluster == nil || old == nil {
		return Response{Err: errf(CodeState, "", "the cluster has no CA to renew (it was initialised before TLS)")}
	}
	if c.Serial != old.Serial {
		return Response{Err: errf(CodeState, "serial", "the cluster CA changed (serial %d, not %d); look at its state again", old.Serial, c.Serial)}
	}
	next := *old
	next.CACerts, next.CAKeySealed, next.Serial, next.Phase = c.CACerts, c.CAKeySealed, old.Serial+1, c.Phase
	if e := validatePKI(&next); e != nil {
		return Response{Err: e}
	}
	switch c.Phase {
	case PhaseTrust:
		if old.Rotating() {
			return Response{Err: errf(CodeState, "phase", "a renewal of the cluster CA is under way already (phase %s)", old.Phase)}
		}
		if old.KeyRotating() {
			return Response{Err: errf(CodeState, "phase", "a renewal of the cluster key is under way (phase %s); renew the CA once it is done", old.KeyPhase)}
		}
		// The new CA first, then every certificate trusted before.
		if !strings.HasSuffix(next.CACerts, old.CACerts) || len(next.CACerts) == len(old.CACerts) {
			return Response{Err: errf(CodeInval, "ca_certs", "the new CA bundle must be the new CA followed by the old bundle")}
		}
		if next.CAKeySealed == old.CAKeySealed {
			return Response{Err: errf(CodeInval, "ca_key_sealed", "the new CA needs a new key")}
		}
	case PhaseIssue:
		if old.Phase != PhaseTrust {
			return Response{Err: errf(CodeState, "phase", "certificates of the new CA are issued after phase %s, not %q", PhaseTrust, old.Phase)}
		}
		if next.CACerts != old.CACerts || next.CAKeySealed != old.CAKeySealed {
			return Response{Err: errf(CodeInval, "ca_certs", "phase %s keeps the CA certificates and key", PhaseIssue)}
		}
	case PhaseDone:
		if old.Phase != PhaseIssue {
			return Response{Err: errf(CodeState, "phase", "the old CA is dropped after phase %s, not %q", PhaseIssue, old.Phase)}
		}
		if !strings.HasPrefix(old.CACerts, next.CACerts) || len(next.CACerts) == len(old.CACerts) || next.CAKeySealed != old.CAKeySealed {
			return Response{Err: errf(CodeInval, "ca_certs", "phase %s keeps the newest CA of the bundle and its key, and drops the others", PhaseDone)}
		}
	default:
		return Response{Err: errf(CodeInval, "phase", "phase %q is not %s, %s or %s", c.Phase, PhaseTrust, PhaseIssue, PhaseDone)}
	}
	s.PKI = &next
	t := s.begin(c.Now)
	t.clusterRW()
	t.commit()
	return Response{}
}

// MaxPKIBytes bounds the PEM and sealed key a PKI record may carry.
const MaxPKIBytes = 64 << 10

func validatePKI(p *PKI) *Error {
	switch {
	case p == nil:
		return nil
	case !strings.HasPrefix(p.CACerts, "-----BEGIN CERTIFICATE-----"):
		return errf(CodeInval, "pki.ca_certs", "the CA certificates must be PEM certificates")
	case len(p.CACerts) > MaxPKIBytes || len(p.CAKeySealed) > MaxPKIBytes:
		return errf(CodeInval, "pki", "the CA certificates and sealed key are limited to %d bytes each", MaxPKIBytes)
	case p.CAKeySealed == "":
		return errf(CodeInval, "pki.ca_key_sealed", "the sealed CA key is missing")
	}
	return nil
}

// Phases of a renewal of cluster.key (PKIKeyRotate).
const (
	// KeyPhaseTrust: every gntd learns the new key (KeySealed), keeps it
	// next to the old one and accepts both; all sign with the old.
	KeyPhaseTrust = "trust"
	// KeyPhaseUse: every gntd holds the new key; all sign with it and
	// still accept the old. The CA key is sealed under the new key.
	KeyPhaseUse = "use"
	// KeyPhaseDone: every gntd signs with the new key; the old one is
	// dropped everywhere, and so is KeySealed.
	KeyPhaseDone = "done"
)

// MaxKeyIDLen bounds PKI.KeyID.
const MaxKeyIDLen = 64

// PKIKeyRotate moves a renewal of cluster.key to its next phase. The
// proposer computes everything: for KeyPhaseTrust the new key's ID and
// the new key sealed under the old; for KeyPhaseUse the CA key sealed
// under the new key (CAKeySealed); for KeyPhaseDone the same ID, no
// sealed key. Serial is the PKI serial the proposer saw, as in PKIRotate.
type PKIKeyRotate struct {
	Now       int64  `json:"now"`
	Serial    int64  `json:"serial"`
	Phase     string `json:"phase"`
	KeyID     string `json:"key_id"`
	KeySealed string `json:"key_sealed,omitempty"`
	// CAKeySealed is the CA key as PKI holds it after the command.
	CAKeySealed string `json:"ca_key_sealed"`
}

// CommandType implements Command.
func (PKIKeyRotate) CommandType() CommandType { return CmdPKIKeyRotate }

// KeyRotating reports whether a renewal of cluster.key is under way.
func (p *PKI) KeyRotating() bool {
	return p != nil && (p.KeyPhase == KeyPhaseTrust || p.KeyPhase == KeyPhaseUse)
}

func (s *State) applyPKIKeyRotate(c *PKIKeyRotate) Response {
	old := s.PKI
	if s.Cluster == nil || old == nil {
		return Response{Err: errf(CodeState, "", "the cluster has no CA, and no sealed CA key to carry over to a new cluster key (it was initialised before TLS)")}
	}
	if c.Serial != old.Serial {
		return Response{Err: errf(CodeState, "serial", "the cluster CA or key changed (serial %d, not %d); look at its state again", old.Serial, c.Serial)}
	}
	if c.KeyID == "" || len(c.KeyID) > MaxKeyIDLen || strings.Trim(c.KeyID, "0123456789abcdef") != "" {
		return Response{Err: errf(CodeInval, "key_id", "the key ID must be 1 to %d lowercase hex digits", MaxKeyIDLen)}
	}
	if len(c.KeySealed) > MaxPKIBytes || len(c.CAKeySealed) > MaxPKIBytes {
		return Response{Err: errf(CodeInval, "key_sealed", "the sealed keys are limited to %d bytes each", MaxPKIBytes)}
	}
	if c.CAKeySealed == "" {
		return Response{Err: errf(CodeInval, "ca_key_sealed", "the sealed CA key is missing")}
	}
	next := *old
	next.Serial, next.KeyPhase = old.Serial+1, c.Phase
	switch c.Phase {
	case KeyPhaseTrust:
		if old.KeyRotating() {
			return Response{Err: errf(CodeState, "phase", "a renewal of the cluster key is under way already (phase %s)", old.KeyPhase)}
		}
		if old.Rotating() {
			return Response{Err: errf(CodeState, "phase", "a renewal of the cluster CA is under way (phase %s); renew the key once it is done", old.Phase)}
		}
		if c.KeyID == old.KeyID {
			return Response{Err: errf(CodeInval, "key_id", "the new cluster key must differ from the last one")}
		}
		if c.KeySealed == "" {
			return Response{Err: errf(CodeInval, "key_sealed", "phase %s needs the new key, sealed", KeyPhaseTrust)}
		}
		if c.CAKeySealed != old.CAKeySealed {
			return Response{Err: errf(CodeInval, "ca_key_sealed", "phase %s keeps the CA key as it is sealed", KeyPhaseTrust)}
		}
		next.KeyID, next.KeySealed = c.KeyID, c.KeySealed
	case KeyPhaseUse:
		if old.KeyPhase != KeyPhaseTrust {
			return Response{Err: errf(CodeState, "phase", "the new cluster key is used after phase %s, not %q", KeyPhaseTrust, old.KeyPhase)}
		}
		if c.KeyID != old.KeyID || c.KeySealed != old.KeySealed {
			return Response{Err: errf(CodeInval, "key_id", "phase %s keeps the new key of phase %s", KeyPhaseUse, KeyPhaseTrust)}
		}
		if c.CAKeySealed == old.CAKeySealed {
			return Response{Err: errf(CodeInval, "ca_key_sealed", "phase %s seals the CA key under the new cluster key", KeyPhaseUse)}
		}
		next.CAKeySealed = c.CAKeySealed
	case KeyPhaseDone:
		if old.KeyPhase != KeyPhaseUse {
			return Response{Err: errf(CodeState, "phase", "the old cluster key is dropped after phase %s, not %q", KeyPhaseUse, old.KeyPhase)}
		}
		if c.KeyID != old.KeyID || c.KeySealed != "" || c.CAKeySealed != old.CAKeySealed {
			return Response{Err: errf(CodeInval, "key_sealed", "phase %s keeps the key ID and the CA key, and drops the sealed cluster key", KeyPhaseDone)}
		}
		next.KeySealed = ""
	default:
		return Response{Err: errf(CodeInval, "phase", "phase %q is not %s, %s or %s", c.Phase, KeyPhaseTrust, KeyPhaseUse, KeyPhaseDone)}
	}
	s.PKI = &next
	t := s.begin(c.Now)
	t.clusterRW()
	t.commit()
	return Response{}
}
