package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/pki"
)

// TestNothingAnswers: with every address dead, the run ends after
// reachLimit (not --timeout's two minutes) naming each address tried and
// why; a write as well as a read.
func TestNothingAnswers(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	for _, args := range [][]string{{"cluster", "info"}, {"node", "remove", "n1", "-f"}} {
		r := gnt(t, nil, append([]string{"--server", a + "," + b}, args...)...)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1", args, r.code)
		}
		for _, want := range []string{"Failure: no server answered within 3s; tried " + a + ", " + b + "\n",
			"\n  " + a + ": dial tcp " + a + ": connect: connection refused\n", "\n  " + b + ": dial tcp "} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, r.stderr)
			}
		}
	}
}

// TestFailoverStaysAfterAConnection: once a server answered, a dead
// address is not reported; the live one serves.
func TestFailoverStaysAfterAConnection(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/info", 200, `{"name": "c1", "master": "n1"}`)
	r := gnt(t, nil, "--server", deadAddr(t)+","+deadAddr(t)+","+f.addr(), "cluster", "getmaster")
	if r.code != 0 || r.stdout != "n1\n" {
		t.Errorf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestWrongCA: a server whose certificate is of another CA is reported
// with the address, the handshake's failure and where the CA file is
// looked for.
func TestWrongCA(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the request should not get through the handshake")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "https://")
	var stdout, stderr bytes.Buffer
	env := map[string]string{"GNT_CA_FILE": caFile}
	err = runEnv(context.Background(), []string{"gnt", "--server", addr, "cluster", "info"},
		environment{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return env[k] }})
	if exitCode(err) != 1 {
		t.Errorf("exit %d, want 1", exitCode(err))
	}
	for _, want := range []string{"no server answered within 3s; tried " + addr + "\n", "  " + addr + ": TLS handshake: ",
		"certificate signed by unknown authority", "--ca-file"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestFailoverPastAHungServer: a first address that accepts connections
// but never finishes the TLS handshake holds the client past reachLimit;
// the second address, a live server, is still tried and answers.
func TestFailoverPastAHungServer(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Close() })
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"name": "c1", "master": "n1"}`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := map[string]string{"GNT_CA_FILE": caFile}
	err = runEnv(context.Background(), []string{"gnt", "--server", hung.Addr().String() + "," + strings.TrimPrefix(srv.URL, "https://"), "cluster", "getmaster"},
		environment{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return env[k] }})
	if err != nil || stdout.String() != "n1\n" {
		t.Errorf("err %v stdout %q stderr %q", err, stdout.String(), stderr.String())
	}
}
