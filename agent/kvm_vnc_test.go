package agent

import (
	"context"
	"crypto/des"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
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
	return vncChallenge(t, c, password)
}

// vncChallenge answers VNC authentication's challenge with password and
// returns the server's SecurityResult (0: accepted).
func vncChallenge(t *testing.T, c io.ReadWriter, password string) uint32 {
	t.Helper()
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
	return securityResult(t, c)
}

// TestKVMVNC: a guest with vnc_bind_address 127.0.0.1 serves VNC on its
// network port (display port-5900), greeting RFB 3.8 without
// authentication; with vnc_password_file it offers VNC authentication
// only, and the file's password passes it (another does not). With
// vnc_tls and vnc_x509_path (certificates made here with crypto/x509) it
// offers VeNCrypt alone: x509none, whose TLS handshake verifies the
// server against the test's CA and carries the RFB session; with
// vnc_x509_verify and the password, x509vnc, refusing a client without a
// certificate and taking the password inside TLS from one with; without
// vnc_x509_path, anonymous TLS (tlsvnc). Missing credentials (each file
// named), a certificate QEMU cannot read, a relative path, verify
// without a path, TLS without a bind address; a missing, empty or too
// long password file, or no network port: each fails the start naming
// what is wrong, with no qemu left.
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

	// VNC over TLS with x509 credentials, no client certificate asked:
	// VeNCrypt's x509none alone; the server's certificate passes a real
	// TLS handshake against the test's CA, then the RFB session goes on
	// inside TLS to the desktop's name.
	certs := newVNCCerts(t, filepath.Join(dir, "vnc-x509"))
	delete(inst.HVParams, "vnc_password_file")
	inst.HVParams["vnc_tls"] = true
	inst.HVParams["vnc_x509_path"] = certs.dir
	expect(t, "start with VNC over TLS", true)(k.Start(ctx, inst))
	c, types = rfbHandshake(t, addr)
	if subs := veNCrypt(t, c, types); len(subs) != 1 || subs[0] != vencryptX509None {
		t.Errorf("VeNCrypt subtypes with x509 and no password: %v, want [%d] (x509none)", subs, vencryptX509None)
	}
	tc, err := vncTLS(t, c, vencryptX509None, &tls.Config{RootCAs: certs.pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS handshake with the VNC server: %v", err)
	}
	if r := securityResult(t, tc); r != 0 {
		t.Errorf("security result after TLS (x509none): %d, want 0", r)
	}
	if name, want := desktopName(t, tc), "QEMU ("+inst.Name+")"; name != want {
		t.Errorf("desktop name over TLS: %q, want %q", name, want)
	}
	tc.Close()
	// A client that trusts another CA refuses the server.
	c, types = rfbHandshake(t, addr)
	veNCrypt(t, c, types)
	if _, err := vncTLS(t, c, vencryptX509None, &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"}); err == nil {
		t.Error("a client without the test's CA accepted the VNC server's certificate")
	}
	c.Close()
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	waitPortFree(t, addr)

	// With vnc_x509_verify and a password: x509vnc alone; a client
	// without a certificate is refused, one with the CA's passes TLS, then
	// VNC authentication with the file's password (not another).
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inst.HVParams["vnc_password_file"] = pwFile
	inst.HVParams["vnc_x509_verify"] = true
	expect(t, "start with VNC over TLS, client certificates and a password", true)(k.Start(ctx, inst))
	c, types = rfbHandshake(t, addr)
	if subs := veNCrypt(t, c, types); len(subs) != 1 || subs[0] != vencryptX509VNC {
		t.Errorf("VeNCrypt subtypes with x509 and a password: %v, want [%d] (x509vnc)", subs, vencryptX509VNC)
	}
	tc, err = vncTLS(t, c, vencryptX509VNC, &tls.Config{RootCAs: certs.pool, ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3: the client's side of the handshake ends before the
		// server has checked the (missing) certificate; the server then
		// ends the session instead of sending the VNC challenge.
		tc.SetDeadline(time.Now().Add(time.Minute))
		var b [16]byte
		_, err = io.ReadFull(tc, b[:])
	}
	if err == nil {
		t.Error("a client without a certificate got the VNC challenge with vnc_x509_verify")
	}
	c.Close()
	for _, pw := range []string{"s3cret", "wrong"} {
		c, types = rfbHandshake(t, addr)
		veNCrypt(t, c, types)
		tc, err := vncTLS(t, c, vencryptX509VNC, &tls.Config{RootCAs: certs.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{certs.client}})
		if err != nil {
			t.Fatalf("TLS handshake with a client certificate: %v", err)
		}
		r := vncChallenge(t, tc, pw)
		if pw == "s3cret" && r != 0 {
			t.Errorf("VNC authentication over TLS with the file's password: result %d, want 0", r)
		}
		if pw != "s3cret" && r == 0 {
			t.Error("VNC authentication over TLS with another password passed")
		}
		tc.Close()
	}
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	waitPortFree(t, addr)

	// Anonymous TLS (vnc_tls without vnc_x509_path), with the password:
	// tlsvnc alone.
	delete(inst.HVParams, "vnc_x509_path")
	delete(inst.HVParams, "vnc_x509_verify")
	expect(t, "start with anonymous VNC TLS", true)(k.Start(ctx, inst))
	c, types = rfbHandshake(t, addr)
	if subs := veNCrypt(t, c, types); len(subs) != 1 || subs[0] != vencryptTLSVNC {
		t.Errorf("VeNCrypt subtypes with anonymous TLS and a password: %v, want [%d] (tlsvnc)", subs, vencryptTLSVNC)
	}
	c.Close()
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	waitPortFree(t, addr)

	// Credentials that are missing or that QEMU refuses, and TLS settings
	// that break the rules: refused naming what is wrong, nothing runs.
	inst.HVParams["vnc_x509_path"] = certs.dir
	for _, bad := range []struct {
		name   string
		change func(hv map[string]any) func()
		want   string
	}{
		{"no ca-cert.pem", hideFile(t, certs.dir, "ca-cert.pem"), "ca-cert.pem: open " + filepath.Join(certs.dir, "ca-cert.pem")},
		{"no server-cert.pem", hideFile(t, certs.dir, "server-cert.pem"), "server-cert.pem"},
		{"no server-key.pem", hideFile(t, certs.dir, "server-key.pem"), "server-key.pem"},
		{"no directory", func(hv map[string]any) func() {
			hv["vnc_x509_path"] = filepath.Join(dir, "no-such-dir")
			return func() { hv["vnc_x509_path"] = certs.dir }
		}, "vnc_x509_path " + filepath.Join(dir, "no-such-dir") + " on node"},
		{"a server certificate QEMU cannot read", func(hv map[string]any) func() {
			f := filepath.Join(certs.dir, "server-cert.pem")
			good, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(f, []byte("not a certificate\n"), 0o600)
			return func() { os.WriteFile(f, good, 0o600) }
		}, "qemu"},
		{"a relative path", func(hv map[string]any) func() {
			hv["vnc_x509_path"] = "vnc-x509"
			return func() { hv["vnc_x509_path"] = certs.dir }
		}, "not an absolute path"},
		{"verify without a path", func(hv map[string]any) func() {
			delete(hv, "vnc_x509_path")
			hv["vnc_x509_verify"] = true
			return func() { hv["vnc_x509_path"] = certs.dir; delete(hv, "vnc_x509_verify") }
		}, "vnc_x509_verify=true needs vnc_x509_path"},
		{"TLS without a bind address", func(hv map[string]any) func() {
			delete(hv, "vnc_bind_address")
			return func() { hv["vnc_bind_address"] = "127.0.0.1" }
		}, "vnc_tls=true needs vnc_bind_address"},
	} {
		undo := bad.change(inst.HVParams)
		_, err := k.Start(ctx, inst)
		undo()
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("start with %s: %v, want an error naming %q", bad.name, err, bad.want)
		}
		if pid := k.pid(inst.UUID); pid != 0 {
			t.Errorf("%s: qemu (pid %d) runs after a refused start", bad.name, pid)
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("%s: something listens on %s after a refused start", bad.name, addr)
		}
	}
	delete(inst.HVParams, "vnc_tls")
	delete(inst.HVParams, "vnc_x509_path")

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

// vncCerts are a test's VNC TLS credentials: in dir, QEMU's
// ca-cert.pem, server-cert.pem (for 127.0.0.1) and server-key.pem; the
// CA for clients to check the server by, and a client certificate the
// CA signed.
type vncCerts struct {
	dir    string
	pool   *x509.CertPool
	client tls.Certificate
}

// newVNCCerts makes a CA, a server certificate and a client certificate
// with crypto/x509, with the key usages QEMU's sanity check wants.
func newVNCCerts(t *testing.T, dir string) vncCerts {
	t.Helper()
	now := time.Now()
	serial := int64(0)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		var cert *x509.Certificate
		var kder []byte
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err == nil {
			cert, err = x509.ParseCertificate(der)
		}
		if err == nil {
			kder, err = x509.MarshalPKCS8PrivateKey(key)
		}
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	}
	ca, caKey, caPEM, _ := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "gnt test VNC CA"},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true}, nil, nil)
	_, _, srvPEM, srvKey := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca, caKey)
	_, _, cliPEM, cliKey := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "gnt test VNC client"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true}, ca, caKey)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca-cert.pem": caPEM, "server-cert.pem": srvPEM, "server-key.pem": srvKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	client, err := tls.X509KeyPair(cliPEM, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return vncCerts{dir: dir, pool: pool, client: client}
}

// veNCrypt picks VeNCrypt (RFB security type 19) on c, which must offer
// it alone, agrees on VeNCrypt 0.2 and returns the subtypes offered.
func veNCrypt(t *testing.T, c net.Conn, types []byte) []uint32 {
	t.Helper()
	if string(types) != "\x13" {
		t.Fatalf("security types %v, want [19] (VeNCrypt) alone", types)
	}
	if _, err := c.Write([]byte{19}); err != nil {
		t.Fatal(err)
	}
	var ver [2]byte
	if _, err := io.ReadFull(c, ver[:]); err != nil || ver != [2]byte{0, 2} {
		t.Fatalf("VeNCrypt version %v (%v), want 0.2", ver, err)
	}
	if _, err := c.Write(ver[:]); err != nil {
		t.Fatal(err)
	}
	var ack [2]byte // the version's acceptance, the subtypes' count
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != 0 || ack[1] == 0 {
		t.Fatalf("VeNCrypt version ack %v (%v), want 0 and a count", ack, err)
	}
	raw := make([]byte, 4*int(ack[1]))
	if _, err := io.ReadFull(c, raw); err != nil {
		t.Fatal(err)
	}
	var subs []uint32
	for i := 0; i < len(raw); i += 4 {
		subs = append(subs, binary.BigEndian.Uint32(raw[i:]))
	}
	return subs
}

// VeNCrypt subtypes (QEMU's names): anonymous TLS or x509, each
// without or with VNC authentication inside.
const (
	vencryptTLSNone  = 257
	vencryptTLSVNC   = 258
	vencryptX509None = 260
	vencryptX509VNC  = 261
)

// vncTLS chooses the VeNCrypt subtype sub on c and runs a TLS handshake
// with cfg; it returns the TLS connection, or the handshake's error.
func vncTLS(t *testing.T, c net.Conn, sub uint32, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], sub)
	if _, err := c.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil || ok[0] != 1 {
		t.Fatalf("VeNCrypt subtype %d: answer %v (%v), want 1 (accepted)", sub, ok, err)
	}
	tc := tls.Client(c, cfg)
	return tc, tc.Handshake()
}

// securityResult reads RFB's SecurityResult (0: accepted).
func securityResult(t *testing.T, c io.Reader) uint32 {
	t.Helper()
	var res [4]byte
	if _, err := io.ReadFull(c, res[:]); err != nil {
		t.Fatalf("VNC security result: %v", err)
	}
	return binary.BigEndian.Uint32(res[:])
}

// desktopName sends ClientInit on c and returns ServerInit's desktop
// name (QEMU's: "QEMU (<-name>)").
func desktopName(t *testing.T, c io.ReadWriter) string {
	t.Helper()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	init := make([]byte, 24) // width, height, pixel format, name length
	if _, err := io.ReadFull(c, init); err != nil {
		t.Fatalf("ServerInit: %v", err)
	}
	n := binary.BigEndian.Uint32(init[20:])
	if n > 1024 {
		t.Fatalf("ServerInit: desktop name of %d bytes", n)
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(c, name); err != nil {
		t.Fatalf("ServerInit's name: %v", err)
	}
	return string(name)
}

// hideFile is a change of TestKVMVNC's bad cases: name moved out of dir
// (and back by the function it returns).
func hideFile(t *testing.T, dir, name string) func(map[string]any) func() {
	return func(map[string]any) func() {
		p := filepath.Join(dir, name)
		if err := os.Rename(p, p+".away"); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := os.Rename(p+".away", p); err != nil {
				t.Fatal(err)
			}
		}
	}
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

// TestVNCTLSCreds: qemu's TLS credentials object of the VNC console:
// anonymous without a directory; x509 from it, verify-peer following
// vnc_x509_verify and a comma of the path written twice (QEMU's option
// syntax); each missing file named.
func TestVNCTLSCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vnc,x509")
	if got, err := vncTLSCreds("", false); err != nil || got != "tls-creds-anon,id=vnctls0,endpoint=server" {
		t.Errorf("anonymous: %q %v", got, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, name := range vncX509Files {
		_, err := vncTLSCreds(dir, false)
		if err == nil || !strings.HasPrefix(err.Error(), name+": ") || !strings.Contains(err.Error(), "need ca-cert.pem, server-cert.pem, server-key.pem there") {
			t.Errorf("with %v only: %v, want the error to name %s", vncX509Files[:i], err, name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	esc := strings.ReplaceAll(dir, ",", ",,")
	for verify, peer := range map[bool]string{false: "off", true: "on"} {
		want := "tls-creds-x509,id=vnctls0,endpoint=server,dir=" + esc + ",verify-peer=" + peer
		if got, err := vncTLSCreds(dir, verify); err != nil || got != want {
			t.Errorf("verify %v: %q %v, want %q", verify, got, err, want)
		}
	}
}
