package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

// flagReader copies command flags into plain values, keeping the first
// usage error. Flags that were not given read as nil: "don't change".
type flagReader struct {
	c   *cli.Context
	err error
}

func (r *flagReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = usagef(r.c, format, args...)
	}
}

// yesNo reads a yes/no flag strictly.
func (r *flagReader) yesNo(name string) *bool {
	if !r.c.IsSet(name) {
		return nil
	}
	b, err := parseYesNo(r.c.String(name))
	if err != nil {
		r.fail("--%s: %v", name, err)
		return nil
	}
	return &b
}

func parseYesNo(s string) (bool, error) {
	switch s {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("want yes or no, not %q", s)
}

func (r *flagReader) int(name string) *int {
	if !r.c.IsSet(name) {
		return nil
	}
	v := r.c.Int(name)
	return &v
}

func (r *flagReader) int64(name string) *int64 {
	if !r.c.IsSet(name) {
		return nil
	}
	v := r.c.Int64(name)
	return &v
}

func (r *flagReader) float(name string) *float64 {
	if !r.c.IsSet(name) {
		return nil
	}
	v := r.c.Float64(name)
	return &v
}

// seconds reads a duration flag as seconds.
func (r *flagReader) seconds(name string) *float64 {
	if !r.c.IsSet(name) {
		return nil
	}
	v := r.c.Duration(name).Seconds()
	return &v
}

func (r *flagReader) string(name string) *string {
	if !r.c.IsSet(name) {
		return nil
	}
	v := r.c.String(name)
	return &v
}

// ndparams reads a --node-parameters flag.
func (r *flagReader) ndparams(name string) map[string]any {
	if !r.c.IsSet(name) {
		return nil
	}
	p, err := parseNDParams(r.c.String(name))
	if err != nil {
		r.fail("--%s: %v", name, err)
		return nil
	}
	return p
}

func yesNoFlag(name, usage string) cli.Flag {
	return &cli.StringFlag{Name: name, Usage: usage + ": `yes|no`"}
}

func ndparamsFlag() cli.Flag {
	return &cli.StringFlag{Name: "node-parameters", Usage: "node parameters `KEY=VALUE[,KEY=VALUE...]`; " +
		"KEY=default or -KEY resets one, a bare KEY sets a boolean, no_KEY clears it"}
}

// parseNDParams reads Ganeti's KEY=VALUE[,KEY=VALUE...] syntax ("\," is a
// literal comma). The API is strictly typed, so each value is converted to
// the type of the parameter's default; unknown keys are sent as text for
// the server to refuse.
func parseNDParams(s string) (map[string]any, error) {
	defaults := fsm.DefaultNDParams()
	out := map[string]any{}
	for _, item := range splitEscaped(s, ',') {
		if item == "" {
			continue
		}
		key, value, hasValue := strings.Cut(item, "=")
		key = strings.TrimSpace(key)
		if !hasValue {
			switch {
			case strings.HasPrefix(key, "-"):
				key, value = key[1:], "default"
			case strings.HasPrefix(key, "no_") && isBoolParam(defaults, key[3:]):
				key, value = key[3:], "false"
			default:
				if !isBoolParam(defaults, key) {
					return nil, fmt.Errorf("parameter %q needs a value (KEY=VALUE)", key)
				}
				value = "true"
			}
		}
		if key == "" {
			return nil, fmt.Errorf("empty parameter name in %q", item)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("parameter %q given twice", key)
		}
		v, err := typedParam(defaults[key], value)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %v", key, err)
		}
		out[key] = v
	}
	return out, nil
}

func isBoolParam(defaults map[string]any, key string) bool {
	_, ok := defaults[key].(bool)
	return ok
}

func typedParam(def any, value string) (any, error) {
	if value == "default" {
		return value, nil
	}
	switch def.(type) {
	case bool:
		switch strings.ToLower(value) {
		case "yes", "true":
			return true, nil
		case "no", "false":
			return false, nil
		}
		return nil, fmt.Errorf("want yes or no, not %q", value)
	case float64:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("want a number, not %q", value)
		}
		return f, nil
	}
	return value, nil
}

func splitEscaped(s string, sep byte) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == sep:
			cur.WriteByte(sep)
			i++
		case s[i] == sep:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(out, cur.String())
}
