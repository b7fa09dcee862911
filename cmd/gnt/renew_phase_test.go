package main

import (
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
)

// TestRenewalWaits: what each phase of a CA and of a key renewal says it
// waits for: the nodes not there yet, never an offline one.
func TestRenewalWaits(t *testing.T) {
	ca := func(phase string) string {
		return waitingFor(rpc.RenewCryptoStatus{Phase: phase, Nodes: []rpc.RenewCryptoNode{
			{Name: "n1", TrustsNew: true}, {Name: "n2", Offline: true}, {Name: "n3"}, {Name: "n4", TrustsNew: true, CertNew: true}}})
	}
	key := func(phase string) string {
		return keyWaitingFor(rpc.RenewKeyStatus{Phase: phase, Nodes: []rpc.RenewKeyNode{
			{Name: "n1", HoldsNew: true}, {Name: "n2", Offline: true}, {Name: "n3"}, {Name: "n4", HoldsNew: true, UsesNew: true}}})
	}
	for _, tc := range []struct{ got, want string }{
		{ca("trust"), "every node learns to trust the new CA (waiting for n3)"},
		{ca("issue"), "every node gets a certificate of the new CA (waiting for n1, n3)"},
		{ca("done"), "the old CA is dropped"},
		{ca(""), "no renewal"},
		{ca("use"), "no renewal"},
		{key("trust"), "every node learns the new key (waiting for n3)"},
		{key("use"), "every node signs with the new key (waiting for n1, n3)"},
		{key("done"), "the old key is dropped"},
		{key(""), "no renewal"},
		{key("issue"), "no renewal"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
