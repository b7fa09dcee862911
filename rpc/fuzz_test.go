package rpc_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// checkAnswer checks what every answer must be: an error has a JSON body
// with a code, and the metadata headers are set.
func checkAnswer(t *testing.T, code int, header map[string][]string, body []byte) {
	t.Helper()
	if code >= 300 {
		var ae rpc.APIError
		if err := json.Unmarshal(body, &ae); err != nil || ae.ErrorCode == "" || ae.Status != code {
			t.Fatalf("error answer %d %q", code, body)
		}
	}
	if len(header[rpc.HeaderIndex]) == 0 {
		t.Fatalf("no %s header", rpc.HeaderIndex)
	}
}

// isObject reports whether body is one JSON object.
func isObject(body []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(body, &m) == nil && m != nil
}

func FuzzNodeModifyBody(f *testing.F) {
	for _, s := range []string{
		`{"offline":true}`, `{"drained":false,"auto_promote":true}`, `{"ndparams":{"ssh_port":22}}`,
		`{"secondary_ip":""}`, `{"bogus":1}`, `{`, `[]`, `null`, `"x"`, ``, `{"offline":true}{}`,
		`{"master_candidate":true,"force":true}`, `{"ndparams":{"ssh_port":1e400}}`,
	} {
		f.Add([]byte(s))
	}
	b := rpctest.NewCluster()
	addNodeF(f, b)
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(h, "PUT", "/2/nodes/node2/modify", body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code < 300 && !isObject(body) {
			t.Fatalf("garbage body %q accepted: %d %s", body, rec.Code, rec.Body)
		}
	})
}

func FuzzNodeRoleBody(f *testing.F) {
	for _, s := range []string{`"regular"`, `"drained"`, `"master"`, `"bogus"`, `5`, `{}`, ``, `"regular" 1`, `"\u0000"`} {
		f.Add([]byte(s), "1")
	}
	b := rpctest.NewCluster()
	addNodeF(f, b)
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	roles := map[string]bool{"regular": true, "master-candidate": true, "drained": true, "offline": true}
	f.Fuzz(func(t *testing.T, body []byte, force string) {
		rec := serve(h, "PUT", "/2/nodes/node2/role?force="+url.QueryEscape(force), body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code < 300 {
			var role string
			if json.Unmarshal(bytes.TrimSpace(body), &role) != nil || !roles[role] {
				t.Fatalf("garbage role %q accepted: %s", body, rec.Body)
			}
		}
	})
}

func FuzzSubmitJob(f *testing.F) {
	for _, s := range []string{
		`{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`, `{"ops":[]}`, `{"ops":[{"OP_ID":"OP_NOPE"}]}`,
		`{"ops":[{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}]}`, `{"ops":[1]}`, `{`, ``,
		`{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1,"reason":[["a","b",1]]}]}`,
	} {
		f.Add([]byte(s))
	}
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(h, "POST", "/2/jobs", body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code < 300 && !isObject(body) {
			t.Fatalf("garbage body %q accepted: %s", body, rec.Body)
		}
	})
}

func FuzzJoinRequest(f *testing.F) {
	b := rpctest.NewCluster()
	key := b.JoinKey()
	now := time.Now().Unix()
	good := []byte(`{"node":{"name":"node1","primary_ip":"192.0.2.1"}}`)
	ts := strconv.FormatInt(now, 10)
	f.Add(good, ts, rpc.Sign(key, now, good))
	f.Add(good, ts, "")
	f.Add(good, "x", rpc.Sign(key, now, good))
	f.Add([]byte(`{`), ts, rpc.Sign(key, now, []byte(`{`)))
	f.Add([]byte(`{"node":{"name":"bad name"}}`), ts, rpc.Sign(key, now, []byte(`{"node":{"name":"bad name"}}`)))
	f.Add(good, strconv.FormatInt(now-1000, 10), rpc.Sign(key, now-1000, good))
	fps := []byte(`{"node":{"name":"node1","primary_ip":"192.0.2.1"},"trust_fp":"` + strings.Repeat("0a", 32) + `","cert_issuer_fp":"XY"}`)
	f.Add(fps, ts, rpc.Sign(key, now, fps))
	ids := []byte(`{"node":{"name":"node1","primary_ip":"192.0.2.1"},"key_ids":["ab","cd","ef"]}`)
	f.Add(ids, ts, rpc.Sign(key, now, ids))
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		rec := serve(h, "POST", "/2/gnt/join", body, rpc.HeaderTimestamp, ts, rpc.HeaderSignature, sig)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		verr := rpc.Verify(key, ts, sig, body, time.Now())
		if rec.Code < 300 && (verr != nil || !isObject(body)) {
			t.Fatalf("accepted: body %q ts %q sig %q: %v", body, ts, sig, verr)
		}
		if verr != nil && rec.Code != 401 && rec.Code != 413 {
			t.Fatalf("bad signature answered %d", rec.Code)
		}
	})
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte("key"), int64(1700000000), []byte("body"), "", int64(0))
	f.Add([]byte(""), int64(-1), []byte{}, "00", int64(1<<62))
	f.Fuzz(func(t *testing.T, key []byte, ts int64, body []byte, sig string, skew int64) {
		ts %= 1 << 40 // a clock within some 35000 years of 1970
		now := time.Unix(ts, 0).Add(time.Duration(skew%600) * time.Second)
		tsh := strconv.FormatInt(ts, 10)
		good := rpc.Sign(key, ts, body)
		err := rpc.Verify(key, tsh, good, body, now)
		within := skew%600 >= -300 && skew%600 <= 300
		if (err == nil) != (within && len(key) > 0) {
			t.Fatalf("Verify of a good signature: %v (skew %d, key %d bytes)", err, skew%600, len(key))
		}
		if !strings.EqualFold(sig, good) && rpc.Verify(key, tsh, sig, body, now) == nil {
			t.Fatalf("forged signature %q accepted", sig)
		}
	})
}

func addNodeF(f *testing.F, b *rpctest.Backend) {
	resp, _, err := b.ApplyCommand(jobSubmit(b, `{"OP_ID":"OP_NODE_ADD","node_name":"node2","primary_ip":"192.0.2.2"}`))
	if err != nil || resp.Err != nil {
		f.Fatalf("adding node2: %v %v", err, resp.Err)
	}
}

// FuzzReinstallQuery: reinstall's legacy query (os, nostartup), with or
// without a body, is refused with a JSON error or becomes a job, never
// anything else; a body with fields and the query together are always
// refused (an empty one is no parameters, as in Ganeti).
func FuzzReinstallQuery(f *testing.F) {
	for _, s := range [][2]string{
		{"os=debian&nostartup=1", ""}, {"os=debian", ""}, {"nostartup=0", ""}, {"nostartup=maybe", ""},
		{"os=../../bin/sh", ""}, {"os=%00", ""}, {"os=debian", `{"start":true}`}, {"", `{"os":"debian"}`}, {"os=debian", `{}`},
		{"os=a&os=b", ""}, {"nostartup", ""},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	b := rpctest.NewCluster()
	if err := b.AddInstance(fsm.Instance{Name: "inst1", UUID: "u1", PrimaryNode: "x", OS: "debian", AdminState: "down",
		DiskTemplate: "diskless", Tags: []string{}}); err != nil {
		f.Fatal(err)
	}
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, query string, body []byte) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		rec := serve(h, "POST", "/2/instances/inst1/reinstall?"+q.Encode(), body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		legacy := q.Has("os") || q.Has("nostartup")
		var m map[string]json.RawMessage
		if rec.Code < 300 && legacy && json.Unmarshal(body, &m) == nil && len(m) > 0 {
			t.Fatalf("query %q and body %q both accepted: %d %s", query, body, rec.Code, rec.Body)
		}
	})
}
