package server

import (
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
)

// TestRotationPhases feeds the renewal's state machine joins of three
// nodes and an offline one, in the order a rolling renewal sees them.
func TestRotationPhases(t *testing.T) {
	const oldCA, newCA = "old", "new"
	clock := time.Unix(1_700_000_000, 0)
	r := &rotation{now: func() time.Time { return clock }}
	members := []rotationMember{{name: "n1"}, {name: "n2"}, {name: "n3"}, {name: "n4", offline: true}}
	next := func(phase string) string { return nextPhase(phase, newCA, members, r.reports) }

	for _, ph := range []string{"", fsm.PhaseDone, "bogus"} {
		if got := next(ph); got != "" {
			t.Errorf("phase %q moves to %q; only trust and issue move", ph, got)
		}
	}
	// Nobody has reported: trust stays.
	if got := next(fsm.PhaseTrust); got != "" {
		t.Fatalf("trust with no reports moves to %q", got)
	}
	r.record("n1", newCA, oldCA)
	r.record("n2", newCA, oldCA)
	r.record("n3", oldCA, oldCA) // n3 has not learned the new bundle yet
	if got := next(fsm.PhaseTrust); got != "" {
		t.Fatalf("trust moves to %q while n3 trusts only the old CA", got)
	}
	clock = clock.Add(1500 * time.Millisecond)
	r.record("n3", newCA, oldCA)
	// n4 is offline and never reports: not waited for.
	if got := next(fsm.PhaseTrust); got != fsm.PhaseIssue {
		t.Fatalf("every online node trusts the new CA: trust moves to %q, want issue", got)
	}
	if got := next(fsm.PhaseIssue); got != "" {
		t.Fatalf("issue moves to %q while no node holds a new certificate", got)
	}
	r.record("n1", newCA, newCA)
	r.record("n2", newCA, newCA)
	if got := next(fsm.PhaseIssue); got != "" {
		t.Fatalf("issue moves to %q while n3 holds an old certificate", got)
	}
	r.record("n3", newCA, newCA)
	if got := next(fsm.PhaseIssue); got != fsm.PhaseDone {
		t.Fatalf("every online node holds a new certificate: issue moves to %q, want done", got)
	}
	// A node that comes back online is waited for again.
	members[3].offline = false
	if got := next(fsm.PhaseIssue); got != "" {
		t.Fatalf("issue moves to %q while n4, back online, has not reported", got)
	}
	// A cluster with only offline nodes never moves on by itself.
	if got := nextPhase(fsm.PhaseTrust, newCA, []rotationMember{{name: "x", offline: true}}, nil); got != "" {
		t.Fatalf("no online node: trust moves to %q", got)
	}

	clock = clock.Add(500 * time.Millisecond)
	prog := progress(newCA, members, r.reports, clock)
	if len(prog) != 4 || prog[0].Name != "n1" || prog[3].Name != "n4" {
		t.Fatalf("progress: %+v", prog)
	}
	if p := prog[2]; !p.Reported || !p.TrustsNew || !p.CertNew || p.Age != 0.5 {
		t.Errorf("n3's progress: %+v", p)
	}
	if p := prog[3]; p.Reported || p.TrustsNew || p.CertNew {
		t.Errorf("n4 never reported: %+v", p)
	}
}

// TestCertReport: what a gntd reports of its trust and certificate, and
// the newest CA of a bundle as its exact text.
func TestCertReport(t *testing.T) {
	now := time.Now()
	oldCA, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	st := pki.NewStore()
	if trust, issuer := certReportOf(st); trust != "" || issuer != "" {
		t.Fatalf("an empty store reports %q %q", trust, issuer)
	}
	if err := st.SetTrust(oldCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	kp, _ := pki.NewKeyPair("n1")
	cert, err := oldCA.Sign(&kp.Key.PublicKey, pki.Leaf{Name: "n1", Org: pki.OrgNode}, now, pki.NodeValidity)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetIdentity(cert, kp.KeyPEM); err != nil {
		t.Fatal(err)
	}
	oldFP, newFP := pki.Fingerprint(oldCA.Cert), pki.Fingerprint(newCA.Cert)
	if trust, issuer := certReportOf(st); trust != oldFP || issuer != oldFP {
		t.Fatalf("before the renewal: %q %q", trust, issuer)
	}
	bundle := string(newCA.CertPEM) + string(oldCA.CertPEM)
	if err := st.SetTrust([]byte(bundle)); err != nil {
		t.Fatal(err)
	}
	if trust, issuer := certReportOf(st); trust != newFP || issuer != oldFP {
		t.Fatalf("trusting both: %q %q", trust, issuer)
	}
	first, fp, err := newestCA(bundle)
	if err != nil || first != string(newCA.CertPEM) || fp != newFP || !strings.HasPrefix(bundle, first) {
		t.Fatalf("newestCA: %q %q %v", first, fp, err)
	}
	for _, bad := range []string{"", "junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, _, err := newestCA(bad); err == nil {
			t.Errorf("newestCA(%q) is not an error", bad)
		}
	}
}
