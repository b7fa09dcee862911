package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

// Ganeti's parameter options: -H (hypervisor), -B (backend), -N (NIC),
// -D (disk, per template) and -O (OS) take KEY=VALUE[,KEY=VALUE...];
// the cluster's -H and -D, and an instance's -H at creation, name what
// they apply to first: HV:KEY=VALUE,... and TEMPLATE:KEY=VALUE,...
// Within a list, "\," is a literal comma; -KEY or KEY=default removes a
// setting (the level below applies again); a bare KEY sets a boolean and
// no_KEY clears it. Values are typed by the parameter tables of fsm (a
// number for an integer, true/false for a boolean; memory takes units:
// 512M, 2G); a key no table knows is sent as text for the server to refuse
// by name.

func hvparamsFlag(usage string) cli.Flag {
	return &cli.StringSliceFlag{Name: "hypervisor-parameters", Aliases: []string{"H"}, Usage: usage}
}

func beparamsFlag() cli.Flag {
	return &cli.StringFlag{Name: "backend-parameters", Aliases: []string{"B"},
		Usage: "backend parameters `KEY=VALUE[,...]` (maxmem, minmem, vcpus, auto_balance, always_failover, spindle_use)"}
}

func osparamsFlag() cli.Flag {
	return &cli.StringFlag{Name: "os-parameters", Aliases: []string{"O"}, Usage: "OS parameters `KEY=VALUE[,...]`"}
}

// paramItem is one KEY=VALUE of a list: reset when it removes the key.
type paramItem struct {
	key, value string
	bare, no   bool // a bare KEY, or no_KEY
	reset      bool // -KEY or KEY=default
}

// splitParams reads a KEY=VALUE[,KEY=VALUE...] list into its items,
// refusing an empty key and a key given twice.
func splitParams(s string) ([]paramItem, error) {
	var out []paramItem
	seen := map[string]bool{}
	for _, raw := range splitEscaped(s, ',') {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		key, value, hasValue := strings.Cut(raw, "=")
		key = strings.TrimSpace(key)
		it := paramItem{key: key, value: value}
		switch {
		case !hasValue && strings.HasPrefix(key, "-"):
			it.key, it.reset = key[1:], true
		case !hasValue && strings.HasPrefix(key, "no_"):
			it.key, it.no = key[3:], true
		case !hasValue:
			it.bare = true
		case value == fsm.ParamDefault:
			it.reset = true
		}
		if it.key == "" {
			return nil, fmt.Errorf("empty parameter name in %q", raw)
		}
		if strings.ContainsAny(it.key, "=:") {
			return nil, fmt.Errorf("parameter name %q holds '=' or ':'", it.key)
		}
		if seen[it.key] {
			return nil, fmt.Errorf("parameter %q given twice", it.key)
		}
		seen[it.key] = true
		out = append(out, it)
	}
	return out, nil
}

// typedParams reads a list against a parameter table: values become the
// table's types; unknown keys stay text (the server names them).
func typedParams(s string, defs []fsm.ParamDef) (map[string]any, error) {
	items, err := splitParams(s)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, it := range items {
		var d *fsm.ParamDef
		for k := range defs {
			if defs[k].Key == it.key {
				d = &defs[k]
			}
		}
		switch {
		case it.reset:
			out[it.key] = fsm.ParamDefault
			continue
		case it.bare || it.no:
			if d != nil && d.Kind != fsm.KindBool {
				return nil, fmt.Errorf("parameter %q needs a value (KEY=VALUE)", it.key)
			}
			out[it.key] = !it.no
			continue
		}
		if d == nil {
			out[it.key] = it.value
			continue
		}
		v, err := typedValue(d, it.value)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %v", it.key, err)
		}
		out[it.key] = v
	}
	return out, nil
}

func typedValue(d *fsm.ParamDef, value string) (any, error) {
	switch d.Kind {
	case fsm.KindBool:
		switch strings.ToLower(value) {
		case "yes", "true":
			return true, nil
		case "no", "false":
			return false, nil
		}
		return nil, fmt.Errorf("want true or false, not %q", value)
	case fsm.KindInt:
		if d.Key == "maxmem" || d.Key == "minmem" || d.Key == "memory" {
			return parseSize(value)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, not %q", value)
		}
		return n, nil
	}
	return value, nil
}

// identParams reads IDENT:KEY=VALUE[,...] (the cluster's -H and -D): the
// identifier (a hypervisor or disk template) and its list.
func identParams(s string) (string, string, error) {
	ident, rest, _ := strings.Cut(s, ":")
	ident = strings.TrimSpace(ident)
	if ident == "" {
		return "", "", fmt.Errorf("%q does not start with a name (NAME:KEY=VALUE,...)", s)
	}
	if strings.ContainsAny(ident, "=,") {
		return "", "", fmt.Errorf("%q: the name before ':' holds '=' or ','", s)
	}
	return ident, rest, nil
}

// parseHVParams reads -H options of the cluster: each HV:KEY=VALUE,...
func parseHVParams(opts []string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, o := range opts {
		hv, rest, err := identParams(o)
		if err != nil {
			return nil, err
		}
		if _, dup := out[hv]; dup {
			return nil, fmt.Errorf("hypervisor %s given twice", hv)
		}
		p, err := typedParams(rest, fsm.HVParamDefs(hv))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", hv, err)
		}
		out[hv] = p
	}
	return out, nil
}

// parseDiskParams reads -D options: each TEMPLATE:KEY=VALUE,...
func parseDiskParams(opts []string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, o := range opts {
		t, rest, err := identParams(o)
		if err != nil {
			return nil, err
		}
		if _, dup := out[t]; dup {
			return nil, fmt.Errorf("disk template %s given twice", t)
		}
		defs, _ := fsm.DiskParamDefs(t)
		p, err := typedParams(rest, defs)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", t, err)
		}
		out[t] = p
	}
	return out, nil
}

// parseInstanceHV reads an instance's -H: [HV:]KEY=VALUE,... (at
// creation the HV names the instance's hypervisor). With several
// options, they must agree on the hypervisor.
func parseInstanceHV(opts []string, allowHV bool) (string, map[string]any, error) {
	hv := ""
	out := map[string]any{}
	for _, o := range opts {
		rest := o
		if name, r, ok := strings.Cut(o, ":"); ok && !strings.Contains(name, "=") {
			if !allowHV {
				return "", nil, fmt.Errorf("%q: give KEY=VALUE,... (the hypervisor is not changed here)", o)
			}
			name = strings.TrimSpace(name)
			if hv != "" && hv != name {
				return "", nil, fmt.Errorf("two hypervisors given: %s and %s", hv, name)
			}
			hv, rest = name, r
		} else if allowHV && !strings.Contains(o, "=") && !strings.HasPrefix(o, "-") && !strings.HasPrefix(o, "no_") && fsm.HVParamDefs(strings.TrimSpace(o)) != nil {
			// Just the hypervisor's name.
			hv, rest = strings.TrimSpace(o), ""
		}
		defs := fsm.HVParamDefs(hv)
		if defs == nil {
			defs = fsm.HVParamDefs(fsm.HVKVM)
		}
		p, err := typedParams(rest, defs)
		if err != nil {
			return "", nil, err
		}
		for k, v := range p {
			if _, dup := out[k]; dup {
				return "", nil, fmt.Errorf("parameter %q given twice", k)
			}
			out[k] = v
		}
	}
	return hv, out, nil
}

// parseOSParams reads -O: OS parameters are text.
func parseOSParams(s string) (map[string]any, error) {
	items, err := splitParams(s)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, it := range items {
		switch {
		case it.reset:
			out[it.key] = fsm.ParamDefault
		case it.bare || it.no:
			return nil, fmt.Errorf("OS parameter %q needs a value (KEY=VALUE)", it.key)
		default:
			out[it.key] = it.value
		}
	}
	return out, nil
}

// parseNICMods reads an instance's --net modifications (Ganeti's
// syntax): add[:KEY=VALUE,...], IDX:KEY=VALUE,... (modify), IDX:remove
// or remove (the last NIC). Keys: mode, link, vlan, ip, mac, name.
func parseNICMods(opts []string) ([]any, error) {
	var out []any
	for _, o := range opts {
		head, rest, _ := strings.Cut(o, ":")
		head = strings.TrimSpace(head)
		op, idx := "modify", 0
		switch {
		case head == "add":
			op, idx = "add", -1
		case head == "remove":
			op, idx = "remove", -1
		default:
			n, err := strconv.Atoi(head)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--net %q: want add[:PARAMS], IDX:PARAMS, IDX:remove or remove", o)
			}
			idx = n
			if strings.TrimSpace(rest) == "remove" {
				op, rest = "remove", ""
			}
		}
		p, err := nicParams(rest)
		if err != nil {
			return nil, fmt.Errorf("--net %q: %v", o, err)
		}
		if op == "remove" && len(p) > 0 {
			return nil, fmt.Errorf("--net %q: remove takes no parameters", o)
		}
		if op == "modify" && len(p) == 0 {
			return nil, fmt.Errorf("--net %q: nothing to modify", o)
		}
		out = append(out, []any{op, idx, p})
	}
	return out, nil
}

// nicParams reads a NIC's KEY=VALUE,... (mode, link, vlan, ip, mac,
// name).
func nicParams(s string) (map[string]any, error) {
	items, err := splitParams(s)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, it := range items {
		switch it.key {
		case "mode", "link", "vlan", "ip", "mac", "name", "network":
		default:
			return nil, fmt.Errorf("unknown NIC parameter %q (mode, link, vlan, ip, mac, name, network)", it.key)
		}
		if it.bare || it.no || it.reset {
			return nil, fmt.Errorf("NIC parameter %q needs a value (KEY=VALUE)", it.key)
		}
		out[it.key] = it.value
	}
	return out, nil
}

// parseDiskMods reads an instance's --disk modifications:
// IDX:name=NAME,mode=ro|rw, or Ganeti's add:size=SIZE[,mode=..][,name=..]
// (the same as --add-disk).
func parseDiskMods(opts []string) ([]any, error) {
	var out []any
	for _, o := range opts {
		head, rest, ok := strings.Cut(o, ":")
		if ok && head == "add" {
			d, err := diskSpec(rest)
			if err != nil {
				return nil, fmt.Errorf("--disk %q: %v", o, err)
			}
			out = append(out, []any{"add", -1, d})
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(head))
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("--disk %q: want IDX:name=NAME,mode=ro|rw or add:size=SIZE[,mode=rw|ro][,name=NAME]", o)
		}
		items, err := splitParams(rest)
		if err != nil {
			return nil, fmt.Errorf("--disk %q: %v", o, err)
		}
		p := map[string]any{}
		for _, it := range items {
			if (it.key != "name" && it.key != "mode") || it.bare || it.no || it.reset {
				return nil, fmt.Errorf("--disk %q: only name=NAME and mode=ro|rw change (sizes change with grow-disk)", o)
			}
			p[it.key] = it.value
		}
		if len(p) == 0 {
			return nil, fmt.Errorf("--disk %q: nothing to modify", o)
		}
		out = append(out, []any{"modify", n, p})
	}
	return out, nil
}
