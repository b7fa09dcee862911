package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

func networkPath(name string) string { return "/2/networks/" + url.PathEscape(name) }

// networkParamFlags are the flags add and modify share (gnt-network's).
func networkParamFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gateway", Aliases: []string{"g"}, Usage: "the IPv4 `GATEWAY` of the network (modify: \"none\" clears it)"},
		&cli.StringFlag{Name: "network6", Usage: "the IPv6 `NETWORK` in CIDR form (modify: \"none\" clears it)"},
		&cli.StringFlag{Name: "gateway6", Usage: "the IPv6 `GATEWAY` (modify: \"none\" clears it)"},
		&cli.StringFlag{Name: "mac-prefix", Aliases: []string{"m"}, Usage: "three-octet MAC `PREFIX` of the network's NICs, like aa:00:00 (modify: \"none\" clears it)"},
		&cli.StringFlag{Name: "add-reserved-ips", Usage: "reserve `IPS` (comma-separated) so that no NIC takes them from the pool"},
	}
}

func (e environment) networkCommand() *cli.Command {
	return &cli.Command{
		Name:  "network",
		Usage: "IP network operations (gnt-network)",
		Description: "A network is an IPv4 subnet (at most a /16, at least a /30) with a pool of addresses, connected to\n" +
			"node groups with the NIC mode and link its NICs get there. A NIC on a network (gnt instance add\n" +
			"--net network=NAME,ip=pool) takes the lowest free address of the pool; the network, broadcast\n" +
			"and gateway addresses, the nodes' addresses and --add-reserved-ips are reserved.",
		Subcommands: append([]*cli.Command{
			{
				Name:      "add",
				Usage:     "create a network",
				ArgsUsage: "NAME",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "network", Aliases: []string{"N"}, Usage: "the IPv4 `NETWORK` in CIDR form, like 10.0.0.0/24 (required)"},
					&cli.BoolFlag{Name: "no-conflicts-check", Usage: "do not reserve the nodes' addresses that fall in the network"},
					&cli.StringFlag{Name: "tags", Usage: "the network's `TAGS`, comma-separated"},
				}, networkParamFlags()...),
				Action: e.do(networkAdd),
			},
			{
				Name:      "modify",
				Usage:     "change a network's gateways, IPv6 network, MAC prefix or reserved addresses",
				ArgsUsage: "NAME",
				Flags: append(networkParamFlags(),
					&cli.StringFlag{Name: "remove-reserved-ips", Usage: "release the reserved `IPS` (comma-separated)"}),
				Action: e.do(networkModify),
			},
			{
				Name:      "rename",
				Usage:     "rename a network",
				ArgsUsage: "NAME NEW-NAME",
				Action:    e.do(networkRename),
			},
			{
				Name:      "remove",
				Usage:     "remove a network that no group is connected to",
				ArgsUsage: "NAME",
				Action:    e.do(networkRemove),
			},
			{
				Name:      "list",
				Usage:     "list networks",
				ArgsUsage: "[NAME...]",
				Flags:     append(listFlags(), filterFlag()),
				Action:    e.do(networkList),
			},
			listFieldsCommand(networkListing),
			{
				Name:      "info",
				Usage:     "show networks' configuration and address pools",
				ArgsUsage: "[NAME...]",
				Action:    e.do(networkInfo),
			},
			{
				Name:      "connect",
				Usage:     "connect a network to node groups (all groups when none is named)",
				ArgsUsage: "NETWORK [GROUP...]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "nic-parameters", Aliases: []string{"N"}, Usage: "the NIC `PARAMS` of the connection: mode=bridged|routed|openvswitch,link=LINK[,vlan=VLAN] (required)"},
					&cli.BoolFlag{Name: "no-conflicts-check", Usage: "do not refuse NICs of the groups' instances whose addresses fall in the network"},
				},
				Action: e.do(networkConnect),
			},
			{
				Name:      "disconnect",
				Usage:     "disconnect a network from node groups (all it is connected to when none is named)",
				ArgsUsage: "NETWORK [GROUP...]",
				Action:    e.do(networkDisconnect),
			},
		}, e.tagCommands("network", true, func(n string) string { return networkPath(n) + "/tags" })...),
	}
}

// ipListFlag reads a comma-separated address list flag ("" when unset).
func ipListFlag(c *cli.Context, name string) ([]string, error) {
	if !c.IsSet(name) {
		return nil, nil
	}
	l, e := fsm.ParseIPList("--"+name, c.String(name), fsm.MaxReservedIPsPerOp)
	if e != nil {
		return nil, usagef(c, "%s", e.Msg)
	}
	return l, nil
}

// networkBody reads the flags add and modify share into an opcode body.
func networkBody(c *cli.Context) (map[string]any, error) {
	body := map[string]any{}
	for flag, field := range map[string]string{"gateway": "gateway", "network6": "network6", "gateway6": "gateway6", "mac-prefix": "mac_prefix"} {
		if c.IsSet(flag) {
			body[field] = c.String(flag)
		}
	}
	for flag, field := range map[string]string{"add-reserved-ips": "add_reserved_ips", "remove-reserved-ips": "remove_reserved_ips"} {
		l, err := ipListFlag(c, flag)
		if err != nil {
			return nil, err
		}
		if l != nil {
			body[field] = l
		}
	}
	return body, nil
}

func networkAdd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	if !c.IsSet("network") {
		return usagef(c, "--network (-N) is required: the IPv4 network in CIDR form, like 10.0.0.0/24")
	}
	body, err := networkBody(c)
	if err != nil {
		return err
	}
	body["network_name"] = args[0]
	body["network"] = c.String("network")
	if c.Bool("no-conflicts-check") {
		body["conflicts_check"] = false
	}
	if c.IsSet("tags") {
		body["tags"] = strings.Split(c.String("tags"), ",")
	}
	_, err = s.change(ctx, http.MethodPost, "/2/networks", nil, body)
	return err
}

func networkModify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body, err := networkBody(c)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return usagef(c, "nothing to change: give at least one of --gateway, --network6, --gateway6, --mac-prefix, --add-reserved-ips, --remove-reserved-ips")
	}
	j, err := s.change(ctx, http.MethodPut, networkPath(args[0])+"/modify", nil, body)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	printChanges(s.stdout, "network "+args[0], j.result(0))
	return nil
}

func networkRename(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 2, 2); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodPut, networkPath(args[0])+"/rename", nil, map[string]any{"new_name": args[1]})
	return err
}

func networkRemove(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodDelete, networkPath(args[0]), nil, nil)
	return err
}

// parseNICParams reads --nic-parameters mode=M[,link=L][,vlan=V] into
// the fields of OP_NETWORK_CONNECT.
func parseNICParams(spec string) (map[string]any, error) {
	out := map[string]any{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		field := map[string]string{"mode": "network_mode", "link": "network_link", "vlan": "network_vlan"}[k]
		if !ok || field == "" {
			return nil, fmt.Errorf("--nic-parameters %q: want mode=MODE,link=LINK[,vlan=VLAN], not %q", spec, kv)
		}
		if _, dup := out[field]; dup {
			return nil, fmt.Errorf("--nic-parameters %q names %s twice", spec, k)
		}
		out[field] = v
	}
	if _, ok := out["network_mode"]; !ok {
		return nil, fmt.Errorf("--nic-parameters %q: mode is required (bridged, routed or openvswitch)", spec)
	}
	if _, ok := out["network_link"]; !ok {
		out["network_link"] = ""
	}
	return out, nil
}

// networkGroups returns the groups named, or every group (connect) or
// every group the network is connected to (disconnect).
func networkGroups(ctx context.Context, s *session, network string, named []string, connected bool) ([]string, error) {
	if len(named) > 0 {
		return named, nil
	}
	if connected {
		var n struct {
			GroupList [][]string `json:"group_list"`
		}
		if _, err := s.getInto(ctx, networkPath(network), nil, &n); err != nil {
			return nil, err
		}
		var out []string
		for _, g := range n.GroupList {
			if len(g) > 0 {
				out = append(out, g[0])
			}
		}
		return out, nil
	}
	var groups []struct {
		Name string `json:"name"`
	}
	if _, err := s.getInto(ctx, "/2/groups", nil, &groups); err != nil {
		return nil, err
	}
	var out []string
	for _, g := range groups {
		out = append(out, g.Name)
	}
	return out, nil
}

func networkConnect(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, -1); err != nil {
		return err
	}
	if !c.IsSet("nic-parameters") {
		return usagef(c, "--nic-parameters (-N) is required: mode=MODE,link=LINK")
	}
	params, err := parseNICParams(c.String("nic-parameters"))
	if err != nil {
		return usagef(c, "%v", err)
	}
	groups, err := networkGroups(ctx, s, args[0], args[1:], false)
	if err != nil {
		return err
	}
	for _, g := range groups {
		body := map[string]any{"group_name": g}
		for k, v := range params {
			body[k] = v
		}
		if c.Bool("no-conflicts-check") {
			body["conflicts_check"] = false
		}
		if _, err := s.change(ctx, http.MethodPut, networkPath(args[0])+"/connect", nil, body); err != nil {
			return fmt.Errorf("connecting %s to group %s: %w", args[0], g, err)
		}
	}
	return nil
}

func networkDisconnect(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, -1); err != nil {
		return err
	}
	groups, err := networkGroups(ctx, s, args[0], args[1:], true)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if _, err := s.change(ctx, http.MethodPut, networkPath(args[0])+"/disconnect", nil, map[string]any{"group_name": g}); err != nil {
			return fmt.Errorf("disconnecting %s from group %s: %w", args[0], g, err)
		}
	}
	return nil
}

// The fields of GET /2/networks?bulk=1 (rpc.NetworkInfo).
var networkFields = fieldTable(`
name|` + kindText + `|Network|Name
uuid|` + kindText + `|UUID|Network UUID
network|` + kindText + `|Subnet|IPv4 subnet
gateway|` + kindOther + `|Gateway|IPv4 gateway
network6|` + kindOther + `|IPv6Subnet|IPv6 subnet
gateway6|` + kindOther + `|IPv6Gateway|IPv6 gateway
mac_prefix|` + kindOther + `|MacPrefix|MAC address prefix
free_count|` + kindNumber + `|FreeCount|Number of available addresses
reserved_count|` + kindNumber + `|ReservedCount|Number of reserved addresses
map|` + kindText + `|Map|Actual mapping ('X' reserved or used, '.' free)
external_reservations|` + kindText + `|ExternalReservations|External reservations
group_list|` + kindOther + `|GroupList|List of nodegroups (group name, NIC mode, NIC link, NIC vlan)
group_cnt|` + kindNumber + `|NodeGroups|Number of nodegroups
inst_list|` + kindOther + `|InstanceList|List of instances
inst_cnt|` + kindNumber + `|Instances|Number of instances
tags|` + kindOther + `|Tags|Tags
serial_no|` + kindNumber + `|SerialNo|Network object serial number, incremented on each modification
ctime|` + kindTime + `|CTime|Creation timestamp
mtime|` + kindTime + `|MTime|Modification timestamp
`)

var networkListing = listing{
	kind: "network",
	path: "/2/networks",
	key:  "name",
	defaults: []listColumn{
		{title: "Network", field: "name"},
		{title: "Subnet", field: "network"},
		{title: "Gateway", field: "gateway"},
		{title: "MacPrefix", field: "mac_prefix"},
		{title: "GroupList", value: func(o object) string { return groupConnections(o) }},
		{title: "Tags", field: "tags"},
	},
	fields: networkFields,
}

// groupConnections shows group_list as Ganeti's list does:
// group(mode, link), ...
func groupConnections(o object) string {
	l, _ := o["group_list"].([]any)
	var out []string
	for _, g := range l {
		t, _ := g.([]any)
		if len(t) >= 3 {
			out = append(out, fmt.Sprintf("%v(%v, %v)", t[0], t[1], t[2]))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

func networkList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	l, names, err := s.applyFilter(ctx, c, networkListing, "network", args)
	if err != nil {
		return err
	}
	return s.list(ctx, l, names, c)
}

func networkInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.info(ctx, networkListing, args, func(o object) { showNetwork(s.stdout, o) })
}

func showNetwork(w io.Writer, o object) {
	fmt.Fprintf(w, "Network name: %s\n", str(o, "name"))
	fmt.Fprintf(w, "UUID: %s\n", str(o, "uuid"))
	fmt.Fprintf(w, "Serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "  Subnet: %s\n", str(o, "network"))
	fmt.Fprintf(w, "  Gateway: %s\n", orNone(str(o, "gateway")))
	fmt.Fprintf(w, "  IPv6 Subnet: %s\n", orNone(str(o, "network6")))
	fmt.Fprintf(w, "  IPv6 Gateway: %s\n", orNone(str(o, "gateway6")))
	fmt.Fprintf(w, "  Mac Prefix: %s\n", orNone(str(o, "mac_prefix")))
	fmt.Fprintf(w, "  Size: %d\n", len(str(o, "map")))
	fmt.Fprintf(w, "  Free: %s (%s)\n", str(o, "free_count"), percent(o))
	fmt.Fprintf(w, "  Usage map:\n")
	m := str(o, "map")
	for i := 0; i < len(m); i += 64 {
		end := min(i+64, len(m))
		fmt.Fprintf(w, "     %5d: %s\n", i, m[i:end])
	}
	fmt.Fprintf(w, "         (X) used    (.) free\n")
	fmt.Fprintf(w, "  Externally reserved IPs:\n")
	if r := str(o, "external_reservations"); r != "" {
		fmt.Fprintf(w, "    %s\n", r)
	}
	fmt.Fprintf(w, "  Connected to node groups:\n")
	l, _ := o["group_list"].([]any)
	for _, g := range l {
		if t, _ := g.([]any); len(t) >= 3 {
			fmt.Fprintf(w, "    %v (mode:%v link:%v)\n", t[0], t[1], t[2])
		}
	}
	if len(l) == 0 {
		fmt.Fprintf(w, "    none\n")
	}
	insts := list(o, "inst_list")
	fmt.Fprintf(w, "  Used by %d instance(s):\n", len(insts))
	for _, i := range insts {
		fmt.Fprintf(w, "    %s\n", i)
	}
	fmt.Fprintf(w, "  Tags: %s\n", tagList(o))
}

func percent(o object) string {
	size := len(str(o, "map"))
	free, err := strconv.Atoi(str(o, "free_count"))
	if size == 0 || err != nil {
		return "?"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(free)/float64(size))
}
