package confd

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// CONFIG_QUERY: an RFC 6901 JSON pointer into the configuration document
//
//	{"version": N, "cluster": {...}, "nodegroups": {uuid: {...}},
//	 "nodes": {uuid: {...}}, "instances": {uuid: {...}},
//	 "serial_no": N, "ctime": T, "mtime": T}
//
// laid out as Ganeti's config.data is (objects keyed by UUID, with our
// model's field names). As in Ganeti, the pointer must start with "/";
// "~1" stands for "/" and "~0" for "~"; a path that does not exist is an
// argument error. Only the object the first one or two tokens select is
// encoded, never the whole configuration for one lookup.

// parsePointer splits a pointer into its unescaped reference tokens.
func parsePointer(p string) ([]string, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		if !strings.Contains(t, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(t); j++ {
			if t[j] != '~' {
				b.WriteByte(t[j])
				continue
			}
			if j+1 >= len(t) || (t[j+1] != '0' && t[j+1] != '1') {
				return nil, false
			}
			if t[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		toks[i] = b.String()
	}
	return toks, true
}

// configValue returns the encoded value the pointer designates.
func configValue(v View, pointer string) ([]byte, bool) {
	toks, ok := parsePointer(pointer)
	if !ok {
		return nil, false
	}
	st := v.State
	var start any
	rest := toks[1:]
	pick := func(m any, present bool) {
		if present {
			start = m
		}
	}
	switch toks[0] {
	case "version":
		start = v.Version
	case "cluster":
		start = st.Cluster
	case "serial_no":
		start = st.Cluster.SerialNo
	case "ctime":
		start = st.Cluster.CTime
	case "mtime":
		start = st.Cluster.MTime
	case "nodes":
		if len(rest) == 0 {
			start = st.Nodes
		} else {
			n, found := st.Nodes[rest[0]]
			pick(n, found)
			rest = rest[1:]
		}
	case "nodegroups":
		if len(rest) == 0 {
			start = st.Groups
		} else {
			g, found := st.Groups[rest[0]]
			pick(g, found)
			rest = rest[1:]
		}
	case "instances":
		if len(rest) == 0 {
			start = st.Instances
		} else {
			i, found := st.Instances[rest[0]]
			pick(i, found)
			rest = rest[1:]
		}
	}
	if start == nil {
		return nil, false
	}
	b, err := json.Marshal(start)
	if err != nil {
		return nil, false
	}
	if len(rest) == 0 {
		return asciiJSON(b), true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	for _, t := range rest {
		switch c := doc.(type) {
		case map[string]any:
			val, found := c[t]
			if !found {
				return nil, false
			}
			doc = val
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) || (len(t) > 1 && t[0] == '0') || t[0] == '+' {
				return nil, false
			}
			doc = c[i]
		default:
			return nil, false
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, false
	}
	return asciiJSON(out), true
}
