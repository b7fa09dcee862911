package fsm

import (
	"bytes"
	"strings"
	"testing"
)

const (
	testCertA = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	testCertB = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"
)

// TestPKIRotate walks a rotation through its phases and tries every
// out-of-order or malformed step, which must change nothing.
func TestPKIRotate(t *testing.T) {
	h := newHarness()
	if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(), Node: NodeSpec{Name: "n1", UUID: h.uuid(), PrimaryIP: "10.0.0.1"},
		PKI: &PKI{CACerts: testCertA, CAKeySealed: "sealed-a", Phase: PhaseIssue}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	if p := h.f.st.PKI; p.Serial != 1 || p.Phase != "" || p.Rotating() {
		t.Fatalf("after init: %+v", p)
	}
	both := testCertB + testCertA
	step := func(c PKIRotate, wantErr string) {
		t.Helper()
		before := *h.f.st.PKI
		serial := h.f.st.Cluster.SerialNo
		c.Now = h.now
		r := h.apply(c).(Response)
		switch {
		case wantErr == "" && r.Err != nil:
			t.Fatalf("%+v: %v", c, r.Err)
		case wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), wantErr)):
			t.Fatalf("%+v: got %v, want an error with %q", c, r.Err, wantErr)
		case wantErr != "":
			if *h.f.st.PKI != before || h.f.st.Cluster.SerialNo != serial {
				t.Fatalf("%+v was refused but changed the state: %+v", c, h.f.st.PKI)
			}
		case h.f.st.PKI.Serial != before.Serial+1 || h.f.st.PKI.Phase != c.Phase || h.f.st.Cluster.SerialNo != serial+1:
			t.Fatalf("%+v: PKI %+v, cluster serial %d", c, h.f.st.PKI, h.f.st.Cluster.SerialNo)
		}
	}
	step(PKIRotate{Serial: 1, Phase: PhaseIssue, CACerts: testCertA, CAKeySealed: "sealed-a"}, "after phase trust")
	step(PKIRotate{Serial: 1, Phase: PhaseDone, CACerts: testCertA, CAKeySealed: "sealed-a"}, "after phase issue")
	step(PKIRotate{Serial: 1, Phase: "later", CACerts: both, CAKeySealed: "sealed-b"}, `phase "later"`)
	step(PKIRotate{Serial: 2, Phase: PhaseTrust, CACerts: both, CAKeySealed: "sealed-b"}, "serial 1, not 2")
	step(PKIRotate{Serial: 1, Phase: PhaseTrust, CACerts: testCertB, CAKeySealed: "sealed-b"}, "followed by the old bundle")
	step(PKIRotate{Serial: 1, Phase: PhaseTrust, CACerts: both, CAKeySealed: "sealed-a"}, "needs a new key")
	step(PKIRotate{Serial: 1, Phase: PhaseTrust, CACerts: "junk" + testCertA, CAKeySealed: "sealed-b"}, "must be PEM")
	step(PKIRotate{Serial: 1, Phase: PhaseTrust, CACerts: both, CAKeySealed: ""}, "sealed CA key is missing")
	step(PKIRotate{Serial: 1, Phase: PhaseTrust, CACerts: both, CAKeySealed: "sealed-b"}, "")
	if !h.f.st.PKI.Rotating() {
		t.Fatal("phase trust is not a rotation under way")
	}
	step(PKIRotate{Serial: 2, Phase: PhaseTrust, CACerts: testCertA + both, CAKeySealed: "sealed-c"}, "under way already")
	step(PKIRotate{Serial: 2, Phase: PhaseDone, CACerts: testCertB, CAKeySealed: "sealed-b"}, "after phase issue")
	step(PKIRotate{Serial: 2, Phase: PhaseIssue, CACerts: testCertB, CAKeySealed: "sealed-b"}, "keeps the CA certificates")
	step(PKIRotate{Serial: 2, Phase: PhaseIssue, CACerts: both, CAKeySealed: "sealed-b"}, "")
	step(PKIRotate{Serial: 3, Phase: PhaseDone, CACerts: testCertA, CAKeySealed: "sealed-b"}, "keeps the newest CA")
	step(PKIRotate{Serial: 3, Phase: PhaseDone, CACerts: both, CAKeySealed: "sealed-b"}, "keeps the newest CA")
	step(PKIRotate{Serial: 3, Phase: PhaseDone, CACerts: testCertB, CAKeySealed: "sealed-x"}, "keeps the newest CA")
	step(PKIRotate{Serial: 3, Phase: PhaseDone, CACerts: testCertB, CAKeySealed: "sealed-b"}, "")
	if p := h.f.st.PKI; p.Rotating() || p.CACerts != testCertB || p.Serial != 4 {
		t.Fatalf("after done: %+v", p)
	}
	// A finished rotation may be followed by another.
	step(PKIRotate{Serial: 4, Phase: PhaseTrust, CACerts: testCertA + testCertB, CAKeySealed: "sealed-a2"}, "")

	// The phase survives a snapshot.
	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f2 := New()
	if err := f2.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if p := f2.st.PKI; p == nil || *p != *h.f.st.PKI {
		t.Fatalf("PKI after a snapshot: %+v, want %+v", p, h.f.st.PKI)
	}
}

// TestPKIKeyRotate walks a renewal of cluster.key through its phases;
// every step out of order or malformed is refused and changes nothing.
func TestPKIKeyRotate(t *testing.T) {
	h := newHarness()
	if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(), Node: NodeSpec{Name: "n1", UUID: h.uuid(), PrimaryIP: "10.0.0.1"},
		PKI: &PKI{CACerts: testCertA, CAKeySealed: "ca-under-k1"}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	step := func(c PKIKeyRotate, wantErr string) {
		t.Helper()
		before := *h.f.st.PKI
		serial := h.f.st.Cluster.SerialNo
		c.Now = h.now
		r := h.apply(c).(Response)
		switch {
		case wantErr == "" && r.Err != nil:
			t.Fatalf("%+v: %v", c, r.Err)
		case wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), wantErr)):
			t.Fatalf("%+v: got %v, want an error with %q", c, r.Err, wantErr)
		case wantErr != "":
			if *h.f.st.PKI != before || h.f.st.Cluster.SerialNo != serial {
				t.Fatalf("%+v was refused but changed the state: %+v", c, h.f.st.PKI)
			}
		case h.f.st.PKI.Serial != before.Serial+1 || h.f.st.PKI.KeyPhase != c.Phase || h.f.st.Cluster.SerialNo != serial+1:
			t.Fatalf("%+v: PKI %+v, cluster serial %d", c, h.f.st.PKI, h.f.st.Cluster.SerialNo)
		}
	}
	trust := PKIKeyRotate{Serial: 1, Phase: KeyPhaseTrust, KeyID: "ab12", KeySealed: "k2-under-k1", CAKeySealed: "ca-under-k1"}
	with := func(c PKIKeyRotate, f func(*PKIKeyRotate)) PKIKeyRotate { f(&c); return c }
	for _, tc := range []struct {
		c    PKIKeyRotate
		want string
	}{
		{with(trust, func(c *PKIKeyRotate) { c.Phase = KeyPhaseUse; c.CAKeySealed = "ca-under-k2" }), "after phase trust"},
		{with(trust, func(c *PKIKeyRotate) { c.Phase = KeyPhaseDone; c.KeySealed = "" }), "after phase use"},
		{with(trust, func(c *PKIKeyRotate) { c.Phase = "later" }), `phase "later"`},
		{with(trust, func(c *PKIKeyRotate) { c.Serial = 2 }), "serial 1, not 2"},
		{with(trust, func(c *PKIKeyRotate) { c.KeyID = "" }), "lowercase hex"},
		{with(trust, func(c *PKIKeyRotate) { c.KeyID = "AB12" }), "lowercase hex"},
		{with(trust, func(c *PKIKeyRotate) { c.KeyID = strings.Repeat("a", MaxKeyIDLen+1) }), "lowercase hex"},
		{with(trust, func(c *PKIKeyRotate) { c.KeySealed = "" }), "needs the new key"},
		{with(trust, func(c *PKIKeyRotate) { c.KeySealed = strings.Repeat("x", MaxPKIBytes+1) }), "limited to"},
		{with(trust, func(c *PKIKeyRotate) { c.CAKeySealed = "" }), "sealed CA key is missing"},
		{with(trust, func(c *PKIKeyRotate) { c.CAKeySealed = "ca-under-k2" }), "keeps the CA key"},
	} {
		step(tc.c, tc.want)
	}
	step(trust, "")
	if p := h.f.st.PKI; !p.KeyRotating() || p.KeyID != "ab12" || p.KeySealed != "k2-under-k1" || p.CAKeySealed != "ca-under-k1" {
		t.Fatalf("after trust: %+v", p)
	}
	// Neither a second key renewal nor a CA renewal starts meanwhile.
	step(with(trust, func(c *PKIKeyRotate) { c.Serial = 2; c.KeyID = "cd34" }), "under way already")
	if r := h.apply(PKIRotate{Now: h.now, Serial: 2, Phase: PhaseTrust, CACerts: testCertB + testCertA, CAKeySealed: "ca-b"}).(Response); r.Err == nil || !strings.Contains(r.Err.Error(), "cluster key is under way") {
		t.Fatalf("CA renewal during a key renewal: %v", r.Err)
	}
	use := PKIKeyRotate{Serial: 2, Phase: KeyPhaseUse, KeyID: "ab12", KeySealed: "k2-under-k1", CAKeySealed: "ca-under-k2"}
	for _, tc := range []struct {
		c    PKIKeyRotate
		want string
	}{
		{with(use, func(c *PKIKeyRotate) { c.Phase = KeyPhaseDone; c.KeySealed = ""; c.CAKeySealed = "ca-under-k1" }), "after phase use"},
		{with(use, func(c *PKIKeyRotate) { c.KeyID = "ef56" }), "keeps the new key"},
		{with(use, func(c *PKIKeyRotate) { c.KeySealed = "other" }), "keeps the new key"},
		{with(use, func(c *PKIKeyRotate) { c.CAKeySealed = "ca-under-k1" }), "seals the CA key under the new"},
	} {
		step(tc.c, tc.want)
	}
	step(use, "")
	if p := h.f.st.PKI; p.CAKeySealed != "ca-under-k2" || p.KeySealed != "k2-under-k1" {
		t.Fatalf("after use: %+v", p)
	}
	done := PKIKeyRotate{Serial: 3, Phase: KeyPhaseDone, KeyID: "ab12", CAKeySealed: "ca-under-k2"}
	for _, tc := range []struct {
		c    PKIKeyRotate
		want string
	}{
		{with(done, func(c *PKIKeyRotate) { c.Phase = KeyPhaseUse }), "after phase trust"},
		{with(done, func(c *PKIKeyRotate) { c.Phase = KeyPhaseTrust; c.KeyID = "ef56"; c.KeySealed = "x" }), "under way already"},
		{with(done, func(c *PKIKeyRotate) { c.KeySealed = "k2-under-k1" }), "drops the sealed"},
		{with(done, func(c *PKIKeyRotate) { c.KeyID = "ef56" }), "keeps the key ID"},
		{with(done, func(c *PKIKeyRotate) { c.CAKeySealed = "ca-under-k1" }), "keeps the key ID and the CA key"},
	} {
		step(tc.c, tc.want)
	}
	step(done, "")
	if p := h.f.st.PKI; p.KeyRotating() || p.KeySealed != "" || p.KeyID != "ab12" || p.CAKeySealed != "ca-under-k2" {
		t.Fatalf("after done: %+v", p)
	}
	// The same key again is refused; a CA renewal may start now, and
	// keeps the key's record.
	step(PKIKeyRotate{Serial: 4, Phase: KeyPhaseTrust, KeyID: "ab12", KeySealed: "s", CAKeySealed: "ca-under-k2"}, "must differ")
	if r := h.apply(PKIRotate{Now: h.now, Serial: 4, Phase: PhaseTrust, CACerts: testCertB + testCertA, CAKeySealed: "ca-b"}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	if p := h.f.st.PKI; p.KeyID != "ab12" || p.KeyPhase != KeyPhaseDone {
		t.Fatalf("a CA renewal lost the key record: %+v", p)
	}
	step(PKIKeyRotate{Serial: 5, Phase: KeyPhaseTrust, KeyID: "cd34", KeySealed: "s", CAKeySealed: "ca-b"}, "cluster CA is under way")

	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f2 := New()
	if err := f2.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if p := f2.st.PKI; p == nil || *p != *h.f.st.PKI {
		t.Fatalf("restored %+v, want %+v", p, h.f.st.PKI)
	}
}
