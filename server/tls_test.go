package server

import (
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
)

var (
	testCAOnce sync.Once
	testCA     *pki.CA
)

// testIdentity is a store holding a node certificate named name of one CA
// shared by the package's tests.
func testIdentity(t *testing.T, name string) *pki.Store {
	t.Helper()
	testCAOnce.Do(func() {
		var err error
		if testCA, err = pki.NewCA("test", time.Now()); err != nil {
			panic(err)
		}
	})
	kp, err := pki.NewKeyPair(name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := testCA.Sign(&kp.Key.PublicKey, nodeLeaf(fsm.NodeSpec{Name: name, PrimaryIP: "127.0.0.1"}), time.Now(), pki.NodeValidity)
	if err != nil {
		t.Fatal(err)
	}
	st := pki.NewStore()
	if err := st.SetTrust(testCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	if err := st.SetIdentity(cert, kp.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return st
}
