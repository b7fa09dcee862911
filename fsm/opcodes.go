package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Opcode is one operation of a job, with Ganeti's OP_ID and field names.
type Opcode interface {
	Common() *OpCommon
	// Validate checks the opcode on its own, without the configuration.
	Validate() *Error
	// Summary is Ganeti's job summary form, e.g. "NODE_ADD(node4)".
	Summary() string
	// Locks declares the locks the opcode needs, given the configuration
	// when it starts.
	Locks(s *State) []LockDecl
}

// configOp is an opcode that only changes the configuration, so Apply can
// run it deterministically inside the state machine.
type configOp interface {
	Opcode
	apply(tx *txn, uuid string) (any, *Error)
}

// ReasonEntry is one element of Ganeti's reason trail: [source, text, timestamp_ns].
type ReasonEntry struct {
	Source string
	Text   string
	TimeNS int64
}

// MarshalJSON writes the Ganeti triple. Every submission encodes a trail,
// so it is put together directly rather than through a []any; the bytes
// are the same.
func (r ReasonEntry) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, len(r.Source)+len(r.Text)+26)), nil
}

func (r ReasonEntry) appendJSON(dst []byte) []byte {
	dst = appendJSONString(append(dst, '['), r.Source)
	dst = appendJSONString(append(dst, ','), r.Text)
	dst = strconv.AppendInt(append(dst, ','), r.TimeNS, 10)
	return append(dst, ']')
}

// AppendReasonTrail appends trail as the JSON list json.Marshal makes of
// it, without json.Marshal's reflection: the leader encodes one for every
// submission.
func AppendReasonTrail(dst []byte, trail []ReasonEntry) []byte {
	dst = append(dst, '[')
	for i, r := range trail {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.appendJSON(dst)
	}
	return append(dst, ']')
}

// appendJSONString appends s quoted as json.Marshal quotes it. Strings of
// printable ASCII without the characters it escapes are copied; any other
// goes through json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// UnmarshalJSON reads the Ganeti triple. It is on every replica's apply
// path: the common form (two plain strings and an integer) is read
// directly from the bytes, which the caller has already checked to be
// one JSON value; anything else takes the general path.
func (r *ReasonEntry) UnmarshalJSON(b []byte) error {
	if src, text, ts, ok := quickReason(b); ok {
		r.Source, r.Text, r.TimeNS = src, text, ts
		return nil
	}
	var raw []any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("reason entry must be [source, text, timestamp_ns]")
	}
	if len(raw) != 3 {
		return fmt.Errorf("reason entry has %d elements, want 3 ([source, text, timestamp_ns])", len(raw))
	}
	var ok bool
	if r.Source, ok = raw[0].(string); !ok {
		return fmt.Errorf("reason source must be a string")
	}
	if r.Text, ok = raw[1].(string); !ok {
		return fmt.Errorf("reason text must be a string")
	}
	n, ok := raw[2].(json.Number)
	if !ok {
		return fmt.Errorf("reason timestamp must be a number")
	}
	if r.TimeNS, ok = numberNS(string(n)); !ok {
		return fmt.Errorf("reason timestamp %s is out of range", n)
	}
	return nil
}

// numberNS reads a JSON number as nanoseconds: integers exactly, other
// forms (1.7e18) rounded.
func numberNS(s string) (int64, bool) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f >= 1<<63 || f < -(1<<63) {
		return 0, false
	}
	return int64(f), true
}

// quickReason reads [string, string, integer] when both strings are
// plain (no escapes, valid UTF-8), as encoding/json would.
func quickReason(b []byte) (src, text string, ts int64, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	str := func() (string, bool) {
		ws()
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		start := i + 1
		for j := start; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				if !utf8.Valid(b[start:j]) {
					return "", false
				}
				i = j + 1
				return string(b[start:j]), true
			case c == '\\' || c < 0x20:
				return "", false
			}
		}
		return "", false
	}
	sep := func(c byte) bool {
		ws()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	if !sep('[') {
		return
	}
	if src, ok = str(); !ok || !sep(',') {
		return "", "", 0, false
	}
	if text, ok = str(); !ok || !sep(',') {
		return "", "", 0, false
	}
	ws()
	start := i
	for i < len(b) && (b[i] == '-' || b[i] >= '0' && b[i] <= '9') {
		i++
	}
	v, err := strconv.ParseInt(string(b[start:i]), 10, 64)
	if err != nil || !sep(']') {
		return "", "", 0, false
	}
	ws()
	if i != len(b) {
		return "", "", 0, false
	}
	return src, text, v, true
}

// OpCommon holds the fields every Ganeti opcode accepts.
type OpCommon struct {
	OpID       string          `json:"OP_ID"`
	Comment    *string         `json:"comment,omitempty"`
	Priority   *int            `json:"priority,omitempty"`
	Depends    json.RawMessage `json:"depends,omitempty"`
	Reason     []ReasonEntry   `json:"reason,omitempty"`
	DebugLevel *int            `json:"debug_level,omitempty"`
	DryRun     *bool           `json:"dry_run,omitempty"`
}

// Common returns the shared fields.
func (c *OpCommon) Common() *OpCommon { return c }

func (c *OpCommon) validateCommon() *Error {
	if c.Priority != nil && (*c.Priority < PrioHighest || *c.Priority > PrioLowest) {
		return errf(CodeInval, "priority", "priority %d is out of range %d..%d", *c.Priority, PrioHighest, PrioLowest)
	}
	if deps, e := c.Dependencies(); e != nil {
		return e
	} else if len(deps) > MaxDepends {
		return errf(CodeInval, "depends", "an opcode has at most %d dependencies, got %d", MaxDepends, len(deps))
	}
	if c.Comment != nil && len(*c.Comment) > MaxCommentLen {
		return errf(CodeInval, "comment", "comment is %d bytes long; at most %d", len(*c.Comment), MaxCommentLen)
	}
	if len(c.Reason) > MaxReasonEntries {
		return errf(CodeInval, "reason", "a reason trail has at most %d entries, got %d", MaxReasonEntries, len(c.Reason))
	}
	for _, r := range c.Reason {
		if r.Source == "" {
			return errf(CodeInval, "reason", "reason entry has an empty source")
		}
		if len(r.Source) > MaxReasonTextLen || len(r.Text) > MaxReasonTextLen {
			return errf(CodeInval, "reason", "a reason entry's source and text are at most %d bytes each", MaxReasonTextLen)
		}
		if !utf8.ValidString(r.Source) || !utf8.ValidString(r.Text) {
			return errf(CodeInval, "reason", "a reason entry is not valid UTF-8")
		}
	}
	return nil
}

// PriorityOr returns the opcode priority or the default.
func (c *OpCommon) PriorityOr(def int) int {
	if c.Priority == nil {
		return def
	}
	return *c.Priority
}

var opcodeTypes = map[string]func() Opcode{
	"OP_CLUSTER_SET_PARAMS":        func() Opcode { return &OpClusterSetParams{} },
	"OP_GROUP_ADD":                 func() Opcode { return &OpGroupAdd{} },
	"OP_GROUP_SET_PARAMS":          func() Opcode { return &OpGroupSetParams{} },
	"OP_GROUP_REMOVE":              func() Opcode { return &OpGroupRemove{} },
	"OP_NODE_ADD":                  func() Opcode { return &OpNodeAdd{} },
	"OP_NODE_SET_PARAMS":           func() Opcode { return &OpNodeSetParams{} },
	"OP_NODE_REMOVE":               func() Opcode { return &OpNodeRemove{} },
	"OP_TAGS_SET":                  func() Opcode { return &OpTagsSet{} },
	"OP_TAGS_DEL":                  func() Opcode { return &OpTagsDel{} },
	"OP_TEST_DELAY":                func() Opcode { return &OpTestDelay{} },
	"OP_TEST_CRASH":                func() Opcode { return &OpTestCrash{} },
	"OP_INSTANCE_CREATE":           func() Opcode { return &OpInstanceCreate{} },
	"OP_INSTANCE_REMOVE":           func() Opcode { return &OpInstanceRemove{} },
	"OP_INSTANCE_STARTUP":          func() Opcode { return &OpInstanceStartup{} },
	"OP_INSTANCE_SHUTDOWN":         func() Opcode { return &OpInstanceShutdown{} },
	"OP_INSTANCE_REBOOT":           func() Opcode { return &OpInstanceReboot{} },
	"OP_INSTANCE_FAILOVER":         func() Opcode { return &OpInstanceFailover{} },
	"OP_INSTANCE_MIGRATE":          func() Opcode { return &OpInstanceMigrate{} },
	"OP_NODE_EVACUATE":             func() Opcode { return &OpNodeEvacuate{} },
	"OP_INSTANCE_CHANGE_GROUP":     func() Opcode { return &OpInstanceChangeGroup{} },
	"OP_GROUP_EVACUATE":            func() Opcode { return &OpGroupEvacuate{} },
	"OP_INSTANCE_REINSTALL":        func() Opcode { return &OpInstanceReinstall{} },
	"OP_INSTANCE_REPLACE_DISKS":    func() Opcode { return &OpInstanceReplaceDisks{} },
	"OP_INSTANCE_RECREATE_DISKS":   func() Opcode { return &OpInstanceRecreateDisks{} },
	"OP_INSTANCE_RENAME":           func() Opcode { return &OpInstanceRename{} },
	"OP_INSTANCE_SET_PARAMS":       func() Opcode { return &OpInstanceSetParams{} },
	"OP_NODE_MIGRATE":              func() Opcode { return &OpNodeMigrate{} },
	"OP_OOB_COMMAND":               func() Opcode { return &OpOobCommand{} },
	"OP_CLUSTER_EPO":               func() Opcode { return &OpClusterEpo{} },
	"OP_REPAIR_COMMAND":            func() Opcode { return &OpRepairCommand{} },
	"OP_NODE_QUERY_STORAGE":        func() Opcode { return &OpNodeQueryStorage{} },
	"OP_NODE_MODIFY_STORAGE":       func() Opcode { return &OpNodeModifyStorage{} },
	"OP_REPAIR_NODE_STORAGE":       func() Opcode { return &OpRepairNodeStorage{} },
	"OP_GROUP_RENAME":              func() Opcode { return &OpGroupRename{} },
	"OP_GROUP_ASSIGN_NODES":        func() Opcode { return &OpGroupAssignNodes{} },
	"OP_CLUSTER_REDIST_CONF":       func() Opcode { return &OpClusterRedistConf{} },
	"OP_INSTANCE_QUERY_DATA":       func() Opcode { return &OpInstanceQueryData{} },
	"OP_INSTANCE_MULTI_ALLOC":      func() Opcode { return &OpInstanceMultiAlloc{} },
	"OP_INSTANCE_GROW_DISK":        func() Opcode { return &OpInstanceGrowDisk{} },
	"OP_NETWORK_ADD":               func() Opcode { return &OpNetworkAdd{} },
	"OP_NETWORK_REMOVE":            func() Opcode { return &OpNetworkRemove{} },
	"OP_NETWORK_SET_PARAMS":        func() Opcode { return &OpNetworkSetParams{} },
	"OP_NETWORK_CONNECT":           func() Opcode { return &OpNetworkConnect{} },
	"OP_NETWORK_DISCONNECT":        func() Opcode { return &OpNetworkDisconnect{} },
	"OP_NETWORK_RENAME":            func() Opcode { return &OpNetworkRename{} },
	"OP_INSTANCE_ACTIVATE_DISKS":   func() Opcode { return &OpInstanceActivateDisks{} },
	"OP_INSTANCE_DEACTIVATE_DISKS": func() Opcode { return &OpInstanceDeactivateDisks{} },
}

// OpcodeIDs lists the opcodes this build knows.
func OpcodeIDs() []string {
	ids := make([]string, 0, len(opcodeTypes))
	for id := range opcodeTypes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ParseOpcode decodes and validates one opcode. Unknown OP_IDs, unknown
// fields and wrong types are refused with an error naming the field.
func ParseOpcode(raw []byte) (Opcode, error) {
	id, ok := quickOpID(raw)
	if !ok {
		var head struct {
			OpID *string `json:"OP_ID"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, jsonError(err)
		}
		if head.OpID == nil || *head.OpID == "" {
			return nil, errf(CodeInval, "OP_ID", "opcode has no OP_ID")
		}
		id = *head.OpID
	}
	mk, known := opcodeTypes[id]
	if !known {
		return nil, errf(CodeInval, "OP_ID", "unknown opcode %q", id)
	}
	op := mk()
	if err := DecodeStrict(raw, op); err != nil {
		return nil, unknownBEParam(raw, err)
	}
	if op.Common().OpID != id {
		// quickOpID matched text that was not the top-level key.
		return nil, errf(CodeInval, "OP_ID", "opcode has no or an ambiguous OP_ID")
	}
	if e := op.Common().validateCommon(); e != nil {
		return nil, e
	}
	if e := op.Validate(); e != nil {
		return nil, e
	}
	return op, nil
}

// unknownBEParam names an unknown field that is a key of the opcode's
// beparams as the backend parameter it is (beparams.KEY, with the known
// ones), as the cluster's beparams are refused; encoding/json names only
// the key. Any other error is returned as it is.
func unknownBEParam(raw []byte, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Field == "" || !strings.HasPrefix(e.Msg, "unknown field ") {
		return err
	}
	var top struct {
		BEParams map[string]json.RawMessage `json:"beparams"`
	}
	if json.Unmarshal(raw, &top) != nil {
		return err
	}
	if _, ok := top.BEParams[e.Field]; !ok || findDef(BEParamDefs, e.Field) != nil {
		return err
	}
	known := make([]string, len(BEParamDefs))
	for i, d := range BEParamDefs {
		known[i] = d.Key
	}
	sort.Strings(known)
	return errf(CodeInval, "beparams."+e.Field, "unknown backend parameter %q (known: %s)", e.Field, strings.Join(known, ", "))
}

// quickOpID finds `"OP_ID":"..."` without decoding the whole opcode, as
// this build encodes it; ParseOpcode checks the decoded value afterwards.
func quickOpID(raw []byte) (string, bool) {
	const key = `"OP_ID":"`
	i := bytes.Index(raw, []byte(key))
	if i < 0 || bytes.Count(raw, []byte(`"OP_ID"`)) != 1 {
		return "", false
	}
	rest := raw[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// IsDryRun reports whether an opcode asks for a dry run (dry_run: true):
// its checks run and its outcome is described, but nothing is executed
// and the configuration does not change. Apply honours it for every
// opcode: a configuration opcode's transaction is dropped, and a job
// update of a dry-run opcode that carries configuration changes is
// refused.
func IsDryRun(op Opcode) bool {
	d := op.Common().DryRun
	return d != nil && *d
}

// dryRunResult is the result of a configuration opcode's dry run: what it
// returned (Ganeti's list of changed parameters, say), or, when it
// returns nothing, what it would have done.
func dryRunResult(op Opcode, res any, logs []string) any {
	if res != nil {
		return res
	}
	would := append([]string{"apply " + op.Summary()}, logs...)
	return map[string]any{"dry_run": true, "would": would}
}

// IsConfigOnly reports whether an opcode only changes the configuration.
func IsConfigOnly(op Opcode) bool {
	_, ok := op.(configOp)
	return ok
}

// DecodeStrict decodes JSON into v, refusing unknown fields, trailing
// data, repeated keys, invalid UTF-8 and too deep nesting (CheckJSON), and
// turns decoder errors into an *Error that names the field.
func DecodeStrict(raw []byte, v any) error {
	if fastDecode(raw, v) {
		return nil
	}
	return decodeSlow(raw, v)
}

// decodeSlow is DecodeStrict through encoding/json, after CheckJSON
// has refused what encoding/json would silently accept.
func decodeSlow(raw []byte, v any) error {
	if e := CheckJSON(raw); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errf(CodeInval, "", "unexpected data after the JSON value")
	}
	return nil
}

func jsonError(err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		// Fields of the embedded OpCommon are reported by their JSON name.
		field := strings.TrimPrefix(te.Field, "OpCommon.")
		if field == "" {
			return errf(CodeInval, "", "expected a JSON %s, got %s", te.Type, te.Value)
		}
		return errf(CodeInval, field, "field %q: expected %s, got %s", field, goTypeName(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return errf(CodeInval, "", "invalid JSON at offset %d: %v", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if why := UnsupportedReason(f); why != "" {
			return errf(CodeInval, f, "parameter %q is not supported: %s", f, why)
		}
		return errf(CodeInval, f, "unknown field %q", f)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errf(CodeInval, "", "empty or truncated JSON body")
	}
	return errf(CodeInval, "", "invalid JSON: %v", err)
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "*"):
		return goTypeName(t[1:])
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map"):
		return "an object"
	}
	return t
}

// Name rules, checked byte by byte (they run for every opcode on every
// replica; TestNameRules holds them to the regular expressions in its
// comments).

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// hostLabelOK: ^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$
func hostLabelOK(l string) bool {
	if len(l) == 0 || len(l) > 63 || !isAlnum(l[0]) || !isAlnum(l[len(l)-1]) {
		return false
	}
	for i := 1; i < len(l)-1; i++ {
		if !isAlnum(l[i]) && l[i] != '-' {
			return false
		}
	}
	return true
}

// groupNameOK: ^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$
func groupNameOK(name string) bool {
	if len(name) == 0 || len(name) > 128 || !isAlnum(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '.' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

// tagCharsOK: ^[\w.+*/:@-]+$
func tagCharsOK(tag string) bool {
	if len(tag) == 0 {
		return false
	}
	for i := 0; i < len(tag); i++ {
		switch c := tag[i]; {
		case isAlnum(c):
		case c == '_' || c == '.' || c == '+' || c == '*' || c == '/' || c == ':' || c == '@' || c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidateHostname checks a node or instance name with Ganeti's hostname
// rules: dot-separated labels of letters, digits and inner dashes, at most
// 255 characters.
func ValidateHostname(field, name string) *Error {
	if name == "" {
		return errf(CodeInval, field, "%s must not be empty", field)
	}
	if len(name) > MaxHostnameLen {
		return errf(CodeInval, field, "%s is %d characters long; at most %d", field, len(name), MaxHostnameLen)
	}
	rest := strings.TrimSuffix(name, ".")
	for {
		l, after, more := strings.Cut(rest, ".")
		if !hostLabelOK(l) {
			return errf(CodeInval, field, "%s %q is not a valid hostname", field, name)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// ValidateGroupName checks a node group name.
func ValidateGroupName(field, name string) *Error {
	if name == "" {
		return errf(CodeInval, field, "%s must not be empty", field)
	}
	if !groupNameOK(name) {
		return errf(CodeInval, field, "%s %q is not a valid group name (letters, digits, '_', '.', '+', '-'; at most 128)", field, name)
	}
	return nil
}

// ValidateTag checks one tag with Ganeti's rules.
func ValidateTag(tag string) *Error {
	if tag == "" {
		return errf(CodeInval, "tags", "tags must not be empty")
	}
	if len(tag) > MaxTagLen {
		return errf(CodeInval, "tags", "tag %q is longer than %d characters", tag, MaxTagLen)
	}
	if !tagCharsOK(tag) {
		return errf(CodeInval, "tags", "tag %q contains invalid characters", tag)
	}
	return nil
}

func validateIP(field, ip string, required bool) *Error {
	if ip == "" {
		if required {
			return errf(CodeInval, field, "%s must not be empty", field)
		}
		return nil
	}
	if net.ParseIP(ip) == nil {
		return errf(CodeInval, field, "%s %q is not a valid IP address", field, ip)
	}
	return nil
}

// ndparamTypes lists the node parameters and their JSON types.
var ndparamTypes = map[string]string{
	"oob_program":       "string",
	"spindle_count":     "int",
	"exclusive_storage": "bool",
	"ovs":               "bool",
	"ovs_name":          "string",
	"ovs_link":          "string",
	"ssh_port":          "int",
	"cpu_speed":         "float",
}

var article = map[string]string{"string": "a string", "bool": "a boolean", "int": "a non-negative integer", "float": "a positive number"}

// DefaultNDParams are the cluster-level node parameter defaults.
func DefaultNDParams() map[string]any {
	return map[string]any{
		"oob_program":       "",
		"spindle_count":     float64(1),
		"exclusive_storage": false,
		"ovs":               false,
		"ovs_name":          "switch1",
		"ovs_link":          "",
		"ssh_port":          float64(22),
		"cpu_speed":         float64(1),
	}
}

// OpcodeNDParams returns the node parameters an opcode sets (nil when it
// sets none): the API checks there what the replicated state cannot, such
// as whether an oob_program is a whitelisted helper on the gntd.
func OpcodeNDParams(op Opcode) map[string]any {
	switch o := op.(type) {
	case *OpClusterSetParams:
		return o.NDParams
	case *OpGroupAdd:
		return o.NDParams
	case *OpGroupSetParams:
		return o.NDParams
	case *OpNodeAdd:
		return o.NDParams
	case *OpNodeSetParams:
		return o.NDParams
	}
	return nil
}

// validateNDParams checks keys and value types. The value "default" (or
// null) removes an override, as in Ganeti.
func validateNDParams(field string, p map[string]any) *Error {
	for _, k := range sortedKeys(p) {
		v := p[k]
		t, ok := ndparamTypes[k]
		if !ok {
			return errf(CodeInval, field+"."+k, "unknown node parameter %q", k)
		}
		if v == nil || v == "default" {
			continue
		}
		bad := false
		switch t {
		case "string":
			_, ok := v.(string)
			bad = !ok
		case "bool":
			_, ok := v.(bool)
			bad = !ok
		case "int":
			f, ok := v.(float64)
			bad = !ok || f != math.Trunc(f) || f < 0
		case "float":
			f, ok := v.(float64)
			bad = !ok || f <= 0
		}
		if bad {
			return errf(CodeInval, field+"."+k, "node parameter %q must be %s, got %v", k, article[t], v)
		}
		if e := ndparamInRange(field+"."+k, k, v); e != nil {
			return e
		}
	}
	return nil
}

// Bounds of node parameter values.
const (
	MaxNDParamString = 4096    // oob_program, ovs_name, ovs_link
	MaxNDParamInt    = 1 << 31 // spindle_count
	MaxNDParamFloat  = 1e6     // cpu_speed
)

// ndparamInRange checks a node parameter value of the right type against
// its bounds: strings of at most MaxNDParamString bytes, integers up to
// MaxNDParamInt (ssh_port a port), floats up to MaxNDParamFloat.
func ndparamInRange(field, k string, v any) *Error {
	switch x := v.(type) {
	case string:
		if len(x) > MaxNDParamString {
			return errf(CodeInval, field, "node parameter %q is %d bytes long; at most %d", k, len(x), MaxNDParamString)
		}
	case float64:
		limit := float64(MaxNDParamInt)
		switch ndparamTypes[k] {
		case "float":
			limit = MaxNDParamFloat
		}
		if k == "ssh_port" {
			limit = 65535
		}
		if x > limit {
			return errf(CodeInval, field, "node parameter %q must be at most %s, got %g", k, strconv.FormatFloat(limit, 'f', -1, 64), x)
		}
	}
	return nil
}

// mergeParams applies updates to params: "default"/null removes a key.
func mergeParams(params, updates map[string]any) map[string]any {
	out := cloneMap(params)
	for k, v := range updates {
		if v == nil || v == "default" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// OpClusterSetParams changes cluster parameters.
type OpClusterSetParams struct {
	OpCommon
	CandidatePoolSize *int           `json:"candidate_pool_size,omitempty"`
	MaxVoters         *int           `json:"max_raft_voters,omitempty"`
	DefaultIAllocator *string        `json:"default_iallocator,omitempty"`
	NDParams          map[string]any `json:"ndparams,omitempty"`
	// maintd (Ganeti's names).
	MaintRoundDelay    *int64   `json:"maint_round_delay,omitempty"`
	MaintBalance       *bool    `json:"maint_balance,omitempty"`
	MaintBalanceThresh *float64 `json:"maint_balance_thresh,omitempty"`
	// MaintBalanceMaxMoves is gnt's: Maintenance.BalanceMaxMoves.
	MaintBalanceMaxMoves          *int    `json:"maint_balance_max_moves,omitempty"`
	DiagnoseDataCollectorFilename *string `json:"diagnose_data_collector_filename,omitempty"`
	// MaintdHarep switches maintd's harep work (Maintenance.Harep).
	MaintdHarep *bool `json:"maintd_harep,omitempty"`
	// gnt's repair limits (RepairParams).
	RepairDeadGrace            *float64 `json:"repair_dead_grace,omitempty"`
	RepairBreakerShare         *float64 `json:"repair_breaker_share,omitempty"`
	RepairBreakerNodes         *int     `json:"repair_breaker_nodes,omitempty"`
	RepairBreakerOverrideUntil *int64   `json:"repair_breaker_override_until,omitempty"`
	RepairMaxEvacuations       *int     `json:"repair_max_evacuations,omitempty"`
	RepairRoundJobLimit        *int     `json:"repair_round_job_limit,omitempty"`
	RepairJobDelay             *float64 `json:"repair_job_delay,omitempty"`
	DiagnoseInterval           *float64 `json:"maint_diagnose_interval,omitempty"`
	// RAPIAnonymousRead sets Cluster.RAPIAnonymousRead.
	RAPIAnonymousRead *bool `json:"rapi_anonymous_read,omitempty"`
	// The parameter model (params.go, Ganeti's names and shapes): a
	// value "default" removes the cluster's setting of a key.
	EnabledHypervisors []string                  `json:"enabled_hypervisors,omitempty"`
	DefaultHypervisor  *string                   `json:"default_hypervisor,omitempty"`
	HVParams           map[string]map[string]any `json:"hvparams,omitempty"`
	BEParams           map[string]any            `json:"beparams,omitempty"`
	NICParams          map[string]any            `json:"nicparams,omitempty"`
	DiskParams         map[string]map[string]any `json:"diskparams,omitempty"`
	OSParams           map[string]map[string]any `json:"osparams,omitempty"`
	// The user-id pool (uidpool.go), Ganeti's lists of [lo, hi] pairs:
	// UIDPool replaces it ([] empties it), then AddUIDs adds ranges and
	// RemoveUIDs removes ranges, as Ganeti applies them.
	UIDPool    *[][]int64 `json:"uid_pool,omitempty"`
	AddUIDs    *[][]int64 `json:"add_uids,omitempty"`
	RemoveUIDs *[][]int64 `json:"remove_uids,omitempty"`
}

// hasUIDPool reports whether the opcode changes the uid pool.
func (o *OpClusterSetParams) hasUIDPool() bool {
	return o.UIDPool != nil || o.AddUIDs != nil || o.RemoveUIDs != nil
}

// uidPoolFields are the opcode's uid pool fields, checked on their own:
// each a valid pool definition.
func (o *OpClusterSetParams) uidPoolFields() (set, add, rm []UIDRange, e *Error) {
	for _, f := range []struct {
		name string
		v    *[][]int64
		dst  *[]UIDRange
	}{{"uid_pool", o.UIDPool, &set}, {"add_uids", o.AddUIDs, &add}, {"remove_uids", o.RemoveUIDs, &rm}} {
		if f.v == nil {
			continue
		}
		if *f.dst, e = UIDRangesFromJSON(f.name, *f.v); e != nil {
			return nil, nil, nil, e
		}
	}
	return set, add, rm, nil
}

// hasParams reports whether the opcode changes the parameter model.
func (o *OpClusterSetParams) hasParams() bool {
	return o.EnabledHypervisors != nil || o.DefaultHypervisor != nil || o.HVParams != nil || o.BEParams != nil ||
		o.NICParams != nil || o.DiskParams != nil || o.OSParams != nil
}

// validateParams checks the parameter model's fields on their own (the
// state's enabled hypervisors are checked in apply).
func (o *OpClusterSetParams) validateParams() *Error {
	if len(o.EnabledHypervisors) > len(KnownHypervisors) {
		return errf(CodeInval, "enabled_hypervisors", "enabled_hypervisors names %d hypervisors; gnt knows %d", len(o.EnabledHypervisors), len(KnownHypervisors))
	}
	seen := map[string]bool{}
	for _, hv := range o.EnabledHypervisors {
		if e := ValidateHypervisorName("enabled_hypervisors", hv); e != nil {
			return e
		}
		if seen[hv] {
			return errf(CodeInval, "enabled_hypervisors", "enabled_hypervisors names %s twice", hv)
		}
		seen[hv] = true
	}
	if o.DefaultHypervisor != nil && *o.DefaultHypervisor != "" {
		if e := ValidateHypervisorName("default_hypervisor", *o.DefaultHypervisor); e != nil {
			return e
		}
	}
	if len(o.HVParams) > len(KnownHypervisors) {
		return errf(CodeInval, "hvparams", "hvparams names %d hypervisors; gnt knows %d", len(o.HVParams), len(KnownHypervisors))
	}
	for _, hv := range sortedKeys(o.HVParams) {
		if _, e := ValidateHVParams("hvparams."+hv, hv, o.HVParams[hv], false, true); e != nil {
			return e
		}
	}
	if _, e := NormalizeParams("beparams", "backend", BEParamDefs, o.BEParams, true); e != nil {
		return e
	}
	if _, e := NormalizeParams("nicparams", "NIC", NICParamDefs, o.NICParams, true); e != nil {
		return e
	}
	if e := validateDiskParams("diskparams", o.DiskParams); e != nil {
		return e
	}
	if len(o.OSParams) > MaxParams {
		return errf(CodeInval, "osparams", "osparams names at most %d OSes, got %d", MaxParams, len(o.OSParams))
	}
	for _, os := range sortedKeys(o.OSParams) {
		if e := ValidateOSName("osparams", os); e != nil || os == "" {
			return errf(CodeInval, "osparams", "osparams: %q is not an OS name", os)
		}
		if e := validateOSParams("osparams."+os, o.OSParams[os]); e != nil {
			return e
		}
	}
	return nil
}

// validateDiskParams checks disk parameters per disk template.
func validateDiskParams(field string, dp map[string]map[string]any) *Error {
	if len(dp) > len(diskParamDefs) {
		return errf(CodeInval, field, "%s names %d disk templates; gnt knows %d", field, len(dp), len(diskParamDefs))
	}
	for _, t := range sortedKeys(dp) {
		defs, ok := diskParamDefs[t]
		if !ok {
			return errf(CodeInval, field+"."+t, "unknown disk template %q (known: %s)", t, strings.Join(DiskTemplates(), ", "))
		}
		if _, e := NormalizeParams(field+"."+t, "disk template "+t, defs, dp[t], true); e != nil {
			return e
		}
	}
	return nil
}

// validateOSParams checks OS parameters: names, and string values (the
// OS scripts receive them as OSP_* variables).
func validateOSParams(field string, m map[string]any) *Error {
	if e := validateParamMap(field, m); e != nil {
		return e
	}
	for _, k := range sortedKeys(m) {
		s, ok := m[k].(string)
		if !ok {
			return errf(CodeInval, field+"."+k, "OS parameter %s: %s is not a string", k, show(m[k]))
		}
		if len(s) > MaxParamValueLen || strings.ContainsAny(s, "\x00\n\r") {
			return errf(CodeInval, field+"."+k, "OS parameter %s: a value of at most %d bytes without NUL or line breaks", k, MaxParamValueLen)
		}
	}
	return nil
}

// hasMaint reports whether the opcode changes a maintenance parameter.
func (o *OpClusterSetParams) hasMaint() bool {
	return o.MaintRoundDelay != nil || o.MaintBalance != nil || o.MaintBalanceThresh != nil || o.MaintBalanceMaxMoves != nil ||
		o.RepairDeadGrace != nil || o.RepairBreakerShare != nil || o.RepairBreakerNodes != nil ||
		o.RepairBreakerOverrideUntil != nil || o.RepairMaxEvacuations != nil || o.RepairRoundJobLimit != nil ||
		o.RepairJobDelay != nil || o.DiagnoseInterval != nil || o.MaintdHarep != nil
}

func (o *OpClusterSetParams) validateMaint() *Error {
	nonNeg := func(field string, v *float64, max float64) *Error {
		if v != nil && (*v < 0 || *v > max || *v != *v) {
			return errf(CodeInval, field, "%s must be between 0 and %g, got %g", field, max, *v)
		}
		return nil
	}
	if o.MaintRoundDelay != nil && (*o.MaintRoundDelay < 1 || *o.MaintRoundDelay > 7*86400) {
		return errf(CodeInval, "maint_round_delay", "maint_round_delay must be 1 to 604800 seconds, got %d", *o.MaintRoundDelay)
	}
	for _, c := range []struct {
		f   string
		v   *float64
		max float64
	}{
		{"maint_balance_thresh", o.MaintBalanceThresh, 1},
		{"repair_breaker_share", o.RepairBreakerShare, 1},
		{"repair_dead_grace", o.RepairDeadGrace, 86400},
		{"repair_job_delay", o.RepairJobDelay, 3600},
		{"maint_diagnose_interval", o.DiagnoseInterval, 86400},
	} {
		if e := nonNeg(c.f, c.v, c.max); e != nil {
			return e
		}
	}
	if o.DiagnoseInterval != nil && *o.DiagnoseInterval < 1 {
		return errf(CodeInval, "maint_diagnose_interval", "maint_diagnose_interval must be at least 1 second, got %g", *o.DiagnoseInterval)
	}
	for _, c := range []struct {
		f string
		v *int
	}{
		{"repair_breaker_nodes", o.RepairBreakerNodes},
		{"repair_max_evacuations", o.RepairMaxEvacuations},
		{"repair_round_job_limit", o.RepairRoundJobLimit},
	} {
		if c.v != nil && (*c.v < 0 || *c.v > 100000) {
			return errf(CodeInval, c.f, "%s must be between 0 and 100000, got %d", c.f, *c.v)
		}
	}
	if v := o.MaintBalanceMaxMoves; v != nil && (*v < 1 || *v > MaxBalanceMaxMoves) {
		return errf(CodeInval, "maint_balance_max_moves", "maint_balance_max_moves must be between 1 and %d, got %d", MaxBalanceMaxMoves, *v)
	}
	if o.RepairRoundJobLimit != nil && *o.RepairRoundJobLimit < 1 {
		return errf(CodeInval, "repair_round_job_limit", "repair_round_job_limit must be at least 1, got %d", *o.RepairRoundJobLimit)
	}
	if o.RepairBreakerOverrideUntil != nil && *o.RepairBreakerOverrideUntil < 0 {
		return errf(CodeInval, "repair_breaker_override_until", "repair_breaker_override_until must be a Unix time in seconds or 0, got %d", *o.RepairBreakerOverrideUntil)
	}
	if f := o.DiagnoseDataCollectorFilename; f != nil {
		if e := ValidateCommandName("diagnose_data_collector_filename", *f); e != nil {
			return e
		}
	}
	return nil
}

// ValidateCommandName checks the name of a whitelisted node command (the
// self-diagnose collector, a repair command): a plain file name, or empty
// for the built-in.
func ValidateCommandName(field, name string) *Error {
	if name == "" {
		return nil
	}
	if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return errf(CodeInval, field, "%s %q must be a plain file name (no '/', not '.' or '..')", field, name)
	}
	return nil
}

// Validate implements Opcode.
func (o *OpClusterSetParams) Validate() *Error {
	if e := o.validateMaint(); e != nil {
		return e
	}
	if o.CandidatePoolSize != nil && (*o.CandidatePoolSize < 1 || *o.CandidatePoolSize > MaxCandidatePoolSize) {
		return errf(CodeInval, "candidate_pool_size", "candidate_pool_size must be 1 to %d, got %d", MaxCandidatePoolSize, *o.CandidatePoolSize)
	}
	if o.MaxVoters != nil && (*o.MaxVoters < 1 || *o.MaxVoters%2 == 0 || *o.MaxVoters > MaxRaftVoters) {
		return errf(CodeInval, "max_raft_voters", "max_raft_voters must be 1, 3, 5, 7 or 9, got %d", *o.MaxVoters)
	}
	if o.DefaultIAllocator != nil {
		if e := ValidateIAllocator("default_iallocator", *o.DefaultIAllocator); e != nil {
			return e
		}
	}
	if e := validateNDParams("ndparams", o.NDParams); e != nil {
		return e
	}
	if e := o.validateParams(); e != nil {
		return e
	}
	if _, _, _, e := o.uidPoolFields(); e != nil {
		return e
	}
	if o.CandidatePoolSize == nil && o.MaxVoters == nil && o.DefaultIAllocator == nil && o.NDParams == nil &&
		!o.hasMaint() && o.DiagnoseDataCollectorFilename == nil && o.RAPIAnonymousRead == nil && !o.hasParams() && !o.hasUIDPool() {
		return errf(CodeInval, "", "please pass at least one modification")
	}
	return nil
}

// Summary implements Opcode.
func (o *OpClusterSetParams) Summary() string { return "CLUSTER_SET_PARAMS" }

// OpGroupAdd adds a node group.
type OpGroupAdd struct {
	OpCommon
	GroupName   string         `json:"group_name"`
	AllocPolicy *string        `json:"alloc_policy,omitempty"`
	NDParams    map[string]any `json:"ndparams,omitempty"`
	// DiskParams override the cluster's disk parameters per disk
	// template for the group's instances.
	DiskParams map[string]map[string]any `json:"diskparams,omitempty"`
}

// Validate implements Opcode.
func (o *OpGroupAdd) Validate() *Error {
	if e := ValidateGroupName("group_name", o.GroupName); e != nil {
		return e
	}
	if e := validateAllocPolicy(o.AllocPolicy); e != nil {
		return e
	}
	if e := validateDiskParams("diskparams", o.DiskParams); e != nil {
		return e
	}
	return validateNDParams("ndparams", o.NDParams)
}

// Summary implements Opcode.
func (o *OpGroupAdd) Summary() string { return "GROUP_ADD(" + o.GroupName + ")" }

func validateAllocPolicy(p *string) *Error {
	if p == nil {
		return nil
	}
	switch *p {
	case AllocPreferred, AllocLastResort, AllocUnallocable:
		return nil
	}
	return errf(CodeInval, "alloc_policy", "alloc_policy %q is not one of preferred, last_resort, unallocable", *p)
}

// OpGroupSetParams changes a node group.
type OpGroupSetParams struct {
	OpCommon
	GroupName   string         `json:"group_name"`
	AllocPolicy *string        `json:"alloc_policy,omitempty"`
	NDParams    map[string]any `json:"ndparams,omitempty"`
	// DiskParams override the cluster's disk parameters per disk
	// template for the group's instances ("default" removes a key).
	DiskParams map[string]map[string]any `json:"diskparams,omitempty"`
}

// Validate implements Opcode.
func (o *OpGroupSetParams) Validate() *Error {
	if o.GroupName == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	if e := validateRefName("group_name", o.GroupName, MaxGroupNameLen); e != nil {
		return e
	}
	if e := validateAllocPolicy(o.AllocPolicy); e != nil {
		return e
	}
	if e := validateNDParams("ndparams", o.NDParams); e != nil {
		return e
	}
	if e := validateDiskParams("diskparams", o.DiskParams); e != nil {
		return e
	}
	if o.AllocPolicy == nil && o.NDParams == nil && o.DiskParams == nil {
		return errf(CodeInval, "", "please pass at least one modification")
	}
	return nil
}

// Summary implements Opcode.
func (o *OpGroupSetParams) Summary() string { return "GROUP_SET_PARAMS(" + o.GroupName + ")" }

// OpGroupRemove removes an empty node group.
type OpGroupRemove struct {
	OpCommon
	GroupName string `json:"group_name"`
}

// Validate implements Opcode.
func (o *OpGroupRemove) Validate() *Error {
	if o.GroupName == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	return validateRefName("group_name", o.GroupName, MaxGroupNameLen)
}

// Summary implements Opcode.
func (o *OpGroupRemove) Summary() string { return "GROUP_REMOVE(" + o.GroupName + ")" }

// OpNodeAdd adds a node. master_candidate is a gnt extension: when absent
// the node is promoted if the candidate pool needs it, as Ganeti does.
type OpNodeAdd struct {
	OpCommon
	NodeName        string         `json:"node_name"`
	PrimaryIP       string         `json:"primary_ip"`
	SecondaryIP     string         `json:"secondary_ip,omitempty"`
	Readd           bool           `json:"readd,omitempty"`
	Group           string         `json:"group,omitempty"`
	MasterCapable   *bool          `json:"master_capable,omitempty"`
	VMCapable       *bool          `json:"vm_capable,omitempty"`
	MasterCandidate *bool          `json:"master_candidate,omitempty"`
	NDParams        map[string]any `json:"ndparams,omitempty"`
}

// Validate implements Opcode.
func (o *OpNodeAdd) Validate() *Error {
	if e := ValidateHostname("node_name", o.NodeName); e != nil {
		return e
	}
	if e := validateIP("primary_ip", o.PrimaryIP, true); e != nil {
		return e
	}
	if e := validateIP("secondary_ip", o.SecondaryIP, false); e != nil {
		return e
	}
	if o.Readd {
		return errf(CodeInval, "readd", "re-adding a node is not supported; remove it and add it again")
	}
	if e := validateRefName("group", o.Group, MaxGroupNameLen); e != nil {
		return e
	}
	if o.MasterCandidate != nil && *o.MasterCandidate && o.MasterCapable != nil && !*o.MasterCapable {
		return errf(CodeInval, "master_candidate", "a node that is not master capable cannot be a master candidate")
	}
	return validateNDParams("ndparams", o.NDParams)
}

// Summary implements Opcode.
func (o *OpNodeAdd) Summary() string { return "NODE_ADD(" + o.NodeName + ")" }

// OpNodeSetParams changes a node's flags and parameters.
type OpNodeSetParams struct {
	OpCommon
	NodeName        string         `json:"node_name"`
	NodeUUID        string         `json:"node_uuid,omitempty"`
	Force           bool           `json:"force,omitempty"`
	MasterCandidate *bool          `json:"master_candidate,omitempty"`
	Offline         *bool          `json:"offline,omitempty"`
	Drained         *bool          `json:"drained,omitempty"`
	AutoPromote     bool           `json:"auto_promote,omitempty"`
	MasterCapable   *bool          `json:"master_capable,omitempty"`
	VMCapable       *bool          `json:"vm_capable,omitempty"`
	SecondaryIP     *string        `json:"secondary_ip,omitempty"`
	NDParams        map[string]any `json:"ndparams,omitempty"`
	Powered         *bool          `json:"powered,omitempty"`
}

// Validate implements Opcode.
func (o *OpNodeSetParams) Validate() *Error {
	if e := validateNodeRef(o.NodeName, o.NodeUUID); e != nil {
		return e
	}
	trues := 0
	for _, f := range []*bool{o.MasterCandidate, o.Offline, o.Drained} {
		if f != nil && *f {
			trues++
		}
	}
	if trues > 1 {
		return errf(CodeInval, "", "can't set the node into more than one state at the same time")
	}
	if o.SecondaryIP != nil {
		if e := validateIP("secondary_ip", *o.SecondaryIP, false); e != nil {
			return e
		}
	}
	if e := validateNDParams("ndparams", o.NDParams); e != nil {
		return e
	}
	if o.MasterCandidate == nil && o.Offline == nil && o.Drained == nil && o.MasterCapable == nil &&
		o.VMCapable == nil && o.SecondaryIP == nil && o.NDParams == nil && o.Powered == nil {
		return errf(CodeInval, "", "please pass at least one modification")
	}
	return nil
}

// Summary implements Opcode.
func (o *OpNodeSetParams) Summary() string { return "NODE_SET_PARAMS(" + o.nodeRef() + ")" }

func (o *OpNodeSetParams) nodeRef() string {
	if o.NodeName != "" {
		return o.NodeName
	}
	return o.NodeUUID
}

// OpNodeRemove removes a node.
type OpNodeRemove struct {
	OpCommon
	NodeName string `json:"node_name"`
	NodeUUID string `json:"node_uuid,omitempty"`
}

// Validate implements Opcode.
func (o *OpNodeRemove) Validate() *Error { return validateNodeRef(o.NodeName, o.NodeUUID) }

// validateNodeRef checks how an opcode names an existing node: by name
// or UUID, each a name of at most MaxHostnameLen bytes.
func validateNodeRef(name, uuid string) *Error {
	if name == "" && uuid == "" {
		return errf(CodeInval, "node_name", "node_name must not be empty")
	}
	if e := validateRefName("node_name", name, MaxHostnameLen); e != nil {
		return e
	}
	return validateRefName("node_uuid", uuid, MaxHostnameLen)
}

// Summary implements Opcode.
func (o *OpNodeRemove) Summary() string {
	if o.NodeName != "" {
		return "NODE_REMOVE(" + o.NodeName + ")"
	}
	return "NODE_REMOVE(" + o.NodeUUID + ")"
}

// Tag kinds (Ganeti's TAG_*).
const (
	TagCluster   = "cluster"
	TagNodeGroup = "nodegroup"
	TagNode      = "node"
	TagInstance  = "instance"
	TagNetwork   = "network"
)

// OpTagsSet adds tags to an object.
type OpTagsSet struct {
	OpCommon
	Kind string   `json:"kind"`
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags"`
}

// OpTagsDel removes tags from an object.
type OpTagsDel struct {
	OpCommon
	Kind string   `json:"kind"`
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags"`
}

func validateTagOp(kind, name string, tags []string) *Error {
	switch kind {
	case TagCluster:
	case TagNodeGroup, TagNode, TagInstance, TagNetwork:
		if name == "" {
			return errf(CodeInval, "name", "tag kind %q needs an object name", kind)
		}
	default:
		return errf(CodeInval, "kind", "unknown tag kind %q (cluster, nodegroup, node, instance, network)", kind)
	}
	if e := validateRefName("name", name, MaxHostnameLen); e != nil {
		return e
	}
	if len(tags) == 0 {
		return errf(CodeInval, "tags", "no tags given")
	}
	if len(tags) > MaxTagsPerObj {
		return errf(CodeInval, "tags", "at most %d tags at once (and per object), got %d", MaxTagsPerObj, len(tags))
	}
	for _, t := range tags {
		if e := ValidateTag(t); e != nil {
			return e
		}
	}
	return nil
}

// Validate implements Opcode.
func (o *OpTagsSet) Validate() *Error { return validateTagOp(o.Kind, o.Name, o.Tags) }

// Validate implements Opcode.
func (o *OpTagsDel) Validate() *Error { return validateTagOp(o.Kind, o.Name, o.Tags) }

// Summary implements Opcode.
func (o *OpTagsSet) Summary() string { return "TAGS_SET(" + tagTarget(o.Kind, o.Name) + ")" }

// Summary implements Opcode.
func (o *OpTagsDel) Summary() string { return "TAGS_DEL(" + tagTarget(o.Kind, o.Name) + ")" }

func tagTarget(kind, name string) string {
	if kind == TagCluster {
		return kind
	}
	return kind + "," + name
}

// OpTestDelay sleeps on the leader; with fail set (a gnt extension) it then
// fails. It exercises the executor path and serves tests and benchmarks.
type OpTestDelay struct {
	OpCommon
	Duration float64  `json:"duration"`
	OnMaster *bool    `json:"on_master,omitempty"`
	OnNodes  []string `json:"on_nodes,omitempty"`
	Repeat   int      `json:"repeat,omitempty"`
	NoLocks  *bool    `json:"no_locks,omitempty"`
	Fail     bool     `json:"fail,omitempty"`
}

// Validate implements Opcode.
func (o *OpTestDelay) Validate() *Error {
	if o.Duration < 0 || o.Duration > MaxTestDelaySeconds || math.IsNaN(o.Duration) {
		return errf(CodeInval, "duration", "duration must be between 0 and %d seconds, got %g", MaxTestDelaySeconds, o.Duration)
	}
	if o.Repeat < 0 || o.Repeat > MaxTestDelayRepeat {
		return errf(CodeInval, "repeat", "repeat must be between 0 and %d, got %d", MaxTestDelayRepeat, o.Repeat)
	}
	if total := o.Duration * float64(max(o.Repeat, 1)); total > MaxTestDelayTotalSeconds {
		return errf(CodeInval, "repeat", "duration × repeat must be at most %d seconds, got %g", MaxTestDelayTotalSeconds, total)
	}
	if len(o.OnNodes) > MaxTestDelayNodes {
		return errf(CodeInval, "on_nodes", "on_nodes has at most %d nodes, got %d", MaxTestDelayNodes, len(o.OnNodes))
	}
	for _, n := range o.OnNodes {
		if n == "" {
			return errf(CodeInval, "on_nodes", "on_nodes has an empty node name")
		}
		if e := ValidateName("on_nodes", n, MaxHostnameLen); e != nil {
			return e
		}
	}
	return nil
}

// Summary implements Opcode.
func (o *OpTestDelay) Summary() string { return "TEST_DELAY" }
