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

// column is one column of a table computed from an object.
type column struct {
	title string
	value func(object) string
}

// listColumn is one column of a list command: a field of the API
// objects, formatted by its kind, or a value computed from the whole
// object.
type listColumn struct {
	title string
	field string              // the API field shown, when value is nil
	value func(object) string // a computed column
}

// listOpts are Ganeti's list options every list command has.
type listOpts struct {
	Fields    string // -o/--fields: FIELD,... or +FIELD,...
	NoHeaders bool
	Separator string // "" aligns columns
	Units     string // h, m, g or t
}

func listFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "fields", Usage: "the `FIELDS` to show: FIELD,... or +FIELD,... to add to the default columns, as the global -o (see list-fields)"},
		&cli.BoolFlag{Name: "no-headers", Usage: "leave out the header line"},
		&cli.StringFlag{Name: "separator", Usage: "separate the columns with `SEP` instead of aligning them (sizes then default to --units m)"},
		&cli.StringFlag{Name: "units", Usage: "`UNIT` of sizes: h (human: 512M, 7.8G, 1.5T; the default), m, g or t"},
	}
}

// listFieldsFlags are the flags of list-fields commands.
func listFieldsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "no-headers", Usage: "leave out the header line"},
		&cli.StringFlag{Name: "separator", Usage: "separate the columns with `SEP` instead of aligning them"},
	}
}

// readListOpts reads the list options of a list command and the global
// -o FIELDS (cfg.Fields); bad values and combinations are usage errors.
func readListOpts(c *cli.Context, cfg Config) (listOpts, error) {
	o := listOpts{Fields: c.String("fields"), NoHeaders: c.Bool("no-headers"), Separator: c.String("separator"), Units: c.String("units")}
	if cfg.Fields != "" {
		if c.IsSet("fields") {
			return o, usagef(c, "-o and --fields both select the fields: give one")
		}
		o.Fields = cfg.Fields
	}
	if c.IsSet("fields") && strings.TrimSpace(o.Fields) == "" {
		return o, usagef(c, "--fields needs at least one field")
	}
	if c.IsSet("separator") {
		if o.Separator == "" || strings.ContainsAny(o.Separator, "\n\r") {
			return o, usagef(c, "--separator %q: want a non-empty separator without line breaks", o.Separator)
		}
	}
	switch o.Units {
	case "":
		o.Units = "h"
		if o.Separator != "" {
			o.Units = "m" // Ganeti's default for parsable output
		}
	case "h", "m", "g", "t":
	default:
		return o, usagef(c, "--units %q: want h, m, g or t", o.Units)
	}
	if cfg.JSON() {
		for _, f := range []string{"fields", "no-headers", "separator", "units"} {
			if c.IsSet(f) {
				return o, usagef(c, "--%s formats the table; --json prints the server's objects whole", f)
			}
		}
		if cfg.Fields != "" {
			return o, usagef(c, "-o FIELDS formats the table; --json prints the server's objects whole")
		}
	}
	return o, nil
}

// fieldNames splits -o's value, without the leading "+".
func (o listOpts) fieldNames() []string {
	var out []string
	for _, f := range strings.Split(strings.TrimPrefix(o.Fields, "+"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// columns chooses the columns of a listing from -o: the defaults, the
// fields named, or ("+a,b") the defaults and the fields named.
func (o listOpts) columns(defaults []listColumn, defs []field) []listColumn {
	if o.Fields == "" {
		return defaults
	}
	var cols []listColumn
	if strings.HasPrefix(o.Fields, "+") {
		cols = append(cols, defaults...)
	}
	for _, f := range o.fieldNames() {
		title := f
		if d, ok := lookupDef(defs, f); ok {
			title = d.title
		}
		cols = append(cols, listColumn{title: title, field: f})
	}
	return cols
}

// unknownFields lists the -o names that are neither described fields of
// the listing nor found in any row (a newer server's fields work before
// the client describes them).
func (o listOpts) unknownFields(defs []field, rows []object) []string {
	var bad []string
	for _, f := range o.fieldNames() {
		if _, ok := lookupDef(defs, f); ok {
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

// cell formats one column of a row; sizes in the units asked for.
func (o listOpts) cell(c listColumn, r object, defs []field) string {
	if c.value != nil {
		return c.value(r)
	}
	v, ok := lookupField(r, c.field)
	if !ok {
		return "?"
	}
	if d, ok := lookupDef(defs, c.field); ok && d.kind == kindSize {
		return formatUnit(v, o.Units)
	}
	return formatValue(v)
}

// formatUnit formats a size in MiB as Ganeti's FormatUnit does: h is
// 512M, 7.8G, 1.5T; m whole MiB; g and t with one decimal.
func formatUnit(v any, units string) string {
	n, ok := v.(json.Number)
	if !ok {
		return formatValue(v)
	}
	f, err := n.Float64()
	if err != nil {
		return n.String()
	}
	switch units {
	case "m":
		return strconv.FormatInt(int64(f), 10)
	case "g":
		return fmt.Sprintf("%.1f", f/1024)
	case "t":
		return fmt.Sprintf("%.1f", f/1024/1024)
	}
	switch {
	case f < 1024:
		return fmt.Sprintf("%dM", int64(f))
	case f < 1024*1024:
		return fmt.Sprintf("%.1fG", f/1024)
	}
	return fmt.Sprintf("%.1fT", f/1024/1024)
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

// printTable writes rows as aligned columns of computed values.
func printTable(w io.Writer, cols []column, rows []object, headers bool) error {
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title
	}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = make([]string, len(cols))
		for j, c := range cols {
			cells[i][j] = c.value(r)
		}
	}
	return printCells(w, titles, cells, listOpts{NoHeaders: !headers})
}

// printCells writes rows as aligned columns, or separated by
// o.Separator.
func printCells(w io.Writer, titles []string, rows [][]string, o listOpts) error {
	sep := o.Separator
	var out io.Writer = w
	var tw *tabwriter.Writer
	if sep == "" {
		tw = tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
		out, sep = tw, "\t"
	}
	clean := func(v string) string {
		if o.Separator == "" {
			return strings.ReplaceAll(v, "\t", " ")
		}
		return v
	}
	if !o.NoHeaders {
		fmt.Fprintln(out, strings.Join(titles, sep))
	}
	for _, r := range rows {
		vals := make([]string, len(r))
		for i, v := range r {
			vals[i] = clean(v)
		}
		fmt.Fprintln(out, strings.Join(vals, sep))
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
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
