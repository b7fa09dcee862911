package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/agent"
	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// The node agent: every gntd, candidate or not, serves the node RPC on
// Bind:AgentPort (1811) with its hypervisor driver.
//
// The driver is Config.Hypervisor: "kvm" (QEMU guests, records and
// runtime files under <data-dir>/agent/kvm/, disks under FileStorageDir
// and SharedFileStorageDir), "fake" (records under
// <data-dir>/agent/fake/) or "exec" (scripts in HooksDir, journal under
// <data-dir>/agent/exec/). Left empty it is fake with the dev profile
// (gntd dev and the test harness) and exec otherwise: a production gntd
// never pretends to run virtual machines, and without scripts every
// operation answers "not supported".
//
// The same listener serves the operator commands: the node RPC operations
// diagnose (run the self-diagnose collector, answer its signed report) and
// repair-command (run a whitelisted repair command), and an
// unauthenticated GET of rpc.DiagnoseReportPath, mond's report path,
// which runs nothing and answers the last collected report, signed (an Ok
// report when none was collected yet).

// Hypervisor drivers.
const (
	HypervisorFake = "fake"
	HypervisorExec = "exec"
	HypervisorKVM  = "kvm"
)

// DefaultOSSearchPath is where a node finds OS definitions unless
// configured otherwise (Config.OSSearchPath).
var DefaultOSSearchPath = osdef.DefaultSearchPath

// DefaultHooksDir is where the exec driver's scripts are looked for.
const DefaultHooksDir = "/etc/gnt/hypervisor"

// Default whitelist directories of the operator commands.
const (
	DefaultDiagnoseCommandsDir = agent.DefaultDiagnoseDir
	DefaultRepairCommandsDir   = agent.DefaultRepairDir
)

// agentDir is the agent's part of the data dir.
const agentDir = "agent"

// HypervisorName is the driver this configuration selects.
func (c *Config) HypervisorName() string {
	if c.Hypervisor != "" {
		return c.Hypervisor
	}
	if c.Profile == "dev" {
		return HypervisorFake
	}
	return HypervisorExec
}

// nodeKey is the node RPC key, nil while this gntd has no cluster key.
func (s *Server) nodeKey() []byte { return s.derivedKey(rpc.NodeKey) }

// diagnoseKey is the diagnose report key, nil while this gntd has no
// cluster key.
func (s *Server) diagnoseKey() []byte { return s.derivedKey(rpc.DiagnoseKey) }

// derivedKey is derive of the cluster key, nil while there is none.
func (s *Server) derivedKey(derive func(clusterKey []byte) []byte) []byte {
	s.mu.Lock()
	k := s.key
	s.mu.Unlock()
	if len(k) == 0 {
		return nil
	}
	return derive(k)
}

// newCommands builds the self-diagnose collector and the repair command
// runner from the configuration.
func (s *Server) newCommands() (*agent.Diagnoser, agent.Commands) {
	ddir, rdir := s.cfg.DiagnoseCommandsDir, s.cfg.RepairCommandsDir
	if ddir == "" {
		ddir = DefaultDiagnoseCommandsDir
	}
	if rdir == "" {
		rdir = DefaultRepairCommandsDir
	}
	diag := agent.NewDiagnoser(agent.DiagnoseConfig{
		Commands:    agent.Commands{Dir: ddir, Owner: s.cfg.commandOwner, Timeout: agent.DefaultDiagnoseTimeout},
		MinInterval: s.cfg.DiagnoseMinInterval.Duration,
	})
	return diag, agent.Commands{Dir: rdir, Owner: s.cfg.commandOwner, Timeout: agent.DefaultRepairTimeout}
}

// fileStorageDir is the node's file storage directory (default
// <data-dir>/file-storage).
func (s *Server) fileStorageDir() string {
	if s.cfg.FileStorageDir != "" {
		return s.cfg.FileStorageDir
	}
	return filepath.Join(s.cfg.DataDir, "file-storage")
}

// DefaultBootIDFile is where a node's boot id is read by default
// (--boot-id-file).
const DefaultBootIDFile = agent.DefaultBootIDFile

// DefaultVolumeGroup is the kvm driver's volume group for plain disks when
// none is configured (Ganeti's default).
const DefaultVolumeGroup = "xenvg"

// volumeGroup is the node's volume group for plain disks.
func (s *Server) volumeGroup() string {
	if s.cfg.VolumeGroup != "" {
		return s.cfg.VolumeGroup
	}
	return DefaultVolumeGroup
}

// driverDisks is where the node's driver keeps the disks of templates
// file, sharedfile and plain; "" where it keeps none (the fake and exec
// drivers keep their disks, if any, elsewhere, so placement counts their
// declared disk).
// noDRBD says why the node takes no drbd disks, asked at each storage
// report (a module loaded or set up later counts; nil for the fake and
// exec drivers, which simulate them or leave them to scripts).
type driverDisks struct {
	file, shared, vg string
	noDRBD           func() string
}

func (s *Server) driverDisks() driverDisks {
	if s.cfg.HypervisorName() != HypervisorKVM {
		return driverDisks{}
	}
	return driverDisks{file: s.fileStorageDir(), shared: s.cfg.SharedFileStorageDir, vg: s.volumeGroup(),
		noDRBD: func() string { return agent.KVMNoDRBD(s.cfg.Name) }}
}

// newDriver builds the configured hypervisor driver.
func (s *Server) newDriver() (agent.Driver, error) {
	dir := filepath.Join(s.cfg.DataDir, agentDir)
	osCfg := s.osConfig()
	switch s.cfg.HypervisorName() {
	case HypervisorKVM:
		fsDir := s.fileStorageDir()
		log := s.log.Named("kvm")
		k, err := agent.NewKVM(agent.KVMConfig{
			Dir: filepath.Join(dir, "kvm"), Node: s.cfg.Name, Addr: s.cfg.Bind,
			FileStorageDir: fsDir, SharedFileStorageDir: s.cfg.SharedFileStorageDir, VolumeGroup: s.volumeGroup(),
			Accel: s.cfg.KVMAccel,
			NetNS: s.cfg.KVMNetNS,
			Info:  log.Info, Warn: log.Warn, OS: &osCfg,
		})
		if err != nil {
			return nil, err
		}
		k.SetSend(s.sendHandoff)
		return k, nil
	case HypervisorFake:
		return agent.NewFake(agent.FakeConfig{
			Dir: filepath.Join(dir, "fake"), Node: s.cfg.Name, Delay: s.cfg.FakeDelay.Duration,
			Send:    s.sendHandoff,
			DiskDir: filepath.Join(dir, "fake-disks"), OS: &osCfg,
		})
	default:
		hooks := s.cfg.HooksDir
		if hooks == "" {
			hooks = DefaultHooksDir
		}
		if _, err := os.Stat(hooks); err != nil {
			s.log.Warn("exec driver: no hooks directory; every agent operation is unsupported", "hooks_dir", hooks, "error", err)
		}
		return agent.NewExec(agent.ExecConfig{
			HooksDir: hooks, StateDir: filepath.Join(dir, "exec"), Node: s.cfg.Name,
			Timeout: s.cfg.HookTimeout.Duration,
		})
	}
}

// sendHandoff carries a fake or kvm migration's handoff to the target's agent.
func (s *Server) sendHandoff(ctx context.Context, m agent.Migration, h agent.Handoff) error {
	key := s.nodeKey()
	if key == nil {
		return errors.New("this gntd has no cluster key")
	}
	_, err := rpc.NewNodeClientTLS(m.PeerNode, m.Peer, key, s.nodeTransport()).MigrateReceive(ctx, toNodeHandoff(h))
	return err
}

// startAgent binds the node RPC port and serves it until ctx ends; done is
// closed when the server has shut down.
func (s *Server) startAgent(ctx context.Context) (done <-chan struct{}, err error) {
	d, err := s.newDriver()
	if err != nil {
		return nil, fmt.Errorf("node agent: %w", err)
	}
	addr := net.JoinHostPort(s.cfg.Bind, strconv.Itoa(s.cfg.AgentPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node agent listener: %w", err)
	}
	diag, repair := s.newCommands()
	s.installDevOS()
	a := &agentAdapter{d: d, node: s.cfg.Name, diag: diag, repair: repair, reportKey: s.diagnoseKey, os: s.osConfig(),
		storage: agent.Storage{FileDirs: []string{s.fileStorageDir(), s.cfg.SharedFileStorageDir}}, disks: s.driverDisks(), bootIDFile: s.cfg.BootIDFile}
	ns := rpc.NewNodeServer(rpc.NodeServerOptions{
		Node: s.cfg.Name, Key: s.nodeKey, Accept: func() [][]byte { return s.otherKeys(rpc.NodeKey) }, Agent: a, Debug: s.cfg.Debug,
		Logger: s.log.Named("agent"),
	})
	mux := http.NewServeMux()
	mux.Handle(rpc.DiagnoseReportPath, rpc.DiagnoseReportHandler(a.lastReport))
	mux.Handle("/", ns.Handler())
	ln, srv := limitedServer(s.conns.agent, ln, mux, agentWriteTimeout)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		// Mutual TLS: only gntds of this cluster reach the agent; each
		// request is signed as well (rpc.NodeServer).
		go srv.Serve(tls.NewListener(ln, s.tls.store.ServerTLS(tls.RequireAndVerifyClientCert)))
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	s.log.Info("node agent started", "addr", addr, "hypervisor", d.Name())
	return ch, nil
}

// agentAdapter lets the node RPC server call a driver and the operator
// commands: rpc declares what it calls and cannot import agent, so the
// types are converted here.
type agentAdapter struct {
	d         agent.Driver
	node      string
	diag      *agent.Diagnoser
	repair    agent.Commands
	reportKey func() []byte
	// os is where the node's OS definitions are (os-list).
	os osdef.Config
	// storage lists the node's storage units (storage-list) and repairs
	// volume groups (storage-repair); disks says where the driver keeps
	// the disks of each template, for the leader's placement.
	storage agent.Storage
	disks   driverDisks
	// bootIDFile is where the node's boot id is read for each storage
	// report ("" agent.DefaultBootIDFile).
	bootIDFile string
	// repairMu runs one repair command at a time on this node (Ganeti's
	// restricted commands take a lock file).
	repairMu sync.Mutex
}

// report signs a collection as this node's report.
func (a *agentAdapter) report(c agent.Collected) (rpc.SignedDiagnoseReport, error) {
	r, err := rpc.NewDiagnoseReport(a.node, c.At, c.Diagnosis.Canonical)
	if err != nil {
		return r, err
	}
	return r.Sign(a.reportKey()), nil
}

// lastReport is what GET rpc.DiagnoseReportPath answers: the last
// collection, or an Ok report of now when there was none.
func (a *agentAdapter) lastReport() (rpc.SignedDiagnoseReport, error) {
	c, ok := a.diag.Last()
	if !ok {
		c = agent.Collected{Diagnosis: agent.OkDiagnosis("no self-diagnose result was collected yet"), At: time.Now()}
	}
	return a.report(c)
}

// commands serves the operator command operations.
func (a *agentAdapter) commands(ctx context.Context, req rpc.NodeRequest, out rpc.NodeResult) (rpc.NodeResult, error) {
	switch req.Op {
	case rpc.NodeOpDiagnose:
		c, err := a.diag.Collect(ctx, req.Command)
		if err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "self-diagnose: %v", err)
		}
		r, err := a.report(c)
		if err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "self-diagnose: %v", err)
		}
		out.Report = &r
		return out, nil
	default: // rpc.NodeOpRepairCommand
		a.repairMu.Lock()
		defer a.repairMu.Unlock()
		run, err := a.repair.Run(ctx, agent.OpRepairCommand, req.Command, []byte(req.Input))
		if errors.Is(err, agent.ErrCommandRefused) {
			return out, rpc.NewNodeError(rpc.NodeCodeNotAllowed, "repair command: %v", err)
		}
		if err != nil {
			return out, nodeError(err)
		}
		out.Changed, out.Output = true, run.Output
		return out, nil
	}
}

// Call implements rpc.NodeAgent.
func (a *agentAdapter) Call(ctx context.Context, req rpc.NodeRequest) (rpc.NodeResult, error) {
	out := rpc.NodeResult{Driver: a.d.Name()}
	if k, ok := a.d.(interface{ Accelerator() (string, string) }); ok {
		out.Accel, out.AccelNote = k.Accelerator()
	}
	if k, ok := a.d.(interface{ Taps() (bool, string) }); ok {
		ok, why := k.Taps()
		out.Taps = "no: " + why
		if ok {
			out.Taps = "yes: " + why
		}
	}
	var inst fsm.Instance
	if req.Instance != nil {
		inst = *req.Instance
	}
	mig := agent.Migration{ID: req.Migration, PeerNode: req.PeerNode, Peer: req.Peer}
	if req.UIDPool != nil {
		pool, e := fsm.UIDRangesFromJSON("uid_pool", req.UIDPool)
		if e != nil { // checked by DecodeNodeRequest already
			return out, rpc.NewNodeError(rpc.NodeCodeBadRequest, "%s", e.Msg)
		}
		ctx = agent.WithUIDPool(ctx, pool)
	}
	var (
		res agent.Result
		err error
	)
	switch req.Op {
	case rpc.NodeOpDiagnose, rpc.NodeOpRepairCommand:
		return a.commands(ctx, req, out)
	case rpc.NodeOpOSList:
		rep := osReport(a.os.Discover())
		out.OS = &rep
		return out, nil
	case rpc.NodeOpStorageList:
		rep, err := a.storage.List(ctx, "")
		if err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "storage units: %v", err)
		}
		ns := rpc.NodeStorageReport{Units: make([]rpc.NodeStorageUnit, 0, len(rep.Units)), Errors: rep.Errors,
			FileDir: a.disks.file, SharedFileDir: a.disks.shared, VG: a.disks.vg}
		if a.disks.noDRBD != nil {
			ns.NoDRBD = a.disks.noDRBD()
		}
		ns.BootID = agent.ReadBootID(a.bootIDFile)
		for _, u := range rep.Units {
			ns.Units = append(ns.Units, rpc.NodeStorageUnit{Type: u.Type, Name: u.Name, VG: u.VG, Size: u.SizeMiB, Used: u.UsedMiB, Free: u.FreeMiB, Allocatable: u.Allocatable})
		}
		out.Storage = &ns
		return out, nil
	case rpc.NodeOpStorageModify:
		o, err := a.storage.ModifyPV(ctx, req.StorageName, *req.Allocatable)
		switch {
		case errors.Is(err, agent.ErrNoLVM):
			return out, rpc.NewNodeError(rpc.NodeCodeNotFound, "no physical volume %s on %s: %v", req.StorageName, a.node, err)
		case errors.Is(err, agent.ErrNoSuchUnit):
			return out, rpc.NewNodeError(rpc.NodeCodeNotFound, "on %s: %v", a.node, err)
		case err != nil:
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "storage-modify: %v", err)
		}
		out.Changed, out.Output = true, o
		return out, nil
	case rpc.NodeOpStorageRepair:
		if err := agent.CheckVGName(req.StorageName); err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeBadRequest, "storage-repair: %v", err)
		}
		o, err := a.storage.RepairVG(ctx, req.StorageName)
		if errors.Is(err, agent.ErrNoLVM) {
			return out, rpc.NewNodeError(rpc.NodeCodeNotSupported, "storage-repair: %v on %s", err, a.node)
		}
		if err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "storage-repair: %v", err)
		}
		out.Changed, out.Output = true, o
		return out, nil
	case rpc.NodeOpBridgesExist:
		b, ok := a.d.(agent.BridgeChecker)
		if !ok {
			// The exec driver's scripts connect the NICs themselves:
			// there is nothing gntd can check for them.
			out.Output = fmt.Sprintf("the %s driver does not check bridges (its scripts connect the NICs)", a.d.Name())
			return out, nil
		}
		missing, err := b.MissingBridges(ctx, req.Bridges)
		if err != nil {
			return out, rpc.NewNodeError(rpc.NodeCodeFailed, "bridges-exist on %s: %v", a.node, err)
		}
		if len(missing) > 0 {
			out.MissingBridges = missing
		}
		return out, nil
	case rpc.NodeOpStatus:
		st, err := a.d.Status(ctx, inst)
		if err != nil {
			return out, nodeError(err)
		}
		ns := toNodeStatus(st)
		out.Status = &ns
		return out, nil
	case rpc.NodeOpList:
		sts, err := a.d.List(ctx)
		if err != nil {
			return out, nodeError(err)
		}
		out.Instances = make([]rpc.NodeInstanceStatus, 0, len(sts))
		for _, st := range sts {
			out.Instances = append(out.Instances, toNodeStatus(st))
		}
		return out, nil
	case rpc.NodeOpDebugFault:
		fake, ok := a.d.(*agent.Fake)
		if !ok {
			return out, rpc.NewNodeError(rpc.NodeCodeNotSupported, "debug-fault needs the fake driver, not %s", a.d.Name())
		}
		f := req.Fault
		if f.Clear {
			fake.ClearFaults()
		}
		if f.Op != "" || f.Instance != "" || f.Delay != "" || f.Hang || f.Error != "" {
			delay, _ := time.ParseDuration(f.Delay) // checked by the decoder
			fake.InjectFault(agent.Fault{Op: agent.Op(f.Op), Instance: f.Instance, Delay: delay, Hang: f.Hang,
				Err: f.Error, After: f.After, Times: f.Times})
			out.Changed = true
		}
		out.Changed = out.Changed || f.Clear
		for _, x := range fake.Faults() {
			out.Faults = append(out.Faults, rpc.NodeFault{Op: string(x.Op), Instance: x.Instance, Delay: durationString(x.Delay),
				Hang: x.Hang, Error: x.Err, After: x.After, Times: x.Times})
		}
		return out, nil
	case rpc.NodeOpStart:
		res, err = a.d.Start(ctx, inst)
	case rpc.NodeOpStop:
		res, err = a.d.Stop(ctx, inst, agent.StopOptions{Timeout: time.Duration(req.Timeout * float64(time.Second)), Force: req.Force})
	case rpc.NodeOpReboot:
		res, err = a.d.Reboot(ctx, inst, agent.RebootOptions{OpID: req.OpID, Type: req.RebootType,
			Timeout: time.Duration(req.Timeout * float64(time.Second)), Force: req.Force})
	case rpc.NodeOpRemove:
		res, err = a.d.Remove(ctx, inst)
	case rpc.NodeOpDiskCreate:
		res, err = a.d.DiskCreate(ctx, inst, req.Disk)
	case rpc.NodeOpDiskRemove:
		res, err = a.d.DiskRemove(ctx, inst, req.Disk)
	case rpc.NodeOpDiskAttach:
		res, err = a.d.DiskAttach(ctx, inst, req.Disk)
	case rpc.NodeOpDiskDetach:
		res, err = a.d.DiskDetach(ctx, inst, req.Disk)
	case rpc.NodeOpDiskReplace:
		res, err = a.d.DiskReplace(ctx, inst, req.Disk, req.OpID)
	case rpc.NodeOpDiskGrow:
		res, err = a.d.DiskGrow(ctx, inst, req.Disk)
	case rpc.NodeOpBalloon:
		if b, ok := a.d.(agent.Ballooner); ok {
			res, err = b.Balloon(ctx, inst, req.MemoryMiB)
		} else {
			err = fmt.Errorf("%w: the %s driver does not balloon; change maxmem and reboot the instance", agent.ErrNotSupported, a.d.Name())
		}
	case rpc.NodeOpOSInstall:
		res, err = a.d.InstallOS(ctx, inst, req.OpID)
	case rpc.NodeOpMigratePrepare:
		res, err = a.d.MigratePrepare(ctx, inst, mig)
	case rpc.NodeOpMigrateSend:
		res, err = a.d.MigrateSend(ctx, inst, mig)
	case rpc.NodeOpMigrateFinish:
		res, err = a.d.MigrateFinish(ctx, inst, mig)
	case rpc.NodeOpMigrateAbort:
		res, err = a.d.MigrateAbort(ctx, inst, mig)
	case rpc.NodeOpMigrateReceive:
		r, ok := a.d.(agent.Receiver)
		if !ok {
			return out, rpc.NewNodeError(rpc.NodeCodeNotSupported, "the %s driver migrates by itself; it takes no handoffs", a.d.Name())
		}
		res, err = r.MigrateReceive(ctx, toHandoff(*req.Handoff))
	default:
		return out, rpc.NewNodeError(rpc.NodeCodeUnknownOp, "unknown operation %q", req.Op)
	}
	if err != nil {
		return out, nodeError(err)
	}
	out.Changed, out.Output = res.Changed, res.Output
	return out, nil
}

// nodeError maps a driver error to its node RPC code.
func nodeError(err error) *rpc.NodeError {
	var oe *agent.OpError
	switch {
	case errors.Is(err, agent.ErrNotSupported):
		return rpc.NewNodeError(rpc.NodeCodeNotSupported, "%v", err)
	case errors.Is(err, agent.ErrNotFound):
		return rpc.NewNodeError(rpc.NodeCodeNotFound, "%v", err)
	case errors.Is(err, agent.ErrState):
		return rpc.NewNodeError(rpc.NodeCodeState, "%v", err)
	case errors.Is(err, agent.ErrInvalid):
		return rpc.NewNodeError(rpc.NodeCodeBadRequest, "%v", err)
	case errors.As(err, &oe):
		e := rpc.NewNodeError(rpc.NodeCodeFailed, "%s failed: %v", oe.Op, oe.Err)
		e.Output = oe.Output
		return e
	}
	return rpc.NewNodeError(rpc.NodeCodeFailed, "%v", err)
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func toNodeStatus(st agent.Status) rpc.NodeInstanceStatus {
	out := rpc.NodeInstanceStatus{UUID: st.UUID, Name: st.Name, State: string(st.State), OS: st.OS, BootID: st.BootID,
		Disks: make([]rpc.NodeDisk, 0, len(st.Disks)), MemoryMiB: st.MemoryMiB, VCPUs: st.VCPUs, Console: st.Console}
	for _, d := range st.Disks {
		out.Disks = append(out.Disks, rpc.NodeDisk{UUID: d.UUID, SizeMiB: d.SizeMiB, Attached: d.Attached, Generation: d.Generation, Path: d.Path, DRBD: d.DRBD})
	}
	if m := st.Migration; m != nil {
		out.Migration = &rpc.NodeMigration{ID: m.ID, Role: m.Role, Phase: m.Phase, PeerNode: m.PeerNode, Peer: m.Peer, Changed: m.Changed}
	}
	if l := st.LastOp; l != nil {
		out.LastOp = &rpc.NodeLastOp{Op: string(l.Op), OpID: l.OpID, At: l.At, Changed: l.Changed, Error: l.Error}
	}
	return out
}

func toNodeHandoff(h agent.Handoff) rpc.NodeHandoff {
	return rpc.NodeHandoff{Migration: h.Migration, Source: h.Source, Instance: h.Instance, BootID: h.BootID, OS: h.OS,
		MemoryMiB: h.MemoryMiB, Transferred: h.Transferred}
}

func toHandoff(h rpc.NodeHandoff) agent.Handoff {
	return agent.Handoff{Migration: h.Migration, Source: h.Source, Instance: h.Instance, BootID: h.BootID, OS: h.OS,
		MemoryMiB: h.MemoryMiB, Transferred: h.Transferred}
}
