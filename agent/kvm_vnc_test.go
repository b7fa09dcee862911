package agent

import (
	"context"
	"crypto/des"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rfbHandshake connects to a VNC server, checks its RFB 3.8 greeting,
// answers it, and returns the security types offered, with the open
// connection.
func rfbHandshake(t *testing.T, addr string) (net.Conn, []byte) {
	t.Helper()
	var c net.Conn
	var err error
	for end := time.Now().Add(time.Minute); ; {
		if c, err = net.Dial("tcp", addr); err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("VNC at %s: %v", addr, err)
	}
	c.SetDeadline(time.Now().Add(time.Minute))
	greet := make([]byte, 12)
	if _, err := io.ReadFull(c, greet); err != nil || string(greet) != "RFB 003.008\n" {
		c.Close()
		t.Fatalf("VNC at %s greets %q (%v), want %q", addr, greet, err, "RFB 003.008\n")
	}
	if _, err := c.Write(greet); err != nil {
		t.Fatal(err)
	}
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil || n[0] == 0 {
		c.Close()
		t.Fatalf("VNC security types: count %d (%v)", n[0], err)
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(c, types); err != nil {
		t.Fatal(err)
	}
	return c, types
}

// vncAuth runs VNC authentication (security type 2) with password on c
// and returns the server's SecurityResult (0: accepted).
func vncAuth(t *testing.T, c net.Conn, password string) uint32 {
	t.Helper()
	if _, err := c.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	challenge := make([]byte, 16)
	if _, err := io.ReadFull(c, challenge); err != nil {
		t.Fatalf("VNC challenge: %v", err)
	}
	// VNC's DES key: the password's bytes, each bit-reversed.
	key := make([]byte, 8)
	copy(key, password)
	for i, b := range key {
		var r byte
		for j := 0; j < 8; j++ {
			r |= (b >> j & 1) << (7 - j)
		}
		key[i] = r
	}
	block, err := des.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 16)
	block.Encrypt(resp[:8], challenge[:8])
	block.Encrypt(resp[8:], challenge[8:])
	if _, err := c.Write(resp); err != nil {
		t.Fatal(err)
	}
	var res [4]byte
	if _, err := io.ReadFull(c, res[:]); err != nil {
		t.Fatalf("VNC security result: %v", err)
	}
	return binary.BigEndian.Uint32(res[:])
}

// TestKVMVNC: a guest with vnc_bind_address 127.0.0.1 serves VNC on its
// network port (display port-5900), greeting RFB 3.8 without
// authentication; with vnc_password_file it offers VNC authentication
// only, and the file's password passes it (another does not); a missing,
// empty or too long password file, or no network port, fails the start
// naming what is wrong, with no qemu left.
func TestKVMVNC(t *testing.T) {
	kernel, initrd := needGuest(t)
	inst := guestInstance(kernel, initrd, "diskless")
	inst.HVParams["vnc_bind_address"] = "127.0.0.1"
	// The network port: one of loopback that nobody listens on now.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inst.NetworkPort = l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(inst.NetworkPort)
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()

	res := expect(t, "start with VNC", true)(k.Start(ctx, inst))
	t.Logf("start: %s", res.Output)
	c, types := rfbHandshake(t, addr)
	c.Close()
	if string(types) != "\x01" {
		t.Errorf("security types without a password: %v, want [1] (none)", types)
	}
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	waitPortFree(t, addr)

	pwFile := filepath.Join(dir, "vnc-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inst.HVParams["vnc_password_file"] = pwFile
	expect(t, "start with a VNC password", true)(k.Start(ctx, inst))
	c, types = rfbHandshake(t, addr)
	if string(types) != "\x02" {
		t.Errorf("security types with a password: %v, want [2] (VNC authentication)", types)
	}
	if r := vncAuth(t, c, "s3cret"); r != 0 {
		t.Errorf("VNC authentication with the file's password: result %d, want 0", r)
	}
	c.Close()
	c, _ = rfbHandshake(t, addr)
	if r := vncAuth(t, c, "wrong"); r == 0 {
		t.Error("VNC authentication with another password passed")
	}
	c.Close()
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	waitPortFree(t, addr)

	// Bad password files and a missing port: refused, nothing runs.
	for _, bad := range []struct {
		content string // "-": no file
		port    int
		want    string
	}{
		{"-", inst.NetworkPort, "vnc_password_file " + pwFile},
		{"", inst.NetworkPort, "empty"},
		{"123456789\n", inst.NetworkPort, "at most 8"},
		{"s3cret\n", 0, "no network port"},
	} {
		os.Remove(pwFile)
		if bad.content != "-" {
			if err := os.WriteFile(pwFile, []byte(bad.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		b := inst
		b.NetworkPort = bad.port
		_, err := k.Start(ctx, b)
		if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("start with password file %q, port %d: %v, want wrong state naming %q", bad.content, bad.port, err, bad.want)
		}
		if bad.port != 0 && !strings.Contains(err.Error(), pwFile) {
			t.Errorf("the error does not name the file %s: %v", pwFile, err)
		}
		if pid := k.pid(inst.UUID); pid != 0 {
			t.Errorf("qemu (pid %d) runs after a refused start", pid)
		}
		if st, err := k.Status(ctx, inst); err != nil || st.State != StateStopped {
			t.Errorf("status after a refused start: %+v %v", st, err)
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("something listens on %s after a refused start", addr)
		}
	}
	expect(t, "remove", true)(k.Remove(ctx, inst))
}

// waitPortFree waits until nothing listens on addr: a killed process's
// sockets close a moment after it is gone from /proc's view.
func waitPortFree(t *testing.T, addr string) {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(end) {
			t.Fatalf("%s still listens a minute after the stop", addr)
		}
	}
}

// TestParseVNCPassword: a password file holds one line of 1 to 8 bytes.
func TestParseVNCPassword(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{"secret\n", "secret", ""},
		{"secret", "secret", ""},
		{"12345678\r\n", "12345678", ""},
		{"", "", "empty"},
		{"\n", "", "empty"},
		{"123456789", "", "9 bytes; VNC takes at most 8"},
		{"a\nb\n", "", "more than one line"},
		{"a\x00b", "", "NUL"},
		{strings.Repeat("x", 5000), "", "over 4096 bytes"},
	} {
		got, err := parseVNCPassword([]byte(c.in))
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: %q %v, want an error with %q", c.in, got, err, c.err)
		}
	}
	if _, err := vncHost("no-such-if0"); err == nil {
		t.Error("vnc_bind_address of an interface the node lacks: accepted")
	}
	for in, want := range map[string]string{"127.0.0.1": "127.0.0.1", "::1": "[::1]", "0.0.0.0": "0.0.0.0", "lo": "127.0.0.1"} {
		if got, err := vncHost(in); err != nil || got != want {
			t.Errorf("vncHost(%q) = %q %v, want %q", in, got, err, want)
		}
	}
}

// FuzzParseVNCPassword: no file content crashes the parser, and what it
// accepts is one line of 1 to 8 bytes without NUL.
func FuzzParseVNCPassword(f *testing.F) {
	seeds := []string{"secret\n", "", "123456789", "a\nb", "x\r\n"}
	for k := range seeds {
		f.Add([]byte(seeds[k]))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pw, err := parseVNCPassword(b)
		if err != nil {
			return
		}
		if pw == "" || len(pw) > MaxVNCPassword || strings.ContainsAny(pw, "\n\r\x00") {
			t.Fatalf("%q accepted as %q", b, pw)
		}
	})
}
