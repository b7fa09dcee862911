package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

// printJSON writes an answer of the server as it came, indented.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("the server's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printJSONList writes several answers as one JSON array.
func printJSONList(w io.Writer, raws []json.RawMessage) error {
	if raws == nil {
		raws = []json.RawMessage{}
	}
	b, err := json.Marshal(raws)
	if err != nil {
		return err
	}
	return printJSON(w, b)
}

// object is a decoded API object (numbers as json.Number).
type object = map[string]any

// column is one column of a listing.
type column struct {
	title string
	value func(object) string
}

// listOpts are the flags every list command has.
type listOpts struct {
	Fields    string
	NoHeaders bool
}

func listFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "fields", Usage: "`FIELDS` to show, comma-separated API field names; \"+a,b\" adds them to the default columns"},
		&cli.BoolFlag{Name: "no-headers", Usage: "leave out the header line"},
	}
}

func readListOpts(c *cli.Context) listOpts {
	return listOpts{Fields: c.String("fields"), NoHeaders: c.Bool("no-headers")}
}

// columns chooses the columns of a listing from --fields.
func (o listOpts) columns(defaults []column, titles map[string]string) []column {
	if o.Fields == "" {
		return defaults
	}
	spec, add := strings.CutPrefix(o.Fields, "+")
	var cols []column
	if add {
		cols = append(cols, defaults...)
	}
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cols = append(cols, fieldColumn(f, titles))
		}
	}
	return cols
}

func fieldColumn(name string, titles map[string]string) column {
	title := titles[name]
	if title == "" {
		title = name
	}
	return column{title: title, value: func(o object) string {
		v, ok := lookupField(o, name)
		if !ok {
			return "?"
		}
		return formatValue(v)
	}}
}

// unknownFields lists the --fields names no row has.
func (o listOpts) unknownFields(rows []object) []string {
	if o.Fields == "" || len(rows) == 0 {
		return nil
	}
	var bad []string
	for _, f := range strings.Split(strings.TrimPrefix(o.Fields, "+"), ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, r := range rows {
			if _, ok := lookupField(r, f); ok {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, f)
		}
	}
	return bad
}

// lookupField finds a field by its API name; "a.b" is either a key of that
// name (RAPI's "group.uuid", "disk.sizes") or key b of object a.
func lookupField(o object, name string) (any, bool) {
	if v, ok := o[name]; ok {
		return v, true
	}
	head, tail, ok := strings.Cut(name, ".")
	if !ok {
		return nil, false
	}
	sub, ok := o[head].(map[string]any)
	if !ok {
		return nil, false
	}
	return lookupField(sub, tail)
}

// printTable writes rows as aligned columns.
func printTable(w io.Writer, cols []column, rows []object, headers bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	if headers {
		titles := make([]string, len(cols))
		for i, c := range cols {
			titles[i] = c.title
		}
		fmt.Fprintln(tw, strings.Join(titles, "\t"))
	}
	for _, r := range rows {
		vals := make([]string, len(cols))
		for i, c := range cols {
			vals[i] = strings.ReplaceAll(c.value(r), "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	return tw.Flush()
}

// formatValue renders a field for a table cell as Ganeti's listings do:
// booleans Y/N, lists comma-separated, unknown values "?".
func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "?"
	case bool:
		if x {
			return "Y"
		}
		return "N"
	case string:
		return x
	case json.Number:
		return x.String()
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatValue(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range sortedKeys(x) {
			parts = append(parts, k+"="+formatValue(x[k]))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// pyValue renders a value as Ganeti's Python code prints it (True, None,
// ...), for info views and the changes of modify commands.
func pyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyValue(e)
		}
		return strings.Join(parts, ", ")
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range sortedKeys(x) {
			parts = append(parts, k+": "+pyValue(x[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// str returns a field of an object as text ("" when absent).
func str(o object, key string) string {
	v, ok := lookupField(o, key)
	if !ok || v == nil {
		return ""
	}
	return pyValue(v)
}

// num returns a numeric field, and whether it is known.
func num(o object, key string) (float64, bool) {
	v, _ := lookupField(o, key)
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// flag returns a boolean field (false when absent).
func flag(o object, key string) bool {
	b, _ := o[key].(bool)
	return b
}

// list returns a field that is a list of strings.
func list(o object, key string) []string {
	v, _ := lookupField(o, key)
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		out = append(out, pyValue(x))
	}
	return out
}

// mebibytes formats a size in MiB as Ganeti's "h" units do: 512M, 7.8G, 1.5T.
func mebibytes(o object, key string) string {
	f, ok := num(o, key)
	if !ok {
		return "?"
	}
	switch {
	case f < 1024:
		return fmt.Sprintf("%dM", int64(f))
	case f < 1024*1024:
		return fmt.Sprintf("%.1fG", f/1024)
	}
	return fmt.Sprintf("%.1fT", f/1024/1024)
}

// epoch formats a float-seconds time field as Ganeti's FormatTime does.
func epoch(o object, key string) string {
	f, ok := num(o, key)
	if !ok || f == 0 {
		return "N/A"
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).Format("2006-01-02 15:04:05")
}

func formatStamp(t stamp) string {
	if len(t) == 0 {
		return "N/A"
	}
	return t.time().Format("2006-01-02 15:04:05.000000")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tagList formats tags for info views.
func tagList(o object) string {
	tags := list(o, "tags")
	if len(tags) == 0 {
		return "(none)"
	}
	sort.Strings(tags)
	return strings.Join(tags, ", ")
}

// printParams writes a parameter dictionary in Ganeti's info form, marking
// values not set at this level as "default (value)" when own is given.
func printParams(w io.Writer, indent string, effective, own map[string]any) {
	if len(effective) == 0 {
		fmt.Fprintf(w, "%s(none)\n", indent)
		return
	}
	for _, k := range sortedKeys(effective) {
		v := pyValue(effective[k])
		if own != nil {
			if _, set := own[k]; !set {
				v = "default (" + v + ")"
			}
		}
		fmt.Fprintf(w, "%s- %s: %s\n", indent, k, v)
	}
}

// printChanges writes the result of a set-params opcode,
// [[parameter, new value], ...], as gnt-node modify does.
func printChanges(w io.Writer, what string, result json.RawMessage) {
	var changes [][]any
	if decode(result, &changes) != nil || len(changes) == 0 {
		return
	}
	fmt.Fprintf(w, "Modified %s\n", what)
	for _, ch := range changes {
		if len(ch) != 2 {
			continue
		}
		fmt.Fprintf(w, " - %-5s -> %s\n", pyValue(ch[0]), pyValue(ch[1]))
	}
}
