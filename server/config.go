package server

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/agent"
	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/netlimit"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/transport"
)

// Default ports (per address); see ARCHITECTURE.md.
const (
	DefaultAgentPort  = 1811
	DefaultConfdPort  = 1814
	DefaultMaintdPort = 1816
	DefaultRaftPort   = 1817
	DefaultGossipPort = 1818
	DefaultAPIPort    = 5080
)

// Version is gntd's software version (rpc.Version, which the client
// shares).
const Version = rpc.Version

// Timing holds the Raft and background-loop timers. LAN is the default;
// Dev is shorter for a cluster on one machine.
type Timing struct {
	Heartbeat     time.Duration
	Election      time.Duration
	LeaderLease   time.Duration
	Commit        time.Duration
	JoinInterval  time.Duration // how often a gntd registers itself
	PoolInterval  time.Duration // candidate-pool keeper round
	Stabilization time.Duration // a non-voter must be healthy this long before promotion
	Snapshot      time.Duration // how often Raft checks whether a snapshot is due
	// Gossip is memberlist's failure detector (transport.LANGossipTiming
	// explains the values); GossipJoin is how often a gntd joins the
	// known gossip addresses where it sees no live member; Liveness is the
	// leader's full liveness round (it also runs on gossip events).
	Gossip     transport.GossipTiming
	GossipJoin time.Duration
	Liveness   time.Duration
	// Maintd is how often the leader's maintd plans (rounds are recorded
	// when due: see repair.Service).
	Maintd time.Duration
}

// LANTiming is tuned for candidates on one LAN (sub-millisecond RTT): a
// silent leader (a dead host, a partition, a paused process) is noticed
// after 200–400 ms and replaced within about half a second, where
// hashicorp/raft's defaults (1 s) take 2–4 s. A follower refuses votes
// while it still hears from a leader, so the election waits for the slower
// follower's timer too. A leader whose process died (its host's kernel
// ends its connections and refuses new ones) is replaced in about 150 ms:
// leaderLoss then shortens the timers to the 100 ms leader lease (make
// bench measures both).
//
// The commit timeout stays at Raft's 50 ms. It only matters when no new
// entries flow: then the leader sends every follower an empty append each
// 50–100 ms to tell it the commit index (under load each append carries
// it). At 10 ms those appends cost an idle leader 10 % of a core and its
// followers 3 % each (make bench, TestBenchIdle), for followers seeing the
// last write of a burst about 60 ms sooner (its commit index comes after
// 1–2 commit timeouts).
func LANTiming() Timing {
	return Timing{
		Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond,
		LeaderLease: 100 * time.Millisecond, Commit: 50 * time.Millisecond,
		JoinInterval: 5 * time.Second, PoolInterval: 2 * time.Second, Stabilization: 5 * time.Second,
		Snapshot: 10 * time.Second,
		Gossip:   transport.LANGossipTiming(), GossipJoin: 30 * time.Second, Liveness: 5 * time.Second,
		Maintd: time.Second,
	}
}

// DevTiming is LANTiming with faster background loops, for `gntd dev`.
func DevTiming() Timing {
	t := LANTiming()
	t.JoinInterval, t.PoolInterval, t.Stabilization, t.Snapshot = time.Second, 500*time.Millisecond, time.Second, time.Second
	t.GossipJoin, t.Liveness, t.Maintd = 5*time.Second, time.Second, 500*time.Millisecond
	return t
}

// Config is everything one gntd needs; cmd/gntd fills it from flags or a
// JSON file.
type Config struct {
	Name       string   `json:"name"`
	Bind       string   `json:"bind"` // IP address every listener binds and every dialer uses
	DataDir    string   `json:"data_dir"`
	APIPort    int      `json:"api_port"`
	RaftPort   int      `json:"raft_port"`
	AgentPort  int      `json:"agent_port"`
	GossipPort int      `json:"gossip_port"`
	ConfdPort  int      `json:"confd_port"`
	MaintdPort int      `json:"maintd_port"`
	Join       []string `json:"join"` // API addresses of candidates to register with
	// Profile selects the timers: "lan" (default) or "dev".
	Profile string `json:"profile"`
	// ExecutorConcurrency bounds the jobs the leader runs at once.
	ExecutorConcurrency int `json:"executor_concurrency"`
	// JobArchiveAge is how long finished jobs stay in the active queue
	// before the leader archives them (0 disables automatic archiving).
	JobArchiveAge Duration `json:"job_archive_age"`
	// LogLevel is "LEVEL[,SUBSYSTEM=LEVEL...]" (ParseLogLevels); LogJSON
	// writes JSON lines instead of text.
	LogLevel string `json:"log_level"`
	LogJSON  bool   `json:"log_json"`
	// MemoryLimit is gntd's soft memory limit (ParseSize's form; "0":
	// none); GOMEMLIMIT in the environment wins. See MemorySettings.
	MemoryLimit string `json:"memory_limit"`
	// Commit is the commit gntd was built from (set by cmd/gntd, not
	// read from a config file), for gnt_build_info.
	Commit string `json:"-"`
	// Build is gntd's version with its commit and build date (set by
	// cmd/gntd), for /2/info and /2/gnt/status.
	Build string `json:"-"`
	// Debug serves Go's profiler under /debug/pprof/ on the API port, and
	// accepts and runs debugging opcodes (OP_TEST_CRASH).
	Debug bool `json:"debug"`
	// SnapshotThreshold and TrailingLogs override Raft's (0: 8192 and
	// 10240); tests lower them to exercise snapshot installation.
	SnapshotThreshold uint64 `json:"raft_snapshot_threshold"`
	TrailingLogs      uint64 `json:"raft_trailing_logs"`
	// Resources overrides what the node reports (0 = detect).
	Resources fsm.Resources `json:"resources"`
	// Hypervisor is the node agent's driver, "fake" or "exec"; empty
	// means fake with the dev profile and exec otherwise (agent.go).
	Hypervisor string `json:"hypervisor"`
	// HooksDir holds the exec driver's scripts (default DefaultHooksDir);
	// HookTimeout bounds one script run (0: 5 minutes).
	HooksDir    string   `json:"hooks_dir"`
	HookTimeout Duration `json:"hook_timeout"`
	// FakeDelay is how long each operation of the fake driver takes.
	FakeDelay Duration `json:"fake_delay"`
	// KVMAccel forces the kvm driver's accelerator ("kvm" or "tcg"; empty:
	// probe). FileStorageDir and SharedFileStorageDir hold its disks of
	// templates file (default <data-dir>/file-storage) and sharedfile
	// (empty: refused).
	KVMAccel string `json:"kvm_accel"`
	// KVMNetNS, when set, is the network namespace (ip netns) the kvm
	// driver runs the guests and their taps in; empty: the node's own.
	KVMNetNS             string `json:"kvm_netns"`
	FileStorageDir       string `json:"file_storage_dir"`
	SharedFileStorageDir string `json:"shared_file_storage_dir"`
	// VolumeGroup is the LVM volume group of the kvm driver's disks of
	// template plain (empty: DefaultVolumeGroup).
	VolumeGroup string `json:"volume_group"`
	// DiagnoseCommandsDir and RepairCommandsDir are the whitelist
	// directories of the self-diagnose and the repair commands (default
	// agent.DefaultDiagnoseDir and agent.DefaultRepairDir).
	DiagnoseCommandsDir string `json:"diagnose_commands_dir"`
	RepairCommandsDir   string `json:"repair_commands_dir"`
	// DiagnoseMinInterval is the shortest time between two runs of the
	// self-diagnose command (0: agent.DefaultDiagnoseMinInterval).
	DiagnoseMinInterval Duration `json:"diagnose_min_interval"`
	// OSSearchPath lists the directories of OS definitions (default
	// osdef.DefaultSearchPath; in the dev profile <data-dir>/os, holding
	// the shipped gnt-image, comes first).
	OSSearchPath []string `json:"os_search_path"`
	// OOBProgramsDir is the whitelist directory of the OOB helpers
	// (default oob.DefaultProgramsDir): an oob_program outside it is
	// refused when it is set through this gntd and before this gntd, as
	// leader, runs it.
	OOBProgramsDir string `json:"oob_programs_dir"`
	// BootIDFile is where the node's boot id is read (default
	// agent.DefaultBootIDFile): the leader takes a change of it for a
	// reboot and re-activates the disks of the drbd instances the node is
	// the secondary of.
	BootIDFile string `json:"boot_id_file"`
	// IAllocatorsDir is the directory of the external allocators this
	// gntd may run as leader (default iallocator.DefaultDir), whitelisted
	// as the OOB helpers are; IAllocatorTimeout bounds one run (0:
	// iallocator.DefaultTimeout).
	IAllocatorsDir    string   `json:"iallocators_dir"`
	IAllocatorTimeout Duration `json:"iallocator_timeout"`
	// MaxConns and MaxConnsPerIP cap the connections each TCP server of
	// this gntd (API, node RPC, maintd) keeps open at once, overall and
	// from one client address (0: netlimit.DefaultMaxConns and
	// netlimit.DefaultMaxConnsPerIP; -1: no cap). An overall cap above
	// what the descriptor limit leaves is lowered at start (netlimits.go).
	MaxConns      int `json:"max_conns"`
	MaxConnsPerIP int `json:"max_conns_per_ip"`
	// Rejoin lets a gntd whose Raft state was lost start: it asks the
	// leader to remove it from the Raft configuration and rejoins as a
	// fresh non-voter (amnesia.go). A command-line choice, not a setting.
	Rejoin bool `json:"-"`

	// commandOwner is the uid that must own the whitelisted commands: 0
	// (root); tests that do not run as root set their own.
	commandOwner int
}

// DefaultConfig returns a Config with the default ports and LAN timing.
func DefaultConfig() Config {
	return Config{
		DataDir: "/var/lib/gnt", APIPort: DefaultAPIPort, RaftPort: DefaultRaftPort,
		AgentPort: DefaultAgentPort, GossipPort: DefaultGossipPort, ConfdPort: DefaultConfdPort,
		MaintdPort: DefaultMaintdPort, Profile: "lan", ExecutorConcurrency: jobs.DefaultConcurrency, LogLevel: "info", MemoryLimit: DefaultMemoryLimit,
		MaxConns: netlimit.DefaultMaxConns, MaxConnsPerIP: netlimit.DefaultMaxConnsPerIP,
		JobArchiveAge: Duration{jobs.DefaultArchiveAge},
	}
}

// LoadConfigFile merges a JSON config file into c (fields absent from the
// file keep their values). Unknown fields are refused (ParseConfig).
func LoadConfigFile(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := ParseConfig(data, c); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// MaxConfigBytes bounds a config file.
const MaxConfigBytes = 1 << 20

// ParseConfig merges a JSON config document into c; on an error c is
// unchanged. Keys of the top-level object that start with "//" are
// comments (JSON has none): their values are ignored, whatever they are.
// Any other unknown key is refused, naming it.
func ParseConfig(data []byte, c *Config) error {
	if len(data) > MaxConfigBytes {
		return fmt.Errorf("%d bytes: larger than the limit of %d", len(data), MaxConfigBytes)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err == nil {
		stripped := false
		for k := range top {
			if strings.HasPrefix(k, "//") {
				delete(top, k)
				stripped = true
			}
		}
		if stripped {
			if data, err = json.Marshal(top); err != nil {
				return err
			}
		}
	}
	next := *c
	if err := fsm.DecodeStrict(data, &next); err != nil {
		return err
	}
	*c = next
	return nil
}

// Validate checks the configuration and names what is wrong.
func (c *Config) Validate() error {
	if _, err := ParseLogLevels(c.LogLevel); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if c.MemoryLimit != "" {
		if _, err := ParseSize(c.MemoryLimit); err != nil {
			return fmt.Errorf("--memory-limit: %w", err)
		}
	}
	if e := fsm.ValidateHostname("name", c.Name); e != nil {
		return fmt.Errorf("--name: %s", e.Msg)
	}
	ip := net.ParseIP(c.Bind)
	if ip == nil {
		return fmt.Errorf("--bind %q is not an IP address", c.Bind)
	}
	if c.DataDir == "" {
		return fmt.Errorf("--data-dir must not be empty")
	}
	for name, p := range map[string]int{"api": c.APIPort, "raft": c.RaftPort, "agent": c.AgentPort, "gossip": c.GossipPort, "confd": c.ConfdPort, "maintd": c.MaintdPort} {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("--%s-port %d is out of range", name, p)
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("--join %q: want host:port", j)
		}
	}
	switch c.Profile {
	case "", "lan", "dev":
	default:
		return fmt.Errorf("--profile %q: want lan or dev", c.Profile)
	}
	if c.ExecutorConcurrency <= 0 {
		return fmt.Errorf("--executor-concurrency must be positive, got %d", c.ExecutorConcurrency)
	}
	switch c.Hypervisor {
	case "", HypervisorFake, HypervisorExec, HypervisorKVM:
	default:
		return fmt.Errorf("--hypervisor %q: want kvm, fake or exec", c.Hypervisor)
	}
	switch c.KVMAccel {
	case "", "kvm", "tcg":
	default:
		return fmt.Errorf("--kvm-accel %q: want kvm or tcg (or nothing: probe)", c.KVMAccel)
	}
	if c.KVMNetNS != "" && (len(c.KVMNetNS) > 255 || strings.ContainsAny(c.KVMNetNS, "/ \t\n") || c.KVMNetNS == "." || c.KVMNetNS == "..") {
		return fmt.Errorf("--kvm-netns %q: want the name of a network namespace (ip netns list; at most 255 characters, no slash or space)", c.KVMNetNS)
	}
	for _, d := range []struct{ flag, v string }{{"--file-storage-dir", c.FileStorageDir}, {"--shared-file-storage-dir", c.SharedFileStorageDir}} {
		if d.v != "" && (!filepath.IsAbs(d.v) || filepath.Clean(d.v) != d.v) {
			return fmt.Errorf("%s %q: want a clean absolute path", d.flag, d.v)
		}
	}
	if c.VolumeGroup != "" {
		if err := agent.CheckVGName(c.VolumeGroup); err != nil {
			return fmt.Errorf("--volume-group: %v", err)
		}
	}
	if c.HookTimeout.Duration < 0 || c.FakeDelay.Duration < 0 {
		return fmt.Errorf("--hook-timeout and --fake-delay must not be negative")
	}
	if c.DiagnoseMinInterval.Duration < 0 {
		return fmt.Errorf("--diagnose-min-interval must not be negative, got %s", c.DiagnoseMinInterval.Duration)
	}
	if c.JobArchiveAge.Duration < 0 {
		return fmt.Errorf("--job-archive-age must not be negative, got %s", c.JobArchiveAge.Duration)
	}
	if c.OOBProgramsDir != "" && (!filepath.IsAbs(c.OOBProgramsDir) || filepath.Clean(c.OOBProgramsDir) != c.OOBProgramsDir) {
		return fmt.Errorf("--oob-programs-dir %q: want a clean absolute path", c.OOBProgramsDir)
	}
	if c.BootIDFile != "" && (!filepath.IsAbs(c.BootIDFile) || filepath.Clean(c.BootIDFile) != c.BootIDFile) {
		return fmt.Errorf("--boot-id-file %q: want a clean absolute path", c.BootIDFile)
	}
	if err := osdef.CheckSearchPath(c.OSSearchPath); err != nil {
		return fmt.Errorf("--os-search-path: %v", err)
	}
	if c.IAllocatorsDir != "" && (!filepath.IsAbs(c.IAllocatorsDir) || filepath.Clean(c.IAllocatorsDir) != c.IAllocatorsDir) {
		return fmt.Errorf("--iallocators-dir %q: want a clean absolute path", c.IAllocatorsDir)
	}
	if c.IAllocatorTimeout.Duration < 0 || c.IAllocatorTimeout.Duration > time.Hour {
		return fmt.Errorf("--iallocator-timeout must be 0 (60s) to 1h, got %s", c.IAllocatorTimeout.Duration)
	}
	if c.MaxConns < -1 || c.MaxConnsPerIP < -1 {
		return fmt.Errorf("--max-conns (%d) and --max-conns-per-ip (%d) must be positive, 0 for the default or -1 for no cap", c.MaxConns, c.MaxConnsPerIP)
	}
	if err := c.connLimits().Validate(); err != nil {
		return fmt.Errorf("--max-conns-per-ip and --max-conns: %w", err)
	}
	return nil
}

// connLimits are the configured connection caps of each TCP server.
func (c *Config) connLimits() netlimit.Limits {
	return netlimit.Limits{MaxConns: c.MaxConns, MaxConnsPerIP: c.MaxConnsPerIP}
}

// Timing returns the timers of the configured profile.
func (c *Config) Timing() Timing {
	if c.Profile == "dev" {
		return DevTiming()
	}
	return LANTiming()
}

func (c *Config) addr(port int) string { return net.JoinHostPort(c.Bind, strconv.Itoa(port)) }

// APIAddr is host:port of the API.
func (c *Config) APIAddr() string { return c.addr(c.APIPort) }

// MaintdAddr is host:port of maintd's HTTP API (leader only).
func (c *Config) MaintdAddr() string { return c.addr(c.MaintdPort) }

// RaftAddr is host:port of Raft.
func (c *Config) RaftAddr() string { return c.addr(c.RaftPort) }

// Addrs are the addresses this gntd registers.
func (c *Config) Addrs() fsm.Addrs {
	return fsm.Addrs{
		API: c.APIAddr(), Raft: c.RaftAddr(), Agent: c.addr(c.AgentPort),
		Gossip: c.addr(c.GossipPort), Confd: c.addr(c.ConfdPort),
	}
}

// Duration is a time.Duration written in JSON as a string such as "6h".
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string such as "90s" or "6h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"6h\" or \"90s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %v", s, err)
	}
	d.Duration = v
	return nil
}
