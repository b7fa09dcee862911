package rpc_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
)

// FuzzDecodeNodeRequest: the node RPC's request decoder never panics, every
// refusal is a 400 *NodeError, and what it accepts survives encoding and
// decoding again unchanged. Run with go test -fuzz FuzzDecodeNodeRequest
// ./rpc; the corpus is in testdata/fuzz.
func FuzzDecodeNodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1","name":"web1","disks":[{"uuid":"d0","size":1024,"mode":"rw"}]}}`,
		`{"node":"node21","nonce":"0123456789ab","op":"instance-stop","instance":{"uuid":"u1"},"timeout":90,"force":true}`,
		`{"node":"node21","nonce":"0123456789ab","op":"instance-reboot","instance":{"uuid":"u1"},"op_id":"j1","reboot_type":"full"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"disk-replace","instance":{"uuid":"u1"},"disk":"d0","op_id":"j2"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"migrate-send","instance":{"uuid":"u1"},"migration":"m","peer_node":"node22","peer":"127.0.0.22:1811"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"migrate-receive","handoff":{"migration":"m","source":"node22","instance":{"uuid":"u1"},"boot_id":"b","memory":512,"transferred":"2024-01-01T00:00:00Z"}}`,
		`{"node":"node21","nonce":"0123456789ab","op":"debug-fault","fault":{"op":"instance-start","delay":"2s","times":1}}`,
		`{"node":"node21","nonce":"0123456789ab","op":"list"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":["br0","xen-br0"]}`,
		`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":["br 0"]}`,
		`{"node":"node21","nonce":"0123456789ab","op":"diagnose","command":"check-hw"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"diagnose"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"repair-command","command":"fix","input":"{\"status\":\"live-repair\"}"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"repair-command","input":"x"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"status","instance":{"uuid":"u1"}}`,
		`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":"u1"}`,
		`{"node":"node21","nonce":"0123456789ab","op":"instance-stop","instance":{"uuid":"u1"},"timeout":1e400}`,
		`{"node":"node21","nonce":"0123456789ab","op":"list"}{}`,
		`{"op":"status","op":"list"}`, `[]`, `null`, `""`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := rpc.DecodeNodeRequest(body)
		if err != nil {
			var ne *rpc.NodeError
			if !errors.As(err, &ne) || ne.Status != http.StatusBadRequest || ne.Message == "" {
				t.Fatalf("refusal is not a 400 node error: %#v", err)
			}
			return
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		back, err := rpc.DecodeNodeRequest(again)
		if err != nil {
			t.Fatalf("an accepted request, encoded again, is refused: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normal(t, req), normal(t, back)) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, back)
		}
	})
}

// normal compares requests by their JSON (times and nil/empty slices
// compare by value).
func normal(t *testing.T, r rpc.NodeRequest) map[string]any {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}
