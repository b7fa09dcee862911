package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/confd"
)

// confdCommand is `gnt confd query`: one confd request, sent as Ganeti's
// client sends it to several candidates, answered with the highest serial.
func (e environment) confdCommand() *cli.Command {
	var types []string
	for _, t := range confd.RequestTypes() {
		types = append(types, strings.ToLower(strings.ReplaceAll(t.String(), "_", "-")))
	}
	return &cli.Command{
		Name:  "confd",
		Usage: "ask the candidates' confd servers (Ganeti's confd protocol, UDP)",
		Subcommands: []*cli.Command{{
			Name:      "query",
			Usage:     "send one confd request and print the answer with the highest serial",
			ArgsUsage: "TYPE [QUERY...]",
			Description: "TYPE is one of " + strings.Join(types, ", ") + " (or Ganeti's name, or its number).\n" +
				"QUERY is a node name, instance name, link or JSON pointer as the type needs; for\n" +
				"node-pip-by-instance-ip one IP, or several for the list form; --query-json gives any query.\n" +
				"The candidates are found from the API servers (--server) and the MC_PIP_LIST answer,\n" +
				"unless --address names them. The global --timeout bounds the wait (default here 10s).\n" +
				"The exit status is 1 when the chosen answer is an error.",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "coverage", Usage: "how many candidates to ask: 0 for min(#candidates, 6), -1 for all"},
				&cli.StringFlag{Name: "address", Aliases: []string{"a"}, Usage: "comma-separated confd `ADDRESSES` (host[:port]) of the candidates to ask, instead of finding them"},
				&cli.IntFlag{Name: "port", Value: confd.DefaultPort, Usage: "confd `PORT` of addresses given without one"},
				&cli.StringFlag{Name: "key-file", Usage: "cluster key `FILE` (default: $GNT_KEY_FILE, else ~/.config/gnt/cluster.key, else /var/lib/gnt/cluster.key)"},
				&cli.StringFlag{Name: "link", Usage: "NIC `LINK` for node-pip-by-instance-ip"},
				&cli.StringFlag{Name: "fields", Usage: "for cluster-master: comma-separated `FIELDS` among name, ip, mnode-pip"},
				&cli.StringFlag{Name: "query-json", Usage: "the query as `JSON`, sent as it is"},
			},
			Action: e.do(func(ctx context.Context, s *session, c *cli.Context, args []string) error {
				return e.confdQuery(ctx, s, c, args)
			}),
		}},
	}
}

func (e environment) confdQuery(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, -1); err != nil {
		return err
	}
	typ, err := confd.ParseRequestType(args[0])
	if err != nil {
		return usagef(c, "%v", err)
	}
	query, err := buildConfdQuery(c, typ, args[1:])
	if err != nil {
		return err
	}
	key, err := readClusterKey(c.String("key-file"), e.getenv)
	if err != nil {
		return err
	}
	port := c.Int("port")
	if port <= 0 || port > 65535 {
		return usagef(c, "--port %d is out of range", port)
	}
	wait := confd.ExpireTimeout
	if c.IsSet("timeout") {
		wait = s.cfg.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()

	client := &confd.Client{Key: key}
	if a := c.String("address"); a != "" {
		for _, p := range strings.Split(a, ",") {
			addr, err := confdAddr(strings.TrimSpace(p), port)
			if err != nil {
				return usagef(c, "--address: %v", err)
			}
			client.Peers = append(client.Peers, addr)
		}
	} else {
		client.Peers, err = discoverCandidates(ctx, key, s.cfg.Servers, port, s)
		if err != nil {
			return err
		}
	}
	coverage := c.Int("coverage")
	if coverage < -1 {
		return usagef(c, "--coverage must be -1, 0 or positive")
	}
	res, err := client.Query(ctx, typ, query, coverage)
	if err != nil {
		if errors.Is(err, confd.ErrNoReplies) {
			return fmt.Errorf("no confd reply from %s within %v (is the key right? are they candidates?)", strings.Join(client.Peers, ", "), wait)
		}
		return err
	}
	if s.cfg.JSON() {
		if err := printConfdJSON(s, typ, res); err != nil {
			return err
		}
	} else {
		printConfd(s, typ, res)
	}
	if res.Reply.Status != confd.StatusOK {
		return &confdAnswerError{res.Reply}
	}
	return nil
}

// confdAnswerError makes the exit status 1 after an error answer was
// printed.
type confdAnswerError struct{ r confd.Reply }

func (e *confdAnswerError) Error() string {
	return "confd answered " + describeConfdAnswer(confd.ReqPing, e.r)
}

func buildConfdQuery(c *cli.Context, typ confd.RequestType, args []string) (confd.Query, error) {
	if raw := c.String("query-json"); raw != "" {
		if len(args) > 0 || c.IsSet("link") || c.IsSet("fields") {
			return confd.Query{}, usagef(c, "--query-json replaces QUERY, --link and --fields")
		}
		// The client library sends queries as Query values: decode into
		// one the way the server would read it.
		msg := confd.AppendRequestMsg(nil, typ, []byte(raw), "x")
		req, _, err := confd.ParseRequest(msg, nil)
		if err != nil {
			return confd.Query{}, usagef(c, "--query-json %q is not a query confd accepts (null, a string or an object of the CONFD_REQQ keys)", raw)
		}
		return req.Query, nil
	}
	switch typ {
	case confd.ReqNodePipByInstanceIP:
		if len(args) == 0 {
			return confd.Query{}, usagef(c, "node-pip-by-instance-ip needs an instance IP (or several)")
		}
		q := confd.Query{Kind: confd.QueryDict}
		if c.IsSet("link") {
			q.HasLink, q.Link = true, c.String("link")
		}
		if len(args) == 1 {
			q.HasIP, q.IP = true, args[0]
		} else {
			q.HasIPList, q.IPList = true, args
		}
		return q, nil
	case confd.ReqClusterMaster:
		if len(args) > 0 {
			return confd.Query{}, usagef(c, "cluster-master takes no QUERY; use --fields")
		}
		if !c.IsSet("fields") {
			return confd.Query{}, nil
		}
		q := confd.Query{Kind: confd.QueryDict, HasFields: true, Fields: []int{}}
		for _, f := range strings.Split(c.String("fields"), ",") {
			switch strings.ReplaceAll(strings.TrimSpace(f), "_", "-") {
			case "name":
				q.Fields = append(q.Fields, confd.FieldName)
			case "ip":
				q.Fields = append(q.Fields, confd.FieldIP)
			case "mnode-pip":
				q.Fields = append(q.Fields, confd.FieldMNodePip)
			default:
				return confd.Query{}, usagef(c, "unknown cluster-master field %q: use name, ip, mnode-pip", f)
			}
		}
		return q, nil
	}
	if c.IsSet("link") || c.IsSet("fields") {
		return confd.Query{}, usagef(c, "--link and --fields apply to node-pip-by-instance-ip and cluster-master")
	}
	switch len(args) {
	case 0:
		return confd.Query{}, nil
	case 1:
		return confd.Query{Kind: confd.QueryString, Str: args[0]}, nil
	}
	return confd.Query{}, usagef(c, "too many arguments: %s", strings.Join(args[1:], " "))
}

// readClusterKey reads the confd key: the named file, else $GNT_KEY_FILE,
// else ~/.config/gnt/cluster.key (which `gntd dev` writes), else the
// default data dir's cluster.key.
func readClusterKey(flag string, getenv func(string) string) ([]byte, error) {
	var candidates []string
	switch {
	case flag != "":
		candidates = []string{flag}
	case getenv("GNT_KEY_FILE") != "":
		candidates = []string{getenv("GNT_KEY_FILE")}
	default:
		if home := getenv("HOME"); home != "" {
			candidates = append(candidates, filepath.Join(home, ".config", "gnt", "cluster.key"))
		}
		candidates = append(candidates, "/var/lib/gnt/cluster.key")
	}
	for i, p := range candidates {
		key, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) && i < len(candidates)-1 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the cluster key: %w (give it with --key-file)", err)
		}
		if len(strings.TrimSpace(string(key))) == 0 {
			return nil, fmt.Errorf("cluster key %s is empty", p)
		}
		return key, nil
	}
	return nil, errors.New("no cluster key (give it with --key-file)")
}

func confdAddr(a string, port int) (string, error) {
	if a == "" {
		return "", errors.New("empty address")
	}
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// discoverCandidates asks the confd servers on the API servers' hosts for
// MC_PIP_LIST and returns the candidates' confd addresses; when none
// answers it goes on with the API servers' hosts.
func discoverCandidates(ctx context.Context, key []byte, servers []string, port int, s *session) ([]string, error) {
	var boot []string
	seen := map[string]bool{}
	for _, sv := range servers {
		host, _, err := net.SplitHostPort(sv)
		if err != nil {
			host = sv
		}
		if a := net.JoinHostPort(host, strconv.Itoa(port)); !seen[a] {
			seen[a] = true
			boot = append(boot, a)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	res, err := (&confd.Client{Key: key, Peers: boot}).Query(dctx, confd.ReqMcPipList, confd.Query{}, -1)
	var ips []string
	if err == nil && res.Reply.Status == confd.StatusOK && json.Unmarshal(res.Reply.Answer, &ips) == nil && len(ips) > 0 {
		out := make([]string, 0, len(ips))
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, strconv.Itoa(port)))
		}
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("finding the candidates: %w", ctx.Err())
	}
	fmt.Fprintf(s.stderr, "warning: no MC_PIP_LIST answer from %s; asking them directly\n", strings.Join(boot, ", "))
	return boot, nil
}

// describeConfdAnswer renders an answer for people: roles and error codes
// by name.
func describeConfdAnswer(typ confd.RequestType, r confd.Reply) string {
	ans := string(r.Answer)
	switch r.Status {
	case confd.StatusOK:
		if typ == confd.ReqNodeRoleByName {
			if n, err := strconv.Atoi(ans); err == nil {
				return fmt.Sprintf("%s (%s)", ans, confd.RoleName(n))
			}
		}
		return ans
	case confd.StatusError:
		if n, err := strconv.Atoi(ans); err == nil {
			return fmt.Sprintf("error %s (%s)", ans, confd.ErrorName(n))
		}
		return "error: " + ans
	case confd.StatusNotImplemented:
		return "not implemented: " + ans
	}
	return fmt.Sprintf("status %d: %s", r.Status, ans)
}

func printConfd(s *session, typ confd.RequestType, res *confd.Result) {
	w := s.stdout
	fmt.Fprintf(w, "answer:   %s\n", describeConfdAnswer(typ, res.Reply))
	fmt.Fprintf(w, "serial:   %d\n", res.Reply.Serial)
	fmt.Fprintf(w, "from:     %s\n", res.From)
	agreed := "yes"
	if !res.Agreed {
		agreed = "no"
	}
	consistent := "yes"
	if !res.Consistent {
		consistent = "NO (same serial, different answers)"
	}
	timeout := ""
	if res.TimedOut {
		timeout = "; timed out"
	}
	fmt.Fprintf(w, "replies:  %d of %d asked (needed %d%s); agreed: %s; consistent: %s\n",
		len(res.Answers), res.Sent, res.Needed, timeout, agreed, consistent)
	for _, a := range res.Answers {
		mark := ""
		if a.Reply.Serial < res.Reply.Serial {
			mark = "  (stale)"
		}
		fmt.Fprintf(w, "  %-22s serial %-6d %s%s\n", a.From, a.Reply.Serial, describeConfdAnswer(typ, a.Reply), mark)
	}
}

func printConfdJSON(s *session, typ confd.RequestType, res *confd.Result) error {
	type reply struct {
		From   string          `json:"from"`
		Status int             `json:"status"`
		Answer json.RawMessage `json:"answer"`
		Serial int64           `json:"serial"`
	}
	out := struct {
		Type       string          `json:"type"`
		Status     int             `json:"status"`
		Answer     json.RawMessage `json:"answer"`
		Serial     int64           `json:"serial"`
		From       string          `json:"from"`
		Sent       int             `json:"sent"`
		Needed     int             `json:"needed"`
		Received   int             `json:"received"`
		TimedOut   bool            `json:"timed_out"`
		Agreed     bool            `json:"agreed"`
		Consistent bool            `json:"consistent"`
		Replies    []reply         `json:"replies"`
	}{Type: typ.String(), Status: res.Reply.Status, Answer: res.Reply.Answer, Serial: res.Reply.Serial, From: res.From,
		Sent: res.Sent, Needed: res.Needed, Received: len(res.Answers), TimedOut: res.TimedOut,
		Agreed: res.Agreed, Consistent: res.Consistent, Replies: []reply{}}
	for _, a := range res.Answers {
		out.Replies = append(out.Replies, reply{a.From, a.Reply.Status, a.Reply.Answer, a.Reply.Serial})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return printJSON(s.stdout, b)
}
