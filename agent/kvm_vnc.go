package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// The kvm driver's VNC console (Ganeti's vnc_bind_address,
// vnc_password_file): with vnc_bind_address set, qemu serves VNC on
// ADDR:DISPLAY, DISPLAY being the instance's network port (the cluster's
// pool, fsm/ports.go) less 5900, so it listens on that port. ADDR is the
// parameter's IP address, or the first address of the interface it names
// on the node (IPv4 first). With vnc_password_file, the file's password
// is read when qemu starts and set through QMP (set_password); qemu
// starts with password=on, so nobody connects before it is set. A file
// that is missing, unreadable, empty or longer than VNC's 8 bytes fails
// the start, naming the file, before anything runs.
//
// With vnc_tls (Ganeti's vnc_tls, vnc_x509_path, vnc_x509_verify), qemu
// gets a TLS credentials object and -vnc ...,tls-creds=vnctls0, so the
// console speaks VeNCrypt (RFB security type 19): with vnc_x509_path,
// QEMU's x509 credentials from that directory (-object
// tls-creds-x509,dir=PATH,endpoint=server,verify-peer=on|off; its
// ca-cert.pem, server-cert.pem and server-key.pem, each checked readable
// on the node before anything runs, the start refused naming the one
// missing), clients' certificates checked against ca-cert.pem with
// vnc_x509_verify; without it, anonymous TLS (tls-creds-anon: encrypted,
// the server not authenticated), as Ganeti has it. A password file adds
// VNC authentication inside the TLS session (VeNCrypt's x509vnc or
// tlsvnc).

// MaxVNCPassword is the longest VNC password: VNC authentication uses
// the first 8 bytes only, and a longer one would be cut without a word.
const MaxVNCPassword = 8

// maxVNCPasswordFile bounds what is read of a password file.
const maxVNCPasswordFile = 4096

// vncPlan is what a start adds for the VNC console: qemu's arguments
// and the password to set once it runs.
type vncPlan struct {
	args     []string
	password string
}

// planVNC checks the instance's VNC parameters and reads its password
// file; nil without vnc_bind_address.
func (k *KVM) planVNC(inst fsm.Instance, p kvmParams) (*vncPlan, error) {
	bind := p.str("vnc_bind_address")
	if bind == "" {
		// parseKVMParams refused vnc_tls without vnc_bind_address.
		return nil, nil
	}
	port := inst.NetworkPort
	if port <= fsm.VNCBasePort || port > 65535 {
		return nil, stateErr("instance %s has vnc_bind_address %s but no network port from the cluster's pool (network_port %d); it gets one when its record next changes", inst.Name, bind, port)
	}
	host, err := vncHost(bind)
	if err != nil {
		return nil, stateErr("vnc_bind_address %s on node %s: %v", bind, k.cfg.Node, err)
	}
	opts := host + ":" + strconv.Itoa(port-fsm.VNCBasePort)
	plan := &vncPlan{}
	if p.bool("vnc_tls") {
		creds, err := vncTLSCreds(p.str("vnc_x509_path"), p.bool("vnc_x509_verify"))
		if err != nil {
			return nil, stateErr("vnc_x509_path %s on node %s: %v", p.str("vnc_x509_path"), k.cfg.Node, err)
		}
		plan.args = append(plan.args, "-object", creds)
		opts += ",tls-creds=" + vncTLSID
	}
	if f := p.str("vnc_password_file"); f != "" {
		pw, err := readVNCPassword(f)
		if err != nil {
			return nil, stateErr("vnc_password_file %s on node %s: %v", f, k.cfg.Node, err)
		}
		plan.password = pw
		opts += ",password=on"
	}
	plan.args = append(plan.args, "-vnc", opts)
	return plan, nil
}

// vncTLSID is the id of the VNC console's TLS credentials object.
const vncTLSID = "vnctls0"

// vncX509Files are the files of vnc_x509_path that QEMU's x509
// credentials of a TLS server read: the CA certificate (which also
// checks the clients' certificates, with vnc_x509_verify), the server's
// certificate and its private key.
var vncX509Files = []string{"ca-cert.pem", "server-cert.pem", "server-key.pem"}

// vncTLSCreds is qemu's -object argument of the VNC console's TLS
// credentials: x509 from dir (each of vncX509Files checked readable),
// or anonymous without dir.
func vncTLSCreds(dir string, verify bool) (string, error) {
	if dir == "" {
		// parseKVMParams refused vnc_x509_verify without vnc_x509_path.
		return "tls-creds-anon,id=" + vncTLSID + ",endpoint=server", nil
	}
	for _, name := range vncX509Files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("%s: %v (QEMU's x509 credentials need %s there)", name, err, strings.Join(vncX509Files, ", "))
		}
		f.Close()
	}
	peer := "off"
	if verify {
		peer = "on"
	}
	// QEMU's option syntax: a comma in a value is written twice.
	return "tls-creds-x509,id=" + vncTLSID + ",endpoint=server,dir=" + strings.ReplaceAll(dir, ",", ",,") + ",verify-peer=" + peer, nil
}

// vncHost is the address qemu's -vnc takes for bind: an IP address
// (IPv6 in brackets), or the address of the interface so named.
func vncHost(bind string) (string, error) {
	ip := net.ParseIP(bind)
	if ip == nil {
		ifc, err := net.InterfaceByName(bind)
		if err != nil {
			return "", fmt.Errorf("neither an IP address nor an interface of this node: %v", err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("interface %s: %v", bind, err)
		}
		for _, want4 := range []bool{true, false} {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && (n.IP.To4() != nil) == want4 {
					ip = n.IP
					break
				}
			}
			if ip != nil {
				break
			}
		}
		if ip == nil {
			return "", fmt.Errorf("interface %s has no address", bind)
		}
	}
	if ip.To4() != nil {
		return ip.String(), nil
	}
	return "[" + ip.String() + "]", nil
}

// readVNCPassword reads a VNC password file: one line (its line break
// dropped) of 1 to MaxVNCPassword bytes, no NUL.
func readVNCPassword(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxVNCPasswordFile+1))
	if err != nil {
		return "", err
	}
	return parseVNCPassword(b)
}

// parseVNCPassword checks a password file's contents.
func parseVNCPassword(b []byte) (string, error) {
	if len(b) > maxVNCPasswordFile {
		return "", fmt.Errorf("over %d bytes: not a password file", maxVNCPasswordFile)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("empty: it must hold the password")
	case bytes.ContainsAny(b, "\n\r\x00"):
		return "", fmt.Errorf("holds more than one line or a NUL: it must hold the password alone")
	case len(b) > MaxVNCPassword:
		return "", fmt.Errorf("the password has %d bytes; VNC takes at most %d", len(b), MaxVNCPassword)
	}
	return string(b), nil
}

// setVNCPassword sets the running qemu's VNC password through QMP.
func (k *KVM) setVNCPassword(ctx context.Context, uuid, password string) error {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return qmpDo(qctx, k.qmpPath(uuid), func(q *qmpConn) error {
		return q.call(qctx, "set_password", map[string]any{"protocol": "vnc", "password": password}, nil)
	})
}
