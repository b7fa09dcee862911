package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// DevOptions configure `gntd dev`.
type DevOptions struct {
	DataDir     string // created if empty
	Binary      string // gntd executable for the children
	Candidates  int    // master candidates on 127.0.0.11, .12, ...
	Nodes       int    // plain nodes on 127.0.0.21, .22, ...
	ClusterName string
	// ServersFile, when set, receives the candidates' API addresses so that
	// `gnt` finds the cluster without flags; it is removed on exit.
	ServersFile string
	// KeyFile, when set, receives a copy of the cluster key so that
	// `gnt confd query` finds it without flags; it is removed on exit.
	KeyFile string
	// ClientDir, when set, receives the cluster CA certificate and an admin
	// client certificate (pki.WriteClientFiles), and the credentials file
	// of the RAPI user admin, so that gnt, curl and Ganeti's RAPI client
	// reach the API without flags; they are removed on exit.
	ClientDir string
	// OOBHelper is gnt-oob-fake, every node's OOB helper; empty means the
	// one beside Binary (none there: no OOB).
	OOBHelper string
	// Hypervisor is every member's driver: fake (the default) or kvm
	// (real QEMU guests; see devKVM).
	Hypervisor string
	// GuestDir holds the kvm guest's initramfs.cpio.gz (`make guest`);
	// empty means guest/ beside Binary.
	GuestDir string
	Out      io.Writer
}

// devKVMSetup is what a kvm dev cluster needs from this machine: QEMU,
// a kernel (the newest /boot/vmlinuz-*) and the guest's initramfs of
// `make guest`. Each missing piece is named with what installs it.
func devKVMSetup(o DevOptions) (kernel, initrd string, err error) {
	for _, p := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(p); err != nil {
			return "", "", fmt.Errorf("dev --hypervisor kvm: %s is not installed (apt-get install qemu-system-x86 qemu-utils)", p)
		}
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return "", "", errors.New("dev --hypervisor kvm: no kernel in /boot to boot the guests with (apt-get install linux-image-amd64)")
	}
	sort.Strings(ks)
	dir := o.GuestDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(o.Binary), "guest")
	}
	initrd, err = filepath.Abs(filepath.Join(dir, "initramfs.cpio.gz"))
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(initrd); err != nil {
		return "", "", fmt.Errorf("dev --hypervisor kvm: the guest's initramfs %s is missing: build it with `make guest` (needs busybox-static and cpio) or give --guest-dir", initrd)
	}
	return ks[len(ks)-1], initrd, nil
}

// devMaintParams are the maintd and repair settings of a dev cluster.
var devMaintParams = map[string]any{
	"maint_round_delay": 3, "maint_diagnose_interval": 2, "repair_dead_grace": 5, "repair_job_delay": 1,
}

// DevMember describes one child gntd in dev.json.
type DevMember struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // candidate or node
	Addrs any    `json:"addresses"`
	// PID is the pid dev started the member with; PIDFile (with the OOB
	// helper) holds the member's pid as it is now: gnt-oob-fake rewrites
	// it when a power-on starts the gntd again.
	PID     int      `json:"pid"`
	PIDFile string   `json:"pid_file,omitempty"`
	DataDir string   `json:"data_dir"`
	Command []string `json:"command"`
}

// DevInfo is the content of <data-dir>/dev.json.
type DevInfo struct {
	Cluster    string      `json:"cluster"`
	DataDir    string      `json:"data_dir"`
	Servers    []string    `json:"servers"`
	Supervisor int         `json:"supervisor_pid"`
	Members    []DevMember `json:"members"`
}

type devChild struct {
	member DevMember
	cmd    *exec.Cmd
	done   chan struct{}
}

// RunDev starts a whole cluster on this machine as separate gntd processes
// and supervises them until ctx ends; it never restarts a child.
func RunDev(ctx context.Context, o DevOptions) error {
	if o.Candidates < 1 || o.Candidates > 9 || o.Nodes < 0 || o.Nodes > 9 {
		return errors.New("dev: 1–9 candidates and 0–9 nodes")
	}
	if o.ClusterName == "" {
		o.ClusterName = "gnt-dev"
	}
	var kernel, initrd string
	switch o.Hypervisor {
	case "", "fake":
		o.Hypervisor = "fake"
	case "kvm":
		var err error
		if kernel, initrd, err = devKVMSetup(o); err != nil {
			return err
		}
	default:
		return fmt.Errorf("dev: --hypervisor %q: fake or kvm", o.Hypervisor)
	}
	if o.DataDir == "" {
		d, err := os.MkdirTemp("", "gnt-dev-")
		if err != nil {
			return err
		}
		o.DataDir = d
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return err
	}
	out := &syncWriter{w: o.Out}
	// Every member's OOB programs directory (devoob.go).
	// It must not be writable by group or others, whatever the umask.
	oobDir, err := filepath.Abs(devOOBProgramsDir(o))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(oobDir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(oobDir, 0o755); err != nil {
		return err
	}
	// Every member's iallocators directory (iallocator.go).
	iaDir, err := filepath.Abs(filepath.Join(o.DataDir, "iallocators"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(iaDir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(iaDir, 0o755); err != nil {
		return err
	}
	// A kvm cluster's sharedfile disks: one directory every member uses.
	shared, err := filepath.Abs(filepath.Join(o.DataDir, "shared-file-storage"))
	if err != nil {
		return err
	}
	if o.Hypervisor == "kvm" {
		if err := os.MkdirAll(shared, 0o700); err != nil {
			return err
		}
	}
	oobFake := newDevOOB(o, out)
	var (
		mu       sync.Mutex
		children []*devChild
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		stopChildren(children, out)
		oobFake.stopRestarted(children)
	}()
	var servers, joins []string
	type spec struct{ name, ip, role string }
	var specs []spec
	for i := 1; i <= o.Candidates; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		specs = append(specs, spec{fmt.Sprintf("node%d", 10+i), ip, "candidate"})
		servers = append(servers, fmt.Sprintf("%s:%d", ip, DefaultAPIPort))
	}
	for i := 1; i <= o.Nodes; i++ {
		specs = append(specs, spec{fmt.Sprintf("node%d", 20+i), fmt.Sprintf("127.0.0.%d", 20+i), "node"})
	}
	joins = servers
	// Refuse early when another cluster (say, an earlier `gntd dev`) holds
	// the addresses: otherwise its members would answer our requests.
	for _, sp := range specs {
		for _, port := range []int{DefaultAPIPort, DefaultRaftPort, DefaultGossipPort} {
			addr := fmt.Sprintf("%s:%d", sp.ip, port)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("dev: %s is in use (is another gntd dev or gntd agent running?): %w", addr, err)
			}
			ln.Close()
		}
	}
	start := func(sp spec) (*devChild, error) {
		dir := filepath.Join(o.DataDir, sp.name)
		// Each member's whitelisted command directories are in its data
		// dir, so a demo can give one node a self-diagnose script.
		diag, rep := filepath.Join(dir, "node-diagnose-commands"), filepath.Join(dir, "node-repair-commands")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		for _, d := range []string{diag, rep} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		args := []string{o.Binary, "agent", "--name", sp.name, "--bind", sp.ip, "--data-dir", dir,
			"--join", strings.Join(joins, ","), "--profile", "dev", "--hypervisor", o.Hypervisor,
			"--diagnose-commands-dir", diag, "--repair-commands-dir", rep, "--diagnose-min-interval", "1s",
			"--oob-programs-dir", oobDir, "--iallocators-dir", iaDir}
		if o.Hypervisor == "kvm" {
			args = append(args, "--shared-file-storage-dir", shared)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting %s: %w", sp.name, err)
		}
		oobFake.recordPID(sp.name, cmd.Process.Pid)
		c := &devChild{cmd: cmd, done: make(chan struct{}), member: DevMember{
			Name: sp.name, Role: sp.role, PID: cmd.Process.Pid, DataDir: dir, Command: args,
			Addrs: map[string]string{
				"api": fmt.Sprintf("%s:%d", sp.ip, DefaultAPIPort), "raft": fmt.Sprintf("%s:%d", sp.ip, DefaultRaftPort),
				"agent": fmt.Sprintf("%s:%d", sp.ip, DefaultAgentPort), "gossip": fmt.Sprintf("%s:%d", sp.ip, DefaultGossipPort),
				"confd": fmt.Sprintf("%s:%d", sp.ip, DefaultConfdPort), "maintd": fmt.Sprintf("%s:%d (leader only)", sp.ip, DefaultMaintdPort),
			},
		}}
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				out.Printf("[%s] %s\n", sp.name, sc.Text())
			}
		}()
		go func() {
			err := cmd.Wait()
			out.Printf("[dev] %s (pid %d) exited: %v; not restarting it\n", sp.name, c.member.PID, err)
			close(c.done)
		}()
		mu.Lock()
		children = append(children, c)
		mu.Unlock()
		return c, nil
	}

	first, err := start(specs[0])
	if err != nil {
		return err
	}
	// Until the cluster exists its first gntd serves a throw-away
	// certificate: init is accepted from this machine only.
	client := rpc.NewClientWith([]string{servers[0]}, rpc.ClientOptions{TLS: &tls.Config{InsecureSkipVerify: true}})
	if err := waitHTTP(ctx, servers[0], first.done); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := os.Stat(filepath.Join(first.member.DataDir, raftDir)); err != nil {
		// The demo shows repairs: maintd does harep's work here, which
		// a new cluster does not do unless asked.
		harep := true
		if err := client.Init(ictx, rpc.InitRequest{ClusterName: o.ClusterName, CandidatePoolSize: o.Candidates, MaintdHarep: &harep}); err != nil {
			return fmt.Errorf("dev: cluster init: %w", err)
		}
		out.Printf("[dev] maintd does harep's work (instance autorepair by tags) in this demo; a new cluster does not unless asked: gnt cluster modify --maintd-harep yes|no\n")
		key, err := os.ReadFile(filepath.Join(first.member.DataDir, keyFile))
		if err != nil {
			return err
		}
		if client, err = devAdminClient(first.member.DataDir, servers[:1], ""); err != nil {
			return err
		}
		for _, sp := range specs[1:] {
			dir := filepath.Join(o.DataDir, sp.name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if err := writeFileAtomic(filepath.Join(dir, keyFile), key, 0o600); err != nil {
				return err
			}
		}
		for _, sp := range specs[1:] {
			id, meta, err := client.AddNode(ictx, map[string]any{"node_name": sp.name, "primary_ip": sp.ip}, "gntd dev")
			if err != nil {
				return fmt.Errorf("dev: adding %s: %w", sp.name, err)
			}
			if _, err := client.WaitJob(ictx, id, meta.Index); err != nil {
				return fmt.Errorf("dev: adding %s: %w", sp.name, err)
			}
		}
		// Repair on a demo's time scale: rounds every few seconds, a dead
		// node repaired after 5 s, no minute-long harep delay.
		params := devMaintParams
		if o.Hypervisor == "kvm" {
			// Every kvm instance boots the test guest unless it says
			// otherwise. The default hypervisor is named: the cluster's
			// hvparams fill an instance's only under its hypervisor's name
			// (an instance that names none would get none of them).
			params = map[string]any{"default_hypervisor": "kvm", "hvparams": map[string]any{"kvm": map[string]any{
				"kernel_path": kernel, "initrd_path": initrd, "kernel_args": "quiet", "root_path": ""}}}
			for k, v := range devMaintParams {
				params[k] = v
			}
		}
		id, meta, err := client.ModifyCluster(ictx, params, "gntd dev: maintd timers")
		if err != nil {
			return fmt.Errorf("dev: maintd timers: %w", err)
		}
		if _, err := client.WaitJob(ictx, id, meta.Index); err != nil {
			return fmt.Errorf("dev: maintd timers: %w", err)
		}
	}
	for _, sp := range specs[1:] {
		if _, err := start(sp); err != nil {
			return err
		}
	}
	admin, err := devAdminClient(first.member.DataDir, servers, o.ClientDir)
	if err != nil {
		return err
	}
	if o.ClientDir != "" {
		defer func() {
			for _, f := range []string{pki.ClientCAFile, pki.ClientCertFile, pki.ClientKeyFile, devCredentialsFile} {
				os.Remove(filepath.Join(o.ClientDir, f))
			}
		}()
	}
	if err := devAdminUser(ictx, admin, o.ClientDir); err != nil {
		return err
	}
	out.Printf("[dev] waiting for %d voters...\n", o.Candidates)
	if err := waitVoters(ictx, admin, min(o.Candidates, 5)); err != nil {
		out.Printf("[dev] warning: %v\n", err)
	}
	mu.Lock()
	info := DevInfo{Cluster: o.ClusterName, DataDir: o.DataDir, Servers: servers, Supervisor: os.Getpid()}
	for _, c := range children {
		m := c.member
		if oobFake != nil {
			m.PIDFile = oobFake.pidFile(m.Name)
		}
		info.Members = append(info.Members, m)
	}
	mu.Unlock()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := oobFake.setUp(sctx, admin, info.Members); err != nil {
		out.Printf("[dev] warning: setting up gnt-oob-fake: %v\n", err)
	}
	scancel()
	data, _ := json.MarshalIndent(info, "", "  ")
	if err := writeFileAtomic(filepath.Join(o.DataDir, "dev.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if o.ServersFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.ServersFile), 0o755); err == nil {
			if err := os.WriteFile(o.ServersFile, []byte(strings.Join(servers, "\n")+"\n"), 0o644); err == nil {
				defer os.Remove(o.ServersFile)
			}
		}
	}
	if o.KeyFile != "" {
		if key, err := os.ReadFile(filepath.Join(first.member.DataDir, keyFile)); err == nil {
			if err := os.MkdirAll(filepath.Dir(o.KeyFile), 0o700); err == nil {
				if err := writeFileAtomic(o.KeyFile, key, 0o600); err == nil {
					defer os.Remove(o.KeyFile)
				}
			}
		}
	}
	out.Printf("\n[dev] cluster %q is up\n", o.ClusterName)
	out.Printf("[dev]   data dir:   %s\n", o.DataDir)
	out.Printf("[dev]   dev.json:   %s\n", filepath.Join(o.DataDir, "dev.json"))
	out.Printf("[dev]   API (RAPI): %s\n", strings.Join(servers, " "))
	for _, m := range info.Members {
		out.Printf("[dev]   %-7s %-9s pid %-7d %s\n", m.Name, m.Role, m.PID, m.Addrs.(map[string]string)["api"])
	}
	if o.Hypervisor == "kvm" {
		out.Printf("[dev] kvm: guests boot %s with %s; sharedfile disks in %s\n", kernel, initrd, shared)
		out.Printf("[dev] try: gnt instance add -t sharedfile --disk 16M --memory 128 --os-type gnt-image+default -n node12 --no-nics vm1 (more in docs/tour.md)\n")
	}
	out.Printf("[dev] try: gnt cluster info; gnt node list   (Ctrl-C stops everything)\n\n")
	<-ctx.Done()
	out.Printf("[dev] stopping\n")
	return nil
}

func stopChildren(children []*devChild, out *syncWriter) {
	for _, c := range children {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, c := range children {
		select {
		case <-c.done:
		case <-deadline:
			out.Printf("[dev] %s did not stop; killing it\n", c.member.Name)
			c.cmd.Process.Kill()
			<-c.done
		}
	}
}

// devAdminClient mints an admin client certificate from the CA in dataDir
// (the first candidate's) and returns a client of servers with it; with
// clientDir set it also writes the CA and the certificate there for gnt.
func devAdminClient(dataDir string, servers []string, clientDir string) (*rpc.Client, error) {
	ca, err := pki.LoadCAFromDir(dataDir)
	if err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	cert, key, err := pki.IssueAdmin(ca, "gntd-dev", time.Now())
	if err != nil {
		return nil, err
	}
	bundle, err := os.ReadFile(filepath.Join(dataDir, caCertFile))
	if err != nil {
		return nil, err
	}
	cfg, err := pki.OperatorTLS(bundle, cert, key)
	if err != nil {
		return nil, err
	}
	if clientDir != "" {
		if err := pki.WriteClientFiles(clientDir, bundle, cert, key); err != nil {
			return nil, fmt.Errorf("dev: %w", err)
		}
	}
	return rpc.NewClientWith(servers, rpc.ClientOptions{TLS: cfg}), nil
}

// devCredentialsFile is the CLI's credentials file in the client dir.
const devCredentialsFile = "credentials"

// devAdminUser gives the RAPI user "admin" write access and a new random
// password, and writes "admin PASSWORD" to clientDir's credentials file
// (mode 0600) for gnt and Ganeti's RAPI client.
func devAdminUser(ctx context.Context, c *rpc.Client, clientDir string) error {
	buf := make([]byte, 12)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	pw := hex.EncodeToString(buf)
	users, err := c.RAPIUsers(ctx)
	if err != nil {
		return fmt.Errorf("dev: RAPI users: %w", err)
	}
	exists := false
	for _, u := range users {
		exists = exists || u.Name == "admin"
	}
	if exists {
		err = c.SetRAPIUserPassword(ctx, "admin", pw)
	} else {
		err = c.AddRAPIUser(ctx, "admin", pw, true)
	}
	if err != nil {
		return fmt.Errorf("dev: RAPI user admin: %w", err)
	}
	if clientDir == "" {
		return nil
	}
	return writeFileAtomic(filepath.Join(clientDir, devCredentialsFile), []byte("admin "+pw+"\n"), 0o600)
}

// probeClient asks for /version without checking the certificate: only
// whether a gntd answers.
var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Proxy: nil}}

func waitHTTP(ctx context.Context, addr string, died <-chan struct{}) error {
	for i := 0; i < 300; i++ {
		resp, err := probeClient.Get("https://" + addr + "/version")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-died:
			return fmt.Errorf("gntd on %s exited during start-up", addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("gntd on %s did not answer within 15s", addr)
}

func waitVoters(ctx context.Context, c *rpc.Client, want int) error {
	for {
		peers, err := c.Peers(ctx)
		if err == nil {
			voters := 0
			for _, p := range peers {
				if p.Suffrage == "voter" {
					voters++
				}
			}
			if voters >= want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fewer than %d voters after 30s", want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}
