package rpc_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

func TestDeriveKeyAndSign(t *testing.T) {
	ck := []byte("cluster key")
	m := hmac.New(sha256.New, ck)
	m.Write([]byte("gnt join v1"))
	if got := rpc.DeriveKey(ck, rpc.JoinKeyLabel); !hmac.Equal(got, m.Sum(nil)) {
		t.Fatalf("DeriveKey %x", got)
	}
	key := rpc.DeriveKey(ck, rpc.JoinKeyLabel)
	m = hmac.New(sha256.New, key)
	m.Write([]byte("1700000000\n{\"a\":1}"))
	want := hex.EncodeToString(m.Sum(nil))
	if got := rpc.Sign(key, 1700000000, []byte(`{"a":1}`)); got != want {
		t.Fatalf("Sign %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	key := rpc.DeriveKey([]byte("k"), rpc.JoinKeyLabel)
	now := time.Unix(1700000000, 0)
	body := []byte(`{"node":{}}`)
	sig := func(ts int64) string { return rpc.Sign(key, ts, body) }
	ts := func(n int64) string { return strconv.FormatInt(n, 10) }
	n := now.Unix()
	cases := []struct {
		name    string
		key     []byte
		ts, sig string
		body    []byte
		want    error
	}{
		{"good", key, ts(n), sig(n), body, nil},
		{"upper-case hex", key, ts(n), strings.ToUpper(sig(n)), body, nil},
		{"300 s behind", key, ts(n - 300), sig(n - 300), body, nil},
		{"300 s ahead", key, ts(n + 300), sig(n + 300), body, nil},
		{"301 s behind", key, ts(n - 301), sig(n - 301), body, rpc.ErrBadTimestamp},
		{"301 s ahead", key, ts(n + 301), sig(n + 301), body, rpc.ErrBadTimestamp},
		{"no timestamp", key, "", sig(n), body, rpc.ErrBadTimestamp},
		{"timestamp with plus", key, "+" + ts(n), sig(n), body, rpc.ErrBadTimestamp},
		{"timestamp with zero", key, "0" + ts(n), sig(n), body, rpc.ErrBadTimestamp},
		{"timestamp in ms", key, ts(n * 1000), rpc.Sign(key, n*1000, body), body, rpc.ErrBadTimestamp},
		{"huge timestamp", key, "9223372036854775807", sig(n), body, rpc.ErrBadTimestamp},
		{"tiny timestamp", key, "-9223372036854775808", sig(n), body, rpc.ErrBadTimestamp},
		{"no signature", key, ts(n), "", body, rpc.ErrBadSignature},
		{"short signature", key, ts(n), sig(n)[:10], body, rpc.ErrBadSignature},
		{"not hex", key, ts(n), strings.Repeat("zz", 32), body, rpc.ErrBadSignature},
		{"other timestamp signed", key, ts(n), sig(n - 1), body, rpc.ErrBadSignature},
		{"other body", key, ts(n), sig(n), []byte(`{"node":{ }}`), rpc.ErrBadSignature},
		{"other key", []byte("x"), ts(n), sig(n), body, rpc.ErrBadSignature},
		{"no key", nil, ts(n), sig(n), body, rpc.ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := rpc.Verify(tc.key, tc.ts, tc.sig, tc.body, now)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}
