package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

// Instance operations: each submits one job and follows it (its log
// lines as they come), as Ganeti's gnt-instance does.

func (e environment) instanceOpCommands() []*cli.Command {
	one := func(name, usage string, flags []cli.Flag, fn func(ctx context.Context, s *session, c *cli.Context, args []string) error) *cli.Command {
		return &cli.Command{Name: name, Usage: usage, ArgsUsage: "NAME", Flags: flags, Action: e.do(fn)}
	}
	return []*cli.Command{
		{
			Name:      "add",
			Usage:     "create an instance, placed by the allocator unless --node is given (a --forthcoming one may be unnamed: the job answers its UUID; name it later with 'gnt instance rename UUID NAME')",
			ArgsUsage: "NAME",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "disk-template", Aliases: []string{"t"}, Usage: "plain, drbd, file, sharedfile or diskless (default: plain with disks)"},
				&cli.StringSliceFlag{Name: "disk", Usage: "a disk: `SIZE` (e.g. 10G, 512M) or size=SIZE[,mode=rw|ro][,name=NAME], each optionally with Ganeti's index (0:size=10G; then every --disk has one) (repeatable)"},
				&cli.StringFlag{Name: "memory", Usage: "memory, e.g. 512 (MiB) or 2G"},
				&cli.IntFlag{Name: "vcpus", Usage: "virtual CPUs"},
				&cli.StringFlag{Name: "os-type", Usage: "`OS` to install, os+variant (see gnt os list; mandatory for an instance with disks unless --forthcoming or --no-install)"},
				&cli.StringFlag{Name: "node", Aliases: []string{"n"}, Usage: "`PNODE[:SNODE]` instead of the allocator"},
				&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "allocators to try in order, `NAME[,NAME...]`: hail (built-in) or programs of the iallocators directory (default: the cluster's default list)"},
				&cli.StringFlag{Name: "group", Usage: "place within this node group"},
				&cli.StringSliceFlag{Name: "net", Usage: "a NIC: `mode=MODE,link=LINK,vlan=VLAN,ip=IP,mac=MAC,name=NAME`, or network=NETWORK[,ip=pool|IP] (mode and link from the network's connection; pool: its lowest free address), each optionally with Ganeti's index (0:mode=routed,...; then every --net has one); without --net the instance has one NIC of the cluster's nicparams (gnt cluster info; --no-nics for none) (repeatable)"},
				&cli.BoolFlag{Name: "no-nics", Usage: "create the instance without NICs (instead of one of the cluster's nicparams; not with --net)"},
				&cli.BoolFlag{Name: "no-start", Usage: "do not start the instance"},
				&cli.BoolFlag{Name: "no-install", Usage: "do not install the OS"},
				&cli.BoolFlag{Name: "no-wait-for-sync", Usage: "do not wait for the first resync of drbd disks (before the OS install)"},
				&cli.BoolFlag{Name: "forthcoming", Usage: "only reserve the resources (commit later with 'gnt instance create NAME')"},
				&cli.BoolFlag{Name: "dry-run", Usage: "only show where the allocator would place it"},
				&cli.BoolFlag{Name: "no-move-reservations", Usage: "do not let the allocator move forthcoming instances to make room"},
				hvparamsFlag("hypervisor and its parameters `[HV:]KEY=VALUE[,...]` (Ganeti's -H; see docs/parameters.md)"),
				beparamsFlag(),
				osparamsFlag(),
			},
			Action: e.do(instanceAdd),
		},
		one("create", "turn a forthcoming instance into a real one (commit the reservation)", nil, instanceCommit),
		one("remove", "stop an instance and remove it with its disks (asks first unless --force)", []cli.Flag{
			&cli.BoolFlag{Name: "ignore-failures", Usage: "remove the record even when nodes cannot be cleaned"},
			forceFlag(),
		}, e.confirmed(1, ask("remove instance %s",
			"This will remove the volumes of the instance %s (including mirrors), thus removing all the data of the instance. Continue?"),
			instanceSimple(http.MethodDelete, "", "ignore-failures"))),
		one("startup", "start an instance", []cli.Flag{
			&cli.BoolFlag{Name: "no-remember", Usage: "do not record the instance as up"},
		}, instanceSimple(http.MethodPut, "/startup", "no-remember")),
		one("shutdown", "stop an instance", []cli.Flag{
			&cli.BoolFlag{Name: "no-remember", Usage: "do not record the instance as down"},
			timeoutFlag("shutdown-timeout", "wait up to `SECONDS` for the guest to power off (ACPI) before it is destroyed (default 120; Ganeti's --timeout, which in gnt is the API's timeout)"),
		}, instanceShutdown),
		one("console", "attach to an instance's console (ssh to its node, socat on the serial console's socket), or print where its VNC console listens and how its TLS and password are set", []cli.Flag{
			&cli.BoolFlag{Name: "show-cmd", Usage: "print the command instead of running it"},
		}, instanceConsole),
		one("reboot", "reboot an instance", []cli.Flag{
			&cli.StringFlag{Name: "type", Usage: "soft, hard (default) or full"},
			timeoutFlag("shutdown-timeout", "a soft or full reboot waits up to `SECONDS` for the guest to power off (ACPI) before it is destroyed (default 120, Ganeti's)"),
		}, instanceReboot),
		one("failover", "move a drbd instance to its secondary node (a sharedfile one to --target-node, or where --iallocator puts it), stopping it meanwhile (asks first unless --force)", []cli.Flag{
			&cli.BoolFlag{Name: "ignore-consistency", Usage: "fail over even when the primary cannot be reached"},
			&cli.StringFlag{Name: "target-node", Aliases: []string{"n"}, Usage: "the `NODE` to fail a sharedfile instance over to"},
			&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "instead of --target-node: the allocator (hail) that chooses the node, in the primary's group"},
			timeoutFlag("shutdown-timeout", "wait up to `SECONDS` for the guest to power off (ACPI) before it is destroyed (default 120, Ganeti's)"),
			forceFlag(),
		}, e.confirmed(1, ask("fail over instance %s",
			"Failover will happen to image %s. This requires a shutdown of the instance. Continue?"),
			instanceFields(http.MethodPut, "/failover", map[string]string{"target-node": "target_node", "iallocator": "iallocator"}, "ignore-consistency"))),
		{
			Name: "grow-disk", Usage: "grow disk DISK (its index) of an instance by AMOUNT (e.g. 1G, 512M), or to AMOUNT with --absolute",
			ArgsUsage: "NAME DISK AMOUNT",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "absolute", Usage: "AMOUNT is the disk's new size, not the growth"},
				&cli.BoolFlag{Name: "no-wait-for-sync", Usage: "do not wait for a mirrored disk to resync"},
			},
			Action: e.do(instanceGrowDisk),
		},
		one("activate-disks", "make an instance's disks available on its primary node and print where they are (NODE:disk/N:PATH)", []cli.Flag{
			&cli.BoolFlag{Name: "ignore-size", Usage: "do not check the disks' sizes against the recorded ones"},
		}, instanceActivateDisks),
		one("deactivate-disks", "release a stopped instance's disks on its primary node (their data stays)", []cli.Flag{
			forceFlag(),
		}, instanceSimple(http.MethodPut, "/deactivate-disks", "force")),
		one("migrate", "move a running drbd instance to its secondary node (a sharedfile one to --target-node, or where --iallocator puts it) without stopping it (asks first unless --force)", []cli.Flag{
			&cli.BoolFlag{Name: "cleanup", Usage: "clean up after a failed migration"},
			&cli.StringFlag{Name: "target-node", Aliases: []string{"n"}, Usage: "the `NODE` to migrate a sharedfile instance to"},
			&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "instead of --target-node: the allocator (hail) that chooses the node, in the primary's group"},
			&cli.StringFlag{Name: "migration-mode", Usage: "live or non-live (default: the hypervisor's)"},
			&cli.BoolFlag{Name: "non-live", Usage: "the same as --migration-mode non-live"},
			&cli.BoolFlag{Name: "allow-failover", Usage: "fail over (stopping the instance) when it cannot be migrated"},
			forceFlag(),
		}, e.confirmed(1, ask("migrate instance %s",
			"Instance %s will be migrated. Note that migration might impact the instance if anything goes wrong "+
				"(e.g. due to bugs in the hypervisor). Continue?"),
			instanceMigrate)),
		one("reinstall", "shut an instance down, install its OS again (all data on its disks is lost) and start it (asks first unless --force)", []cli.Flag{
			&cli.StringFlag{Name: "os-type", Usage: "install this `OS` instead of the instance's own (Ganeti's -o; here -o selects list fields)"},
			&cli.BoolFlag{Name: "no-startup", Usage: "leave the instance stopped afterwards"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only check the reinstall; change nothing"},
			forceFlag(),
		}, e.confirmed(1, func(_ context.Context, _ *session, c *cli.Context, args []string) (string, string) {
			osMsg := "keep the same OS"
			if o := c.String("os-type"); o != "" {
				osMsg = fmt.Sprintf("change the OS to '%s'", o)
			}
			return "reinstall instance " + args[0],
				fmt.Sprintf("This will reinstall the instance '%s' (and %s) which removes all data. Continue?", args[0], osMsg)
		}, instanceReinstall)),
		one("replace-disks", "recreate a drbd instance's disks on one side, or move its secondary", []cli.Flag{
			&cli.BoolFlag{Name: "on-primary", Aliases: []string{"p"}, Usage: "replace the disks on the primary"},
			&cli.BoolFlag{Name: "on-secondary", Aliases: []string{"s"}, Usage: "replace the disks on the secondary"},
			&cli.StringFlag{Name: "new-secondary", Aliases: []string{"n"}, Usage: "move the secondary to `NODE`"},
			&cli.BoolFlag{Name: "auto-secondary", Aliases: []string{"I"}, Usage: "move the secondary to a node the allocator picks"},
			&cli.StringFlag{Name: "iallocator", Usage: "move the secondary to a node these allocators pick, tried in order: `NAME[,NAME...]`"},
		}, instanceReplaceDisks),
		one("recreate-disks", "create a stopped instance's missing disks again (empty)", []cli.Flag{
			&cli.StringFlag{Name: "node", Aliases: []string{"n"}, Usage: "on new nodes `PNODE[:SNODE]`"},
			&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "on new nodes these allocators pick, tried in order: `NAME[,NAME...]`"},
		}, instanceRecreateDisks),
		e.changeGroupCommand(),
		{
			Name: "rename", Usage: "rename a stopped instance", ArgsUsage: "NAME NEW_NAME",
			Action: e.do(func(ctx context.Context, s *session, c *cli.Context, args []string) error {
				if err := nArgs(c, args, 2, 2); err != nil {
					return err
				}
				_, err := s.change(ctx, http.MethodPut, instancePath(args[0])+"/rename", nil, map[string]any{"new_name": args[1]})
				return err
			}),
		},
		one("modify", "change an instance's parameters, NICs and disks", []cli.Flag{
			&cli.StringFlag{Name: "memory", Usage: "new memory, e.g. 1G"},
			&cli.IntFlag{Name: "vcpus", Usage: "new number of vcpus"},
			&cli.StringFlag{Name: "runtime-memory", Usage: "balloon the running instance to `SIZE` (e.g. 512M), between its minmem and maxmem (kvm)"},
			&cli.StringSliceFlag{Name: "add-disk", Usage: "add a disk of `SIZE` (repeatable)"},
			&cli.StringSliceFlag{Name: "disk", Usage: "change a disk: `IDX:name=NAME,mode=ro|rw`, or add one: add:size=SIZE[,mode=rw|ro][,name=NAME] (repeatable)"},
			&cli.StringSliceFlag{Name: "net", Usage: "NIC changes: `add[:PARAMS]`, IDX:PARAMS, IDX:remove or remove; PARAMS mode=,link=,vlan=,ip=,mac=,name= (repeatable)"},
			hvparamsFlag("hypervisor parameters `KEY=VALUE[,...]` (-KEY or KEY=default: back to the cluster's)"),
			beparamsFlag(),
			osparamsFlag(),
			&cli.StringFlag{Name: "os-name", Usage: "change the instance's OS `NAME` (no reinstall)"},
			&cli.BoolFlag{Name: "offline", Usage: "mark the (stopped) instance offline"},
			&cli.BoolFlag{Name: "online", Usage: "mark an offline instance online again (stopped)"},
			&cli.BoolFlag{Name: "no-wait-for-sync", Usage: "do not wait for the resync of the drbd disks added"},
		}, instanceModify),
	}
}

// ask is a confirmation question about the object named by the first
// argument: what and question each hold one %s.
func ask(what, question string) func(context.Context, *session, *cli.Context, []string) (string, string) {
	return func(_ context.Context, _ *session, _ *cli.Context, args []string) (string, string) {
		return fmt.Sprintf(what, args[0]), fmt.Sprintf(question, args[0])
	}
}

// instanceFields sends an instance operation whose options are body
// fields: strings (flag -> field), booleans and --shutdown-timeout.
func instanceFields(method, suffix string, strs map[string]string, bools ...string) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		if err := nArgs(c, args, 1, 1); err != nil {
			return err
		}
		body := map[string]any{}
		for flag, field := range strs {
			if v := c.String(flag); v != "" {
				body[field] = v
			}
		}
		for _, f := range bools {
			if c.Bool(f) {
				body[strings.ReplaceAll(f, "-", "_")] = true
			}
		}
		if c.IsSet("shutdown-timeout") {
			body["shutdown_timeout"] = c.Int("shutdown-timeout")
		}
		_, err := s.change(ctx, method, instancePath(args[0])+suffix, nil, body)
		return err
	}
}

// instanceReinstall sends POST /2/instances/NAME/reinstall with the
// version-1 body: one job that shuts the instance down, reinstalls it and
// starts it unless --no-startup.
func instanceReinstall(ctx context.Context, s *session, c *cli.Context, args []string) error {
	body := map[string]any{"start": !c.Bool("no-startup")}
	if o := c.String("os-type"); o != "" {
		body["os"] = o
	}
	var q url.Values
	if c.Bool("dry-run") {
		q = url.Values{"dry-run": {"1"}}
	}
	_, err := s.change(ctx, http.MethodPost, instancePath(args[0])+"/reinstall", q, body)
	return err
}

func instanceReplaceDisks(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body := map[string]any{}
	n := 0
	for flag, mode := range map[string]string{"on-primary": "replace_on_primary", "on-secondary": "replace_on_secondary", "auto-secondary": "replace_new_secondary"} {
		if c.Bool(flag) {
			body["mode"] = mode
			n++
		}
	}
	if ns := c.String("new-secondary"); ns != "" {
		body["mode"], body["remote_node"] = "replace_new_secondary", ns
		n++
	}
	if ia := c.String("iallocator"); ia != "" {
		if c.Bool("auto-secondary") {
			n-- // --iallocator names the allocators of --auto-secondary
		}
		body["mode"], body["iallocator"] = "replace_new_secondary", ia
		n++
	}
	if n != 1 {
		return usagef(c, "give exactly one of --on-primary, --on-secondary, --new-secondary NODE, --auto-secondary, --iallocator NAMES")
	}
	_, err := s.change(ctx, http.MethodPost, instancePath(args[0])+"/replace-disks", nil, body)
	return err
}

func instanceRecreateDisks(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body := map[string]any{}
	if n := c.String("node"); n != "" {
		p, sn, _ := strings.Cut(n, ":")
		nodes := []string{p}
		if sn != "" {
			nodes = append(nodes, sn)
		}
		body["nodes"] = nodes
	}
	if ia := c.String("iallocator"); ia != "" {
		body["iallocator"] = ia
	}
	_, err := s.change(ctx, http.MethodPost, instancePath(args[0])+"/recreate-disks", nil, body)
	return err
}

func instanceModify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body := map[string]any{}
	if err := addBEParams(c, body); err != nil {
		return err
	}
	if err := addParamOptions(c, body, false); err != nil {
		return err
	}
	if c.IsSet("net") {
		nics, err := parseNICMods(c.StringSlice("net"))
		if err != nil {
			return usagef(c, "%v", err)
		}
		body["nics"] = nics
	}
	if o := c.String("os-name"); o != "" {
		body["os_name"] = o
	}
	if m := c.String("runtime-memory"); m != "" {
		size, err := parseSize(m)
		if err != nil {
			return usagef(c, "--runtime-memory: %v", err)
		}
		body["runtime_mem"] = size
	}
	switch {
	case c.Bool("offline") && c.Bool("online"):
		return usagef(c, "--offline and --online exclude each other")
	case c.Bool("offline"):
		body["offline"] = true
	case c.Bool("online"):
		body["offline"] = false
	}
	var disks []any
	if c.IsSet("disk") {
		mods, err := parseDiskMods(c.StringSlice("disk"))
		if err != nil {
			return usagef(c, "%v", err)
		}
		disks = append(disks, mods...)
	}
	for _, d := range c.StringSlice("add-disk") {
		size, err := parseSize(d)
		if err != nil {
			return usagef(c, "--add-disk: %v", err)
		}
		disks = append(disks, []any{"add", -1, map[string]any{"size": size}})
	}
	if len(disks) > 0 {
		body["disks"] = disks
		if c.Bool("no-wait-for-sync") {
			body["wait_for_sync"] = false
		}
	}
	_, err := s.change(ctx, http.MethodPut, instancePath(args[0])+"/modify", nil, body)
	return err
}

func instancePath(name string) string { return "/2/instances/" + url.PathEscape(name) }

// parseSize reads a size in MiB: a number, or one with a unit M, G or T.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "T"):
		mult, s = 1024*1024, strings.TrimSuffix(s, "T")
	case strings.HasSuffix(s, "G"):
		mult, s = 1024, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		s = strings.TrimSuffix(s, "M")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("bad size %q: want e.g. 512, 512M, 10G", s)
	}
	// Beyond 2^62 MiB the conversion to int64 would not hold the size;
	// fsm's limits (far lower) then name the bound.
	mib := f * float64(mult)
	if mib >= 1<<62 {
		return 0, fmt.Errorf("size %q is %g MiB, more than anything can have (disks: at most %d MiB)", s, mib, int64(fsm.MaxDiskSizeMiB))
	}
	return int64(mib), nil
}

func instanceAdd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	least := 1
	if c.Bool("forthcoming") {
		least = 0 // a reservation may be unnamed (seed 001)
	}
	if err := nArgs(c, args, least, 1); err != nil {
		return err
	}
	body := map[string]any{"__version__": 1}
	if len(args) == 1 {
		body["instance_name"] = args[0]
	}
	if t := c.String("disk-template"); t != "" {
		body["disk_template"] = t
	}
	if c.Bool("no-wait-for-sync") {
		body["wait_for_sync"] = false
	}
	disks, err := indexedSpecs("--disk", c.StringSlice("disk"), diskSpec)
	if err != nil {
		return usagef(c, "%v", err)
	}
	if len(disks) > 0 {
		body["disks"] = disks
	}
	if err := addBEParams(c, body); err != nil {
		return err
	}
	if err := addParamOptions(c, body, true); err != nil {
		return err
	}
	if o := c.String("os-type"); o != "" {
		body["os_type"] = o
	}
	if n := c.String("node"); n != "" {
		p, sn, _ := strings.Cut(n, ":")
		body["pnode"] = p
		if sn != "" {
			body["snode"] = sn
		}
	}
	if g := c.String("group"); g != "" {
		body["group_name"] = g
	}
	if ia := c.String("iallocator"); ia != "" {
		body["iallocator"] = ia
	}
	nics, err := indexedSpecs("--net", c.StringSlice("net"), nicParams)
	if err != nil {
		return usagef(c, "%v", err)
	}
	switch {
	case c.Bool("no-nics") && len(nics) > 0:
		return usagef(c, "--no-nics and --net exclude each other: --no-nics creates the instance without NICs, --net gives it these")
	case c.Bool("no-nics"):
		body["nics"] = []map[string]any{}
	case len(nics) > 0:
		body["nics"] = nics
	default:
		// Ganeti's add: one NIC, its mode and link the cluster's nicparams.
		body["nics"] = []map[string]any{{}}
	}
	for flag, field := range map[string]string{"no-start": "start", "no-install": "no_install", "forthcoming": "forthcoming"} {
		if c.Bool(flag) {
			body[field] = flag != "no-start"
		}
	}
	if c.Bool("no-move-reservations") {
		body["gnt_move_reservations"] = false
	}
	var q url.Values
	if c.Bool("dry-run") {
		q = url.Values{"dry-run": {"1"}}
	}
	_, err = s.change(ctx, http.MethodPost, "/2/instances", q, body)
	return err
}

// diskSpec reads one --disk of instance add: SIZE, or Ganeti's
// size=SIZE[,mode=rw|ro][,name=NAME].
func diskSpec(s string) (map[string]any, error) {
	if !strings.Contains(s, "=") {
		size, err := parseSize(s)
		if err != nil {
			return nil, err
		}
		return map[string]any{"size": size}, nil
	}
	items, err := splitParams(s)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, it := range items {
		if it.bare || it.no || it.reset {
			return nil, fmt.Errorf("disk parameter %q needs a value (KEY=VALUE)", it.key)
		}
		switch it.key {
		case "size":
			size, err := parseSize(it.value)
			if err != nil {
				return nil, err
			}
			out["size"] = size
		case "mode", "name":
			out[it.key] = it.value
		default:
			return nil, fmt.Errorf("unknown disk parameter %q (size, mode, name)", it.key)
		}
	}
	if out["size"] == nil {
		return nil, fmt.Errorf("a disk needs size=SIZE")
	}
	return out, nil
}

// indexedSpecs reads repeated --disk or --net options of instance add,
// each either plain or with Ganeti's index prefix (0:size=10G, 1:...):
// with indexes, the items go in index order, and the indexes must be
// 0 to n-1, each once; plain and indexed ones are not mixed.
func indexedSpecs(flag string, specs []string, parse func(string) (map[string]any, error)) ([]map[string]any, error) {
	index := func(spec string) (head, tail string, ok bool) {
		head, tail, ok = strings.Cut(spec, ":")
		return head, tail, ok && head != "" && strings.Trim(head, "0123456789") == ""
	}
	indexed := 0
	for _, spec := range specs {
		if _, _, ok := index(spec); ok {
			indexed++
		}
	}
	if indexed != 0 && indexed != len(specs) {
		return nil, fmt.Errorf("%s: give every option an index (0:..., 1:...) or none", flag)
	}
	out := make([]map[string]any, len(specs))
	for i, spec := range specs {
		at, rest := i, spec
		if head, tail, ok := index(spec); ok {
			n, err := strconv.Atoi(head)
			if err != nil || n >= len(specs) {
				return nil, fmt.Errorf("%s %q: index %s, but %d %s option(s) are given: indexes go from 0 to %d", flag, spec, head, len(specs), flag, len(specs)-1)
			}
			if out[n] != nil {
				return nil, fmt.Errorf("%s %q: index %d is given twice", flag, spec, n)
			}
			at, rest = n, tail
		}
		v, err := parse(rest)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %v", flag, spec, err)
		}
		out[at] = v
	}
	return out, nil
}

func instanceCommit(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodPost, instancePath(args[0])+"/create", nil, nil)
	return err
}

// instanceSimple sends an instance operation whose options are query
// flags.
func instanceSimple(method, suffix string, flags ...string) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		if err := nArgs(c, args, 1, 1); err != nil {
			return err
		}
		q := url.Values{}
		for _, f := range flags {
			if c.Bool(f) {
				q.Set(strings.ReplaceAll(f, "-", "_"), "1")
			}
		}
		_, err := s.change(ctx, method, instancePath(args[0])+suffix, q, nil)
		return err
	}
}

func instanceReboot(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	var q url.Values
	if t := c.String("type"); t != "" {
		q = url.Values{"type": {t}}
	}
	var body any // none without the option: nil, not a nil map
	if c.IsSet("shutdown-timeout") {
		body = map[string]any{"shutdown_timeout": c.Int("shutdown-timeout")}
	}
	_, err := s.change(ctx, http.MethodPost, instancePath(args[0])+"/reboot", q, body)
	return err
}

// timeoutFlag is an option of whole seconds, as Ganeti's --timeout and
// --shutdown-timeout (the API bounds it).
func timeoutFlag(name, usage string) cli.Flag {
	return &cli.IntFlag{Name: name, Usage: usage}
}

// instanceShutdown sends PUT /2/instances/NAME/shutdown: no_remember in
// the query, the timeout in the body, as Ganeti's RAPI client does.
func instanceShutdown(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	var q url.Values
	if c.Bool("no-remember") {
		q = url.Values{"no_remember": {"1"}}
	}
	var body any // none without the option: nil, not a nil map
	if c.IsSet("shutdown-timeout") {
		body = map[string]any{"timeout": c.Int("shutdown-timeout")}
	}
	_, err := s.change(ctx, http.MethodPut, instancePath(args[0])+"/shutdown", q, body)
	return err
}

// instanceMigrate sends PUT /2/instances/NAME/migrate with Ganeti's
// options: a target node or an allocator, the mode (--non-live is
// mode non-live), cleanup and allow_failover.
func instanceMigrate(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body := map[string]any{}
	for flag, field := range map[string]string{"target-node": "target_node", "iallocator": "iallocator", "migration-mode": "mode"} {
		if v := c.String(flag); v != "" {
			body[field] = v
		}
	}
	if c.Bool("non-live") {
		if m, ok := body["mode"]; ok && m != fsm.MigrationNonLive {
			return usagef(c, "--non-live and --migration-mode %s contradict each other", m)
		}
		body["mode"] = fsm.MigrationNonLive
	}
	for _, f := range []string{"cleanup", "allow-failover"} {
		if c.Bool(f) {
			body[strings.ReplaceAll(f, "-", "_")] = true
		}
	}
	_, err := s.change(ctx, http.MethodPut, instancePath(args[0])+"/migrate", nil, body)
	return err
}

// instanceGrowDisk sends POST /2/instances/NAME/disk/DISK/grow with the
// amount in MiB.
func instanceGrowDisk(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 3, 3); err != nil {
		return err
	}
	idx, err := strconv.Atoi(args[1])
	if err != nil || idx < 0 || idx >= fsm.MaxDisksPerInstance {
		return usagef(c, "DISK %q: want a disk index, 0 to %d", args[1], fsm.MaxDisksPerInstance-1)
	}
	amount, err := parseSize(args[2])
	if err != nil {
		return usagef(c, "AMOUNT: %v", err)
	}
	body := map[string]any{"amount": amount, "wait_for_sync": !c.Bool("no-wait-for-sync")}
	if c.Bool("absolute") {
		body["absolute"] = true
	}
	_, err = s.change(ctx, http.MethodPost, instancePath(args[0])+"/disk/"+strconv.Itoa(idx)+"/grow", nil, body)
	return err
}

// instanceActivateDisks sends PUT /2/instances/NAME/activate-disks and
// prints the job's answer as Ganeti does: NODE:DISK:PATH per disk.
func instanceActivateDisks(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	var q url.Values
	if c.Bool("ignore-size") {
		q = url.Values{"ignore_size": {"1"}}
	}
	j, err := s.change(ctx, http.MethodPut, instancePath(args[0])+"/activate-disks", q, nil)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	var disks [][]string
	if raw := j.result(0); len(raw) > 0 {
		if err := json.Unmarshal(raw, &disks); err != nil {
			return fmt.Errorf("decoding job %d's result %s: %w", j.ID, raw, err)
		}
	}
	for _, d := range disks {
		fmt.Fprintln(s.stdout, strings.Join(d, ":"))
	}
	return nil
}

// addBEParams puts --memory and --vcpus into body's beparams.
// addParamOptions adds -H, -B and -O to an instance request body; at
// creation -H may name the hypervisor (HV:KEY=VALUE,...).
func addParamOptions(c *cli.Context, body map[string]any, create bool) error {
	if c.IsSet("hypervisor-parameters") {
		hv, p, err := parseInstanceHV(c.StringSlice("hypervisor-parameters"), create)
		if err != nil {
			return usagef(c, "-H: %v", err)
		}
		if hv != "" {
			body["hypervisor"] = hv
		}
		if len(p) > 0 {
			body["hvparams"] = p
		}
	}
	if c.IsSet("backend-parameters") {
		p, err := typedParams(c.String("backend-parameters"), fsm.BEParamDefs)
		if err != nil {
			return usagef(c, "-B: %v", err)
		}
		be, _ := body["beparams"].(map[string]any)
		if be == nil {
			be = map[string]any{}
		}
		for k, v := range p {
			if _, dup := be[k]; dup {
				return usagef(c, "-B %s: also given by --%s", k, k)
			}
			if v == fsm.ParamDefault {
				return usagef(c, "-B %s: an instance's backend parameters cannot be reset", k)
			}
			be[k] = v
		}
		body["beparams"] = be
	}
	if c.IsSet("os-parameters") {
		p, err := parseOSParams(c.String("os-parameters"))
		if err != nil {
			return usagef(c, "-O: %v", err)
		}
		body["osparams"] = p
	}
	return nil
}

func addBEParams(c *cli.Context, body map[string]any) error {
	be := map[string]any{}
	if m := c.String("memory"); m != "" {
		size, err := parseSize(m)
		if err != nil {
			return usagef(c, "--memory: %v", err)
		}
		be["memory"] = size
	}
	if c.IsSet("vcpus") {
		be["vcpus"] = c.Int("vcpus")
	}
	if len(be) > 0 {
		body["beparams"] = be
	}
	return nil
}
