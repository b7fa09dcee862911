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
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/server"
)

func main() {
	// gntd keeps little live heap and allocates much short-lived JSON: a
	// higher GC target trades a few MiB for a good share of CPU on busy
	// leaders. GOGC in the environment still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	app := &cli.App{
		Name:      "gntd",
		Usage:     "the gnt cluster daemon",
		Writer:    stdout,
		ErrWriter: stderr,
		Version:   rpc.VersionText(commit),
		Commands:  []*cli.Command{agentCommand(), devCommand()},
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
			&cli.StringFlag{Name: "file-storage-dir", Usage: "kvm driver: the disks of template file (default <data-dir>/file-storage)"},
			&cli.StringFlag{Name: "shared-file-storage-dir", Usage: "kvm driver: the disks of template sharedfile, a directory every node shares (default: none, sharedfile refused)"},
			&cli.StringFlag{Name: "hooks-dir", Usage: "the exec driver's scripts (default " + server.DefaultHooksDir + ")"},
			&cli.DurationFlag{Name: "hook-timeout", Usage: "bound of one exec driver script run (0: 5m)"},
			&cli.DurationFlag{Name: "fake-delay", Usage: "how long each fake driver operation takes"},
			&cli.StringFlag{Name: "diagnose-commands-dir", Usage: "whitelist of self-diagnose commands (default " + server.DefaultDiagnoseCommandsDir + ")"},
			&cli.StringFlag{Name: "repair-commands-dir", Usage: "whitelist of repair commands (default " + server.DefaultRepairCommandsDir + ")"},
			&cli.DurationFlag{Name: "diagnose-min-interval", Usage: "shortest time between two runs of the self-diagnose command (0: 10s)"},
			&cli.StringFlag{Name: "oob-programs-dir", Usage: "whitelist of OOB helpers: an oob_program must be in it (default " + server.DefaultOOBProgramsDir + ")"},
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
			setStr("file-storage-dir", &cfg.FileStorageDir)
			setStr("shared-file-storage-dir", &cfg.SharedFileStorageDir)
			if c.IsSet("hook-timeout") {
				cfg.HookTimeout.Duration = c.Duration("hook-timeout")
			}
			if c.IsSet("fake-delay") {
				cfg.FakeDelay.Duration = c.Duration("fake-delay")
			}
			setStr("diagnose-commands-dir", &cfg.DiagnoseCommandsDir)
			setStr("repair-commands-dir", &cfg.RepairCommandsDir)
			setStr("oob-programs-dir", &cfg.OOBProgramsDir)
			if c.IsSet("diagnose-min-interval") {
				cfg.DiagnoseMinInterval.Duration = c.Duration("diagnose-min-interval")
			}
			cfg.Rejoin = c.Bool("rejoin")
			if j := c.String("join"); j != "" {
				cfg.Join = strings.Split(j, ",")
			}
			cfg.Commit = rpc.Commit(commit)
			s, err := server.New(cfg, nil)
			if err != nil {
				return err
			}
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
			})
		},
	}
}
