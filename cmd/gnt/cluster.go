package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

func (e environment) clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "cluster-wide operations (gnt-cluster)",
		Subcommands: append([]*cli.Command{
			{
				Name:      "init",
				Usage:     "create a new cluster on the gntd at the first --server address (which must be local)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "candidate-pool-size", Usage: "number of master candidates to keep (default 10)"},
					&cli.IntFlag{Name: "max-raft-voters", Usage: "most master candidates that vote in Raft (default 5)"},
					yesNoFlag("maintd-harep", "whether maintd does harep's work, instance autorepair by tags (default no)"),
					uidPoolFlag("uid-pool", "the user-id pool, `UIDS`: uids and ranges, e.g. 1000-1009,1020, for guests of security_model=pool (default: empty, off)"),
				},
				Action: e.do(clusterInit),
			},
			{
				Name: "issue-client-cert",
				Usage: "on a master candidate, as root: make an admin client certificate from the cluster CA in the local data dir " +
					"and write it with the CA certificate to ~/.config/gnt (ca.pem, client.pem, client-key.pem)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "data-dir", Value: "/var/lib/gnt", Usage: "the gntd's data `DIR` holding ca.pem and ca-key.pem"},
					&cli.StringFlag{Name: "out-dir", Usage: "where to write the files (default ~/.config/gnt)"},
					&cli.StringFlag{Name: "name", Value: "admin", Usage: "the certificate's `NAME` (shown in the API's logs)"},
				},
				Action: e.issueClientCert,
			},
			{
				Name:   "info",
				Usage:  "show the cluster configuration",
				Action: e.do(clusterInfo),
			},
			{
				Name:   "getmaster",
				Usage:  "print the name of the master node",
				Action: e.do(clusterGetMaster),
			},
			{
				Name:  "modify",
				Usage: "change cluster parameters",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "candidate-pool-size", Usage: "number of master candidates to keep"},
					&cli.IntFlag{Name: "max-raft-voters", Usage: "most master candidates that vote in Raft"},
					&cli.StringFlag{Name: "default-iallocator", Usage: "allocators tried in order when an opcode names none, `NAME[,NAME...]`: hail (built-in) or programs of each gntd's iallocators directory (docs/allocators.md)"},
					ndparamsFlag(),
					&cli.Int64Flag{Name: "maintenance-interval", Usage: "`SECONDS` between maintd rounds (Ganeti's maint_round_delay)"},
					yesNoFlag("auto-balance-cluster", "whether maintd balances the cluster (off in a new cluster)"),
					yesNoFlag("maintd-harep", "whether maintd does harep's work, instance autorepair by tags (off in a new cluster)"),
					&cli.Float64Flag{Name: "auto-balance-threshold", Usage: "load spread (used/total of memory, disk or vcpus between two nodes) over which maintd balances, a `FRACTION`"},
					&cli.IntFlag{Name: "auto-balance-max-moves", Usage: "most balancing moves one maintd round makes, no two touching the same node (`NUMBER`, default 5)"},
					&cli.StringFlag{Name: "diagnose-data-collector-filename", Usage: "the self-diagnose command every node runs, a `FILE` in its node-diagnose-commands directory (\"\" = built-in Ok)"},
					&cli.DurationFlag{Name: "diagnose-interval", Usage: "how often the leader polls every node's self-diagnose (`DURATION`)"},
					&cli.DurationFlag{Name: "repair-dead-grace", Usage: "how long a node must be dead in gossip before harep repairs its instances (`DURATION`)"},
					&cli.Float64Flag{Name: "repair-breaker-share", Usage: "circuit breaker: the `FRACTION` of nodes that may be unhealthy at once"},
					&cli.IntFlag{Name: "repair-breaker-nodes", Usage: "circuit breaker: the `NUMBER` of nodes that may be unhealthy at once (0: no count limit)"},
					&cli.IntFlag{Name: "repair-max-evacuations", Usage: "`NUMBER` of nodes maintd evacuates at once"},
					&cli.IntFlag{Name: "repair-round-job-limit", Usage: "most `JOBS` one maintd round submits"},
					&cli.DurationFlag{Name: "repair-job-delay", Usage: "delay before harep's repair opcodes, as harep --job-delay (`DURATION`)"},
					yesNoFlag("rapi-anonymous-read", "whether API requests without credentials may read"),
					hvparamsFlag("hypervisor parameters `HV:KEY=VALUE[,...]` (repeatable; -KEY or KEY=default resets one; see docs/parameters.md)"),
					beparamsFlag(),
					&cli.StringFlag{Name: "nic-parameters", Aliases: []string{"N"}, Usage: "default NIC parameters `KEY=VALUE[,...]` (mode, link, vlan)"},
					&cli.StringSliceFlag{Name: "disk-parameters", Aliases: []string{"D"}, Usage: "disk parameters `TEMPLATE:KEY=VALUE[,...]` (repeatable)"},
					&cli.StringSliceFlag{Name: "os-parameters", Aliases: []string{"O"}, Usage: "OS parameters `OS:KEY=VALUE[,...]` (repeatable)"},
					&cli.StringFlag{Name: "enabled-hypervisors", Usage: "hypervisors instances may use, `HV[,HV...]`; the first is the default"},
					uidPoolFlag("uid-pool", "replace the user-id pool with `UIDS`, e.g. 1000-1009,1020 (\"\": empty it, which turns the pool off)"),
					uidPoolFlag("add-uids", "add `UIDS` (uids and ranges) to the user-id pool"),
					uidPoolFlag("remove-uids", "remove `UIDS` from the user-id pool: whole ranges as gnt cluster info lists them"),
				},
				Action: e.do(clusterModify),
			},
			{
				Name:  "master-failover",
				Usage: "hand the master role (Raft leadership) to another master candidate",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "to", Usage: "`NODE` to become master (default: any voter)"},
				},
				Action: e.do(clusterMasterFailover),
			},
			{
				Name:  "capacity",
				Usage: "how many instances of a size fit, and where (the allocators of --iallocator or the cluster's default list, counting reservations)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "memory", Value: "128", Usage: "memory per instance, e.g. 512 or 2G"},
					&cli.StringSliceFlag{Name: "disk", Usage: "a disk of `SIZE` (repeatable)"},
					&cli.IntFlag{Name: "vcpus", Value: 1, Usage: "vcpus per instance"},
					&cli.StringFlag{Name: "disk-template", Aliases: []string{"t"}, Usage: "plain, drbd, file, sharedfile or diskless (default: plain with disks)"},
					&cli.StringFlag{Name: "group", Usage: "only this node group"},
					&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "count with these allocators, tried in order, `NAME[,NAME...]` (default: the cluster's --default-iallocator)"},
				},
				Action: e.do(clusterCapacity),
			},
			{
				Name:  "balance",
				Usage: "balance memory, disk and vcpus load across the nodes with the built-in balancer (maintd's, docs/repair.md)",
				Description: "Plans moves greedily, each lowering the load score most (reservations moved in the configuration, live migrations\n" +
					"to a secondary, new drbd secondaries), no two touching the same node, and submits one job per move (all together);\n" +
					"--dry-run prints the plan only. Without --submit it waits for the jobs.",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "max-moves", Usage: "most moves, 1 to 1000 (default: the cluster's --auto-balance-max-moves)"},
					&cli.Float64Flag{Name: "threshold", Usage: "balance only when a resource's load spread is over this `FRACTION` (default: the cluster's --auto-balance-threshold)"},
					&cli.BoolFlag{Name: "dry-run", Usage: "print the plan, submit nothing"},
				},
				Action: e.do(clusterBalance),
			},
			{
				Name:   "peers",
				Usage:  "list the Raft peers (master candidates) and their state",
				Action: e.do(clusterPeers),
			},
			e.clusterEpoCommand(),
			e.clusterVerifyCommand(),
			e.clusterRAPIUsersCommand(),
			e.clusterSnapshotCommand(),
			e.clusterRenewCryptoCommand(),
		}, e.tagCommands("cluster", false, func(string) string { return "/2/tags" })...),
	}
}

func clusterInit(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	r := flagReader{c: c}
	req := rpc.InitRequest{ClusterName: args[0]}
	if p := r.int("candidate-pool-size"); p != nil {
		if *p < 1 {
			r.fail("--candidate-pool-size must be at least 1")
		}
		req.CandidatePoolSize = *p
	}
	if v := r.int("max-raft-voters"); v != nil {
		if *v < 1 {
			r.fail("--max-raft-voters must be at least 1")
		}
		req.MaxVoters = *v
	}
	req.MaintdHarep = r.yesNo("maintd-harep")
	if r.err != nil {
		return r.err
	}
	if p, err := uidPoolOption(c, "uid-pool"); err != nil {
		return err
	} else if p != nil {
		req.UIDPool = *p
	}
	// Only the first address: init is for one particular, uninitialised gntd.
	// The gntd has no cluster CA yet: its certificate is a throw-away one
	// that cannot be checked (init is accepted only from the gntd's own
	// machine).
	initCfg := s.cfg
	initCfg.TLS = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	api := newAPIClient(initCfg, s.cfg.Servers[:1])
	var raw json.RawMessage
	var ans struct {
		Name string `json:"cluster_name"`
		UUID string `json:"cluster_uuid"`
	}
	if _, err := api.Do(ctx, http.MethodPost, "/2/gnt/init", nil, req, &raw); err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	if err := decode(raw, &ans); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "Initialised cluster %s (UUID %s)\n", ans.Name, ans.UUID)
	return nil
}

func clusterInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	var o object
	raw, err := s.getInto(ctx, "/2/info", nil, &o)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	w := s.stdout
	fmt.Fprintf(w, "Cluster name: %s\n", str(o, "name"))
	fmt.Fprintf(w, "Cluster UUID: %s\n", str(o, "uuid"))
	fmt.Fprintf(w, "Creation time: %s\n", epoch(o, "ctime"))
	fmt.Fprintf(w, "Modification time: %s\n", epoch(o, "mtime"))
	fmt.Fprintf(w, "Master node: %s\n", orNone(str(o, "master")))
	fmt.Fprintf(w, "Raft leader: %s\n", orNone(str(o, "leader")))
	fmt.Fprintf(w, "Configuration serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "Software version: %s\n", str(o, "software_version"))
	fmt.Fprintf(w, "Protocol version: %s\n", str(o, "protocol_version"))
	fmt.Fprintf(w, "Configuration format version: %s\n", str(o, "config_version"))
	fmt.Fprintf(w, "OS api version: %s\n", str(o, "os_api_version"))
	fmt.Fprintf(w, "Export interface: %s\n", str(o, "export_version"))
	if arch := list(o, "architecture"); len(arch) == 2 {
		fmt.Fprintf(w, "Architecture (this node): %s (%s)\n", arch[0], arch[1])
	}
	fmt.Fprintf(w, "Tags: %s\n", tagList(o))
	fmt.Fprintf(w, "Cluster parameters:\n")
	fmt.Fprintf(w, "  - candidate pool size: %s\n", str(o, "candidate_pool_size"))
	fmt.Fprintf(w, "  - maximum Raft voters: %s\n", str(o, "max_raft_voters"))
	fmt.Fprintf(w, "  - default instance allocator: %s\n", orNone(str(o, "default_iallocator")))
	fmt.Fprintf(w, "  - anonymous RAPI reads: %s\n", str(o, "rapi_anonymous_read"))
	fmt.Fprintf(w, "  - uid pool: %s\n", formatUIDPoolJSON(o["uid_pool"]))
	fmt.Fprintf(w, "Default node parameters:\n")
	nd, _ := o["ndparams"].(map[string]any)
	printParams(w, "  ", nd, nil)
	fmt.Fprintf(w, "Default hypervisor: %s\n", orNone(str(o, "default_hypervisor")))
	fmt.Fprintf(w, "Enabled hypervisors: %s\n", orNone(strings.Join(list(o, "enabled_hypervisors"), ", ")))
	fmt.Fprintf(w, "Hypervisor parameters:\n")
	hv, _ := o["hvparams"].(map[string]any)
	for _, name := range sortedKeys(hv) {
		fmt.Fprintf(w, "  - %s:\n", name)
		p, _ := hv[name].(map[string]any)
		printParams(w, "      ", p, nil)
	}
	for _, p := range []struct{ title, field string }{{"Default instance parameters", "beparams"}, {"Default nic parameters", "nicparams"}} {
		fmt.Fprintf(w, "%s:\n", p.title)
		m, _ := o[p.field].(map[string]any)
		d, _ := m["default"].(map[string]any)
		printParams(w, "  ", d, nil)
	}
	for _, p := range []struct{ title, field string }{{"Disk parameters", "diskparams"}, {"OS parameters", "osparams"}} {
		fmt.Fprintf(w, "%s:\n", p.title)
		m, _ := o[p.field].(map[string]any)
		if len(m) == 0 {
			fmt.Fprintf(w, "  (none)\n")
		}
		for _, name := range sortedKeys(m) {
			fmt.Fprintf(w, "  - %s:\n", name)
			x, _ := m[name].(map[string]any)
			printParams(w, "      ", x, nil)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func clusterGetMaster(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	var o object
	raw, err := s.getInto(ctx, "/2/info", nil, &o)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	fmt.Fprintln(s.stdout, str(o, "master"))
	return nil
}

func clusterModify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	r := flagReader{c: c}
	body := rpc.ModifyClusterRequest{
		CandidatePoolSize: r.int("candidate-pool-size"),
		MaxVoters:         r.int("max-raft-voters"),
		DefaultIAllocator: r.string("default-iallocator"),
		NDParams:          r.ndparams("node-parameters"),

		MaintRoundDelay:               r.int64("maintenance-interval"),
		MaintBalance:                  r.yesNo("auto-balance-cluster"),
		MaintdHarep:                   r.yesNo("maintd-harep"),
		MaintBalanceThresh:            r.float("auto-balance-threshold"),
		MaintBalanceMaxMoves:          r.int("auto-balance-max-moves"),
		DiagnoseDataCollectorFilename: r.string("diagnose-data-collector-filename"),
		DiagnoseInterval:              r.seconds("diagnose-interval"),
		RepairDeadGrace:               r.seconds("repair-dead-grace"),
		RepairBreakerShare:            r.float("repair-breaker-share"),
		RepairBreakerNodes:            r.int("repair-breaker-nodes"),
		RepairMaxEvacuations:          r.int("repair-max-evacuations"),
		RepairRoundJobLimit:           r.int("repair-round-job-limit"),
		RepairJobDelay:                r.seconds("repair-job-delay"),
		RAPIAnonymousRead:             r.yesNo("rapi-anonymous-read"),
	}
	if r.err != nil {
		return r.err
	}
	if err := readClusterParams(c, &body); err != nil {
		return err
	}
	j, err := s.change(ctx, http.MethodPut, "/2/modify", nil, body)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	printChanges(s.stdout, "cluster", j.result(0))
	return nil
}

func clusterMasterFailover(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	body := struct {
		Target string `json:"target,omitempty"`
	}{Target: c.String("to")}
	var q url.Values
	if s.cfg.Reason != "" {
		q = with(nil, "reason", s.cfg.Reason)
	}
	var raw json.RawMessage
	if _, err := s.api.Do(ctx, http.MethodPost, "/2/gnt/master-failover", q, body, &raw); err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	var ans struct {
		Master string `json:"master"`
	}
	if err := decode(raw, &ans); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "Master is now %s\n", ans.Master)
	return nil
}

func clusterPeers(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	var peers []object
	raw, err := s.getInto(ctx, "/2/raft/peers", nil, &peers)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	known := func(o object, f func() string) string {
		if !flag(o, "known") {
			return "?"
		}
		return f()
	}
	cols := []column{
		{"ID", func(o object) string { return str(o, "id") }},
		{"Address", func(o object) string { return str(o, "address") }},
		{"Suffrage", func(o object) string { return str(o, "suffrage") }},
		{"Leader", func(o object) string { return formatValue(flag(o, "leader")) }},
		{"Applied", func(o object) string { return known(o, func() string { return str(o, "applied_index") }) }},
		{"LastContact", func(o object) string {
			return known(o, func() string {
				sec, _ := num(o, "last_contact_seconds")
				return time.Duration(sec * float64(time.Second)).Round(time.Millisecond).String()
			})
		}},
	}
	return printTable(s.stdout, cols, peers, true)
}

// result returns the result of the job's i-th opcode (nil if there is none).
func (j *job) result(i int) []byte {
	if j == nil || i >= len(j.OpResult) {
		return nil
	}
	return j.OpResult[i]
}

func clusterCapacity(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	mem, err := parseSize(c.String("memory"))
	if err != nil {
		return usagef(c, "--memory: %v", err)
	}
	q := url.Values{"memory": {strconv.FormatInt(mem, 10)}, "vcpus": {strconv.Itoa(c.Int("vcpus"))}}
	for _, d := range c.StringSlice("disk") {
		size, err := parseSize(d)
		if err != nil {
			return usagef(c, "--disk: %v", err)
		}
		q.Add("disk", strconv.FormatInt(size, 10))
	}
	if t := c.String("disk-template"); t != "" {
		q.Set("disk_template", t)
	}
	if g := c.String("group"); g != "" {
		q.Set("group", g)
	}
	if l := c.String("iallocator"); l != "" {
		q.Set("iallocator", l)
	}
	var res struct {
		IAllocator  string         `json:"iallocator"`
		Failed      []string       `json:"iallocators_failed"`
		Count       int            `json:"count"`
		Primaries   map[string]int `json:"primaries"`
		Secondaries map[string]int `json:"secondaries"`
		Groups      map[string]int `json:"groups"`
		Limit       string         `json:"limit"`
		Truncated   bool           `json:"truncated"`
	}
	raw, err := s.getInto(ctx, "/2/gnt/capacity", q, &res)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	more := ""
	if res.Truncated {
		more = " or more"
	}
	fmt.Fprintf(s.stdout, "%d%s instance(s) of %d MiB memory, %d vcpu(s), disks %v MiB fit\n", res.Count, more, mem, c.Int("vcpus"), q["disk"])
	var nodes []string
	for n := range res.Primaries {
		nodes = append(nodes, n)
	}
	for n := range res.Secondaries {
		if _, ok := res.Primaries[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		fmt.Fprintf(s.stdout, "  %-20s %d as primary, %d as secondary\n", n, res.Primaries[n], res.Secondaries[n])
	}
	if res.Limit != "" {
		fmt.Fprintf(s.stdout, "one more does not fit: %s\n", res.Limit)
	}
	for _, f := range res.Failed {
		fmt.Fprintln(s.stdout, f)
	}
	if res.IAllocator != "" && (res.IAllocator != "hail" || len(res.Failed) > 0) {
		fmt.Fprintf(s.stdout, "counted by iallocator %s\n", res.IAllocator)
	}
	return nil
}

func clusterBalance(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	req := rpc.BalanceRequest{MaxMoves: c.Int("max-moves"), DryRun: c.Bool("dry-run")}
	if c.IsSet("max-moves") && req.MaxMoves < 1 {
		return usagef(c, "--max-moves must be between 1 and %d, got %d", fsm.MaxBalanceMaxMoves, req.MaxMoves)
	}
	if c.IsSet("threshold") {
		t := c.Float64("threshold")
		req.Threshold = &t
	}
	var raw json.RawMessage
	meta, err := s.api.Do(ctx, http.MethodPost, "/2/gnt/balance", nil, req, &raw)
	if err != nil {
		return err
	}
	var res struct {
		Moves []struct {
			Instance, Kind, From, To string
			ScoreBefore              float64 `json:"score_before"`
			ScoreAfter               float64 `json:"score_after"`
		} `json:"moves"`
		Score  float64  `json:"score"`
		Spread string   `json:"spread"`
		Notes  []string `json:"notes"`
		End    string   `json:"end"`
		Jobs   []int64  `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("decoding the server's answer: %w", err)
	}
	if s.cfg.JSON() {
		if err := printJSON(s.stdout, raw); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(s.stdout, "load score %.4f, largest spread %s\n", res.Score, res.Spread)
		for _, n := range res.Notes {
			fmt.Fprintln(s.stdout, n)
		}
		for i, mv := range res.Moves {
			job := ""
			if i < len(res.Jobs) {
				job = fmt.Sprintf(" (job %d)", res.Jobs[i])
			}
			fmt.Fprintf(s.stdout, "%d. %s %s from %s to %s: score %.4f -> %.4f%s\n", i+1, mv.Kind, mv.Instance, mv.From, mv.To, mv.ScoreBefore, mv.ScoreAfter, job)
		}
		if res.End != "" {
			fmt.Fprintln(s.stdout, res.End)
		}
		if len(res.Moves) == 0 {
			fmt.Fprintln(s.stdout, "nothing to move")
		}
	}
	if req.DryRun || s.cfg.Submit || len(res.Jobs) == 0 {
		return nil
	}
	var failed []string
	for _, id := range res.Jobs {
		j, _, err := s.waitJob(ctx, id, meta.Index)
		if err != nil {
			return err
		}
		if j.Status != fsm.StatusSuccess {
			failed = append(failed, fmt.Sprintf("job %d: %v", id, j.failure()))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d balancing moves failed: %s", len(failed), len(res.Jobs), strings.Join(failed, "; "))
	}
	if !s.cfg.JSON() {
		fmt.Fprintf(s.stdout, "%d move(s) done\n", len(res.Jobs))
	}
	return nil
}

// readClusterParams reads the parameter model's options of cluster
// modify (-H, -B, -N, -D, -O, --enabled-hypervisors).
func readClusterParams(c *cli.Context, body *rpc.ModifyClusterRequest) error {
	var err error
	if c.IsSet("hypervisor-parameters") {
		if body.HVParams, err = parseHVParams(c.StringSlice("hypervisor-parameters")); err != nil {
			return usagef(c, "-H: %v", err)
		}
	}
	if c.IsSet("backend-parameters") {
		if body.BEParams, err = typedParams(c.String("backend-parameters"), fsm.BEParamDefs); err != nil {
			return usagef(c, "-B: %v", err)
		}
	}
	if c.IsSet("nic-parameters") {
		if body.NICParams, err = typedParams(c.String("nic-parameters"), fsm.NICParamDefs); err != nil {
			return usagef(c, "-N: %v", err)
		}
	}
	if c.IsSet("disk-parameters") {
		if body.DiskParams, err = parseDiskParams(c.StringSlice("disk-parameters")); err != nil {
			return usagef(c, "-D: %v", err)
		}
	}
	if c.IsSet("os-parameters") {
		body.OSParams = map[string]map[string]any{}
		for _, o := range c.StringSlice("os-parameters") {
			os, rest, err := identParams(o)
			if err != nil {
				return usagef(c, "-O: %v", err)
			}
			if body.OSParams[os], err = parseOSParams(rest); err != nil {
				return usagef(c, "-O %s: %v", os, err)
			}
		}
	}
	if c.IsSet("enabled-hypervisors") {
		hvs := []string{}
		for _, h := range strings.Split(c.String("enabled-hypervisors"), ",") {
			if h = strings.TrimSpace(h); h != "" {
				hvs = append(hvs, h)
			}
		}
		if len(hvs) == 0 {
			return usagef(c, "--enabled-hypervisors: name at least one hypervisor")
		}
		body.EnabledHypervisors = hvs
		body.DefaultHypervisor = &hvs[0]
	}
	for _, f := range []struct {
		name string
		dst  **[][]int64
	}{{"uid-pool", &body.UIDPool}, {"add-uids", &body.AddUIDs}, {"remove-uids", &body.RemoveUIDs}} {
		if *f.dst, err = uidPoolOption(c, f.name); err != nil {
			return err
		}
	}
	return nil
}

// uidPoolFlag is a user-id pool option: uids and ranges, Ganeti's syntax.
func uidPoolFlag(name, usage string) cli.Flag {
	return &cli.StringFlag{Name: name, Usage: usage}
}

// uidPoolOption reads a user-id pool option into Ganeti's list of [lo,
// hi] pairs; nil when the option is not given.
func uidPoolOption(c *cli.Context, name string) (*[][]int64, error) {
	if !c.IsSet(name) {
		return nil, nil
	}
	pool, e := fsm.ParseUIDPool(name, c.String(name))
	if e != nil {
		return nil, usagef(c, "--%s: %s", name, strings.TrimPrefix(e.Msg, name+": "))
	}
	out := fsm.UIDRangesJSON(pool)
	return &out, nil
}

func jsonInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number: %v", v)
	}
	return n.Int64()
}

// formatUIDPoolJSON shows the API's uid_pool as gnt cluster info prints
// it (the form --uid-pool takes), "(empty)" when off.
func formatUIDPoolJSON(v any) string {
	l, _ := v.([]any)
	var pool []fsm.UIDRange
	for _, x := range l {
		p, _ := x.([]any)
		if len(p) != 2 {
			return fmt.Sprintf("(unreadable: %v)", v)
		}
		lo, err1 := jsonInt(p[0])
		hi, err2 := jsonInt(p[1])
		if err1 != nil || err2 != nil {
			return fmt.Sprintf("(unreadable: %v)", v)
		}
		pool = append(pool, fsm.UIDRange{lo, hi})
	}
	if len(pool) == 0 {
		return "(empty)"
	}
	return fsm.FormatUIDPool(pool)
}
