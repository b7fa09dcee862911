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
	next := PKI{CACerts: c.CACerts, CAKeySealed: c.CAKeySealed, Serial: old.Serial + 1, Phase: c.Phase}
	if e := validatePKI(&next); e != nil {
		return Response{Err: e}
	}
	switch c.Phase {
	case PhaseTrust:
		if old.Rotating() {
			return Response{Err: errf(CodeState, "phase", "a renewal of the cluster CA is under way already (phase %s)", old.Phase)}
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
