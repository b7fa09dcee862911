// Command gntd is gnt's daemon: `gntd agent` runs one node (a master
// candidate or a plain node) and `gntd dev` runs a whole cluster of child
// gntd processes on this machine.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/buildinfo"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gntd:", err)
		os.Exit(1)
	}
}

// commit is the commit gntd was built from, set by `make build` with
// -ldflags -X main.commit=... (see rpc.VersionText).
var commit string

// buildDate is when gntd was built, set by `make build` with -ldflags -X
// main.buildDate=... (see buildinfo.Text).
var buildDate string

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	app := &cli.App{
		Name:      "gntd",
		Usage:     "the gnt cluster daemon",
		Writer:    stdout,
		ErrWriter: stderr,
		Version:   buildinfo.Text(commit, buildDate),
		// `gntd ... --generate-bash-completion` (dist/bash-completion).
		EnableBashCompletion: true,
		Commands:             []*cli.Command{agentCommand(), devCommand(), recoverCommand()},
	}
	return app.RunContext(ctx, args)
}

func agentCommand() *cli.Command {
	d := server.DefaultConfig()
	return &cli.Command{
		Name:  "agent",
		Usage: "run this machine's gntd",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "JSON config file (flags given on the command line win)"},
			&cli.StringFlag{Name: "name", Usage: "node name"},
			&cli.StringFlag{Name: "bind", Usage: "IP address to listen on and dial from"},
			&cli.StringFlag{Name: "data-dir", Value: d.DataDir},
			&cli.IntFlag{Name: "api-port", Value: d.APIPort},
			&cli.IntFlag{Name: "raft-port", Value: d.RaftPort},
			&cli.IntFlag{Name: "agent-port", Value: d.AgentPort},
			&cli.IntFlag{Name: "gossip-port", Value: d.GossipPort},
			&cli.IntFlag{Name: "confd-port", Value: d.ConfdPort},
			&cli.IntFlag{Name: "maintd-port", Value: d.MaintdPort, Usage: "maintd's HTTP API, on the leader only"},
			&cli.StringFlag{Name: "join", Usage: "comma-separated API addresses of candidates to register with"},
			&cli.BoolFlag{Name: "rejoin", Usage: "this candidate lost its Raft state: have the leader remove it from the Raft group, and rejoin as a non-voter that catches up before it votes"},
			&cli.StringFlag{Name: "profile", Value: d.Profile, Usage: "timers: lan or dev"},
			&cli.StringFlag{Name: "log-level", Value: d.LogLevel, Usage: "LEVEL[,SUBSYSTEM=LEVEL...], e.g. info,raft=debug,api=warn (trace, debug, info, warn, error, off)"},
			&cli.BoolFlag{Name: "log-json", Usage: "log JSON lines instead of text"},
			&cli.StringFlag{Name: "memory-limit", Value: d.MemoryLimit, Usage: "soft memory limit, a target for the resident set (e.g. 200MiB, 1GiB; 0: none): Go's own limit is it less the resident pages of mapped files; the garbage collector works harder near it; GOMEMLIMIT in the environment wins"},
			&cli.BoolFlag{Name: "debug", Usage: "serve Go's profiler under /debug/pprof/ on the API port; accept and run debugging opcodes (OP_TEST_CRASH, which kills the gntd running it)"},
			&cli.Uint64Flag{Name: "raft-snapshot-threshold", Usage: "log entries between Raft snapshots (0: 8192)"},
			&cli.Uint64Flag{Name: "raft-trailing-logs", Usage: "log entries kept after a snapshot (0: 10240)"},
			&cli.IntFlag{Name: "executor-concurrency", Value: d.ExecutorConcurrency, Usage: "jobs the leader runs at once"},
			&cli.DurationFlag{Name: "job-archive-age", Value: d.JobArchiveAge.Duration, Usage: "archive finished jobs older than this (0: never)"},
			&cli.Int64Flag{Name: "memory-mib", Usage: "memory to report (0: unknown)"},
			&cli.Int64Flag{Name: "disk-mib", Usage: "disk to report (0: unknown)"},
			&cli.IntFlag{Name: "cpus", Usage: "CPUs to report (0: detect)"},
			&cli.StringFlag{Name: "hypervisor", Usage: "node agent driver: kvm, fake or exec (default: fake with --profile dev, else exec)"},
			&cli.StringFlag{Name: "kvm-accel", Usage: "kvm driver: the guests' accelerator, kvm or tcg (default: probe KVM at start, else tcg)"},
			&cli.StringFlag{Name: "kvm-netns", Usage: "kvm driver: run the guests' qemu and their NICs' taps in this network namespace (ip netns; default: the node's own)"},
			&cli.StringFlag{Name: "file-storage-dir", Usage: "kvm driver: the disks of template file (default <data-dir>/file-storage)"},
			&cli.StringFlag{Name: "volume-group", Usage: "kvm driver: the LVM volume group of the disks of template plain (default xenvg)"},
			&cli.StringFlag{Name: "shared-file-storage-dir", Usage: "kvm driver: the disks of template sharedfile, a directory every node shares (default: none, sharedfile refused)"},
			&cli.StringFlag{Name: "hooks-dir", Usage: "the exec driver's scripts (default " + server.DefaultHooksDir + ")"},
			&cli.DurationFlag{Name: "hook-timeout", Usage: "bound of one exec driver script run (0: 5m)"},
			&cli.DurationFlag{Name: "fake-delay", Usage: "how long each fake driver operation takes"},
			&cli.StringFlag{Name: "diagnose-commands-dir", Usage: "whitelist of self-diagnose commands (default " + server.DefaultDiagnoseCommandsDir + ")"},
			&cli.StringFlag{Name: "repair-commands-dir", Usage: "whitelist of repair commands (default " + server.DefaultRepairCommandsDir + ")"},
			&cli.DurationFlag{Name: "diagnose-min-interval", Usage: "shortest time between two runs of the self-diagnose command (0: 10s)"},
			&cli.StringFlag{Name: "os-search-path", Usage: "colon-separated directories of Ganeti OS definitions (default " + strings.Join(server.DefaultOSSearchPath, ":") + "; with --profile dev, <data-dir>/os holding the shipped gnt-image comes first)"},
			&cli.StringFlag{Name: "boot-id-file", Usage: "file holding the node's boot id, which changes at each boot: a change makes the leader re-activate the disks of the drbd instances this node is secondary of (default " + server.DefaultBootIDFile + ")"},
			&cli.StringFlag{Name: "oob-programs-dir", Usage: "whitelist of OOB helpers: an oob_program must be in it (default " + server.DefaultOOBProgramsDir + ")"},
			&cli.StringFlag{Name: "iallocators-dir", Usage: "directory of the external allocators (Ganeti's iallocator protocol) this gntd may run as leader (default " + server.DefaultIAllocatorsDir + ")"},
			&cli.DurationFlag{Name: "iallocator-timeout", Usage: "bound of one external allocator run (0: 60s)"},
			&cli.IntFlag{Name: "max-conns", Value: d.MaxConns, Usage: "connections each TCP server (API, node RPC, maintd) keeps open at once; more are closed on accept (-1: no cap)"},
			&cli.IntFlag{Name: "max-conns-per-ip", Value: d.MaxConnsPerIP, Usage: "connections each TCP server keeps open at once from one client address (-1: no cap)"},
		},
		Action: func(c *cli.Context) error {
			cfg := server.DefaultConfig()
			if p := c.String("config"); p != "" {
				if err := server.LoadConfigFile(p, &cfg); err != nil {
					return err
				}
			}
			setStr := func(flag string, dst *string) {
				if c.IsSet(flag) || *dst == "" {
					*dst = c.String(flag)
				}
			}
			setInt := func(flag string, dst *int) {
				if c.IsSet(flag) {
					*dst = c.Int(flag)
				}
			}
			setStr("name", &cfg.Name)
			setStr("bind", &cfg.Bind)
			setStr("data-dir", &cfg.DataDir)
			setStr("profile", &cfg.Profile)
			setStr("log-level", &cfg.LogLevel)
			if c.IsSet("log-json") {
				cfg.LogJSON = c.Bool("log-json")
			}
			setStr("memory-limit", &cfg.MemoryLimit)
			if c.IsSet("debug") {
				cfg.Debug = c.Bool("debug")
			}
			if c.IsSet("raft-snapshot-threshold") {
				cfg.SnapshotThreshold = c.Uint64("raft-snapshot-threshold")
			}
			if c.IsSet("raft-trailing-logs") {
				cfg.TrailingLogs = c.Uint64("raft-trailing-logs")
			}
			setInt("api-port", &cfg.APIPort)
			setInt("raft-port", &cfg.RaftPort)
			setInt("agent-port", &cfg.AgentPort)
			setInt("gossip-port", &cfg.GossipPort)
			setInt("confd-port", &cfg.ConfdPort)
			setInt("maintd-port", &cfg.MaintdPort)
			setInt("executor-concurrency", &cfg.ExecutorConcurrency)
			setInt("max-conns", &cfg.MaxConns)
			setInt("max-conns-per-ip", &cfg.MaxConnsPerIP)
			if c.IsSet("job-archive-age") {
				cfg.JobArchiveAge.Duration = c.Duration("job-archive-age")
			}
			setInt("cpus", &cfg.Resources.CPUs)
			if c.IsSet("memory-mib") {
				cfg.Resources.MemoryMiB = c.Int64("memory-mib")
			}
			if c.IsSet("disk-mib") {
				cfg.Resources.DiskMiB = c.Int64("disk-mib")
			}
			setStr("hypervisor", &cfg.Hypervisor)
			setStr("hooks-dir", &cfg.HooksDir)
			setStr("kvm-accel", &cfg.KVMAccel)
			setStr("kvm-netns", &cfg.KVMNetNS)
			setStr("file-storage-dir", &cfg.FileStorageDir)
			setStr("shared-file-storage-dir", &cfg.SharedFileStorageDir)
			setStr("volume-group", &cfg.VolumeGroup)
			if c.IsSet("hook-timeout") {
				cfg.HookTimeout.Duration = c.Duration("hook-timeout")
			}
			if c.IsSet("fake-delay") {
				cfg.FakeDelay.Duration = c.Duration("fake-delay")
			}
			setStr("diagnose-commands-dir", &cfg.DiagnoseCommandsDir)
			setStr("repair-commands-dir", &cfg.RepairCommandsDir)
			setStr("oob-programs-dir", &cfg.OOBProgramsDir)
			setStr("boot-id-file", &cfg.BootIDFile)
			if p := c.String("os-search-path"); c.IsSet("os-search-path") {
				cfg.OSSearchPath = strings.Split(p, ":")
			}
			setStr("iallocators-dir", &cfg.IAllocatorsDir)
			if c.IsSet("iallocator-timeout") {
				cfg.IAllocatorTimeout.Duration = c.Duration("iallocator-timeout")
			}
			if c.IsSet("diagnose-min-interval") {
				cfg.DiagnoseMinInterval.Duration = c.Duration("diagnose-min-interval")
			}
			cfg.Rejoin = c.Bool("rejoin")
			if j := c.String("join"); j != "" {
				cfg.Join = strings.Split(j, ",")
			}
			cfg.Commit = rpc.Commit(commit)
			cfg.Build = buildinfo.Text(commit, buildDate)
			memory, err := server.MemorySettings(cfg.MemoryLimit)
			if err != nil {
				return err
			}
			s, err := server.New(cfg, nil)
			if err != nil {
				return err
			}
			s.Log().Info("memory", "settings", memory)
			go server.KeepMemoryLimit(c.Context)
			return s.Run(c.Context)
		},
	}
}

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a whole cluster on this machine (3 candidates on 127.0.0.11-13, 3 nodes on 127.0.0.21-23)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Usage: "where the members' data dirs go (default: a new temp dir)"},
			&cli.IntFlag{Name: "candidates", Value: 3},
			&cli.IntFlag{Name: "nodes", Value: 3},
			&cli.StringFlag{Name: "cluster-name", Value: "gnt-dev"},
			&cli.StringFlag{Name: "servers-file", Usage: "file to write the API addresses to, for gnt (default ~/.config/gnt/servers; 'none' to skip)"},
			&cli.StringFlag{Name: "key-file", Usage: "file to copy the cluster key to, for gnt confd (default ~/.config/gnt/cluster.key; 'none' to skip)"},
			&cli.StringFlag{Name: "client-dir", Usage: "`DIR` to write the CA certificate and an admin client certificate to, for gnt and curl (default ~/.config/gnt; 'none' to skip)"},
			&cli.StringFlag{Name: "hypervisor", Value: "fake", Usage: "every member's driver: fake, or kvm (real QEMU guests: needs qemu-system-x86_64, qemu-img, a /boot/vmlinuz-* and the guest of make guest; sharedfile disks in <data-dir>/shared-file-storage; see docs/tour.md)"},
			&cli.StringFlag{Name: "guest-dir", Usage: "with --hypervisor kvm: `DIR` holding the guest's initramfs.cpio.gz (default: guest/ beside gntd, as `make guest` writes it)"},
		},
		Action: func(c *cli.Context) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			sf := c.String("servers-file")
			switch sf {
			case "":
				if home, err := os.UserHomeDir(); err == nil {
					sf = filepath.Join(home, ".config", "gnt", "servers")
				}
			case "none":
				sf = ""
			}
			kf := c.String("key-file")
			switch kf {
			case "":
				if home, err := os.UserHomeDir(); err == nil {
					kf = filepath.Join(home, ".config", "gnt", "cluster.key")
				}
			case "none":
				kf = ""
			}
			cd := c.String("client-dir")
			switch cd {
			case "":
				if home, err := os.UserHomeDir(); err == nil {
					cd = filepath.Join(home, ".config", "gnt")
				}
			case "none":
				cd = ""
			}
			return server.RunDev(c.Context, server.DevOptions{
				DataDir: c.String("data-dir"), Binary: bin, Candidates: c.Int("candidates"), Nodes: c.Int("nodes"),
				ClusterName: c.String("cluster-name"), ServersFile: sf, KeyFile: kf, ClientDir: cd, Out: c.App.Writer,
				Hypervisor: c.String("hypervisor"), GuestDir: c.String("guest-dir"),
			})
		},
	}
}

func recoverCommand() *cli.Command {
	d := server.DefaultConfig()
	return &cli.Command{
		Name:  "recover",
		Usage: "after the loss of a majority of the voters: make this stopped master candidate the only voter, keeping its state",
		Description: "Run it on ONE surviving master candidate whose gntd is stopped, never on two: it rewrites the Raft\n" +
			"configuration in --data-dir to this candidate alone (entries it holds that were not known to be\n" +
			"committed become committed). Start its gntd again: it leads alone. Bring the other candidates back\n" +
			"with an empty data dir, the cluster key and --join (docs/operations.md, \"Disaster recovery\").",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: d.DataDir, Usage: "the stopped candidate's data `DIR`"},
			&cli.StringFlag{Name: "raft-addr", Usage: "this candidate's Raft `HOST:PORT` (default: as its Raft configuration records it)"},
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "do not ask for confirmation (needed without a terminal)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("recover takes no arguments (got %q); the data dir is --data-dir", c.Args().Slice())
			}
			if !c.Bool("force") {
				if err := confirmRecover(c.App.Writer, c.String("data-dir")); err != nil {
					return err
				}
			}
			res, err := server.Recover(c.String("data-dir"), c.String("raft-addr"), nil)
			if err != nil {
				return err
			}
			w := c.App.Writer
			fmt.Fprintf(w, "recovered %s of cluster %s: Raft configuration was %s, now %s=Voter@%s alone\n",
				res.Node, res.Cluster, strings.Join(res.Before, " "), res.Node, res.Address)
			fmt.Fprintf(w, "state at index %d: %d nodes, %d instances, %d jobs, %d incidents\n",
				res.Index, res.Counts.Nodes, res.Counts.Instances, res.Counts.Jobs, res.Counts.Incidents)
			fmt.Fprintln(w, "next: start this gntd as before; bring the other candidates back with an empty data dir, the cluster key and --join")
			return nil
		},
	}
}

// confirmRecover asks before gntd recover rewrites the Raft state; without
// a terminal it refuses.
func confirmRecover(w io.Writer, dir string) error {
	var t syscall.Termios
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t))); errno != 0 {
		return fmt.Errorf("refusing to recover without confirmation: stdin is not a terminal (use --force)")
	}
	fmt.Fprintf(w, "Make the candidate of %s the only Raft voter? Do this on ONE survivor only, with its gntd stopped. y/[n]: ", dir)
	var answer string
	fmt.Fscanln(os.Stdin, &answer)
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("aborted")
	}
	return nil
}
