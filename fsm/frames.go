package fsm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// The commands on the busiest path (job submissions and updates, and the
// batches that carry them) are written in binary frames rather than JSON:
// varints, and byte strings as a uvarint length and the bytes. JSON made
// every replica scan each opcode once more than it decodes it.

// frameReader reads frames from a command body; the first error sticks,
// and every later read returns zero values.
type frameReader struct {
	b    []byte
	off  int
	what string // the command, for errors
	err  *Error
}

func (r *frameReader) fail(field string) {
	if r.err == nil {
		r.err = errf(CodeInval, "", "%s: bad %s at offset %d", r.what, field, r.off)
	}
}

func (r *frameReader) varint(field string) int64 { return readNumber(r, field, binary.Varint) }

func (r *frameReader) uvarint(field string) uint64 { return readNumber(r, field, binary.Uvarint) }

// readNumber reads one varint with read (binary.Varint or Uvarint).
func readNumber[T int64 | uint64](r *frameReader, field string, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, k := read(r.b[r.off:])
	if k <= 0 {
		r.fail(field)
		return 0
	}
	r.off += k
	return v
}

// count reads a list length; every item takes at least one byte, so a
// count beyond what is left is damage, not a reason to allocate.
func (r *frameReader) count(field string) int {
	n := r.uvarint(field)
	if r.err == nil && n > uint64(len(r.b)-r.off) {
		r.fail(field)
		return 0
	}
	return int(n)
}

// bytes reads a byte string, copied out of the body (which may be a
// large batch entry that must not stay referenced).
func (r *frameReader) bytes(field string) []byte {
	n := r.uvarint(field)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail(field)
		return nil
	}
	out := append([]byte(nil), r.b[r.off:r.off+int(n)]...)
	r.off += int(n)
	return out
}

func (r *frameReader) str(field string) string { return string(r.bytes(field)) }

// end checks that the whole body was read.
func (r *frameReader) end() *Error {
	if r.err == nil && r.off != len(r.b) {
		r.fail("trailing data")
	}
	return r.err
}

func appendBytes(out, b []byte) []byte {
	out = binary.AppendUvarint(out, uint64(len(b)))
	return append(out, b...)
}

func appendString(out []byte, s string) []byte {
	out = binary.AppendUvarint(out, uint64(len(s)))
	return append(out, s...)
}

// encode writes a JobSubmit as CmdJobSubmitFrames: Now, then the opcodes
// and the UUIDs, each list as a count and its byte strings, then the
// token as a byte string when there is one (LogVersion 1). The opcodes
// are raw JSON already; Apply decodes and validates each once.
func (c JobSubmit) encode() ([]byte, error) {
	size := 1 + 3*binary.MaxVarintLen64
	for i, op := range c.Ops {
		if len(op) == 0 {
			return nil, fmt.Errorf("opcode %d is empty", i)
		}
		size += len(op) + binary.MaxVarintLen64
	}
	for _, u := range c.UUIDs {
		size += len(u) + binary.MaxVarintLen64
	}
	size += len(c.Token) + binary.MaxVarintLen64
	out := make([]byte, 0, size)
	out = append(out, byte(CmdJobSubmitFrames))
	out = binary.AppendVarint(out, c.Now)
	out = binary.AppendUvarint(out, uint64(len(c.Ops)))
	for _, op := range c.Ops {
		out = appendBytes(out, op)
	}
	out = binary.AppendUvarint(out, uint64(len(c.UUIDs)))
	for _, u := range c.UUIDs {
		out = appendString(out, u)
	}
	if c.Token != "" {
		out = appendString(out, c.Token)
	}
	return out, nil
}

// DecodeJobSubmit reads the body of a CmdJobSubmitFrames entry (without
// its type byte); anything short, overlong or left over is an error.
func DecodeJobSubmit(body []byte) (JobSubmit, *Error) {
	r := frameReader{b: body, what: "job submission"}
	c := JobSubmit{Now: r.varint("time")}
	c.Ops = make([]json.RawMessage, r.count("opcode count"))
	for i := range c.Ops {
		c.Ops[i] = r.bytes("opcode")
	}
	c.UUIDs = make([]string, r.count("UUID count"))
	for i := range c.UUIDs {
		c.UUIDs[i] = r.str("UUID")
	}
	if r.err == nil && r.off < len(r.b) {
		if c.Token = r.str("token"); r.err == nil && c.Token == "" {
			r.fail("token (empty)")
		}
	}
	if e := r.end(); e != nil {
		return JobSubmit{}, e
	}
	return c, nil
}

// jobUpdateRare holds the JobUpdate fields few updates carry; they are
// framed as one JSON document, empty when none is set.
type jobUpdateRare struct {
	Locks   []LockDecl   `json:"locks,omitempty"`
	Changes []StepChange `json:"changes,omitempty"`
	// Incarnation and Survived since LogVersion 32.
	Incarnation string   `json:"incarnation,omitempty"`
	Survived    []uint64 `json:"survived,omitempty"`
}

// encode writes a JobUpdate as CmdJobUpdateFrames: Now, Epoch, JobID,
// OpIndex, Action, Status, Result, the log lines (a count and strings),
// Step, StepName, then Locks, Changes, Incarnation and Survived as one
// JSON byte string (empty when none is set).
func (c JobUpdate) encode() ([]byte, error) {
	var rare []byte
	if len(c.Locks) > 0 || len(c.Changes) > 0 || c.Incarnation != "" || len(c.Survived) > 0 {
		var err error
		if rare, err = json.Marshal(jobUpdateRare{Locks: c.Locks, Changes: c.Changes, Incarnation: c.Incarnation, Survived: c.Survived}); err != nil {
			return nil, err
		}
	}
	if len(c.Result) > 0 && !validResult(c.Result) {
		return nil, fmt.Errorf("job update result is not JSON: %.40q", c.Result)
	}
	size := 1 + 7*binary.MaxVarintLen64 + len(c.Action) + len(c.Status) + len(c.Result) + len(c.StepName) + len(rare)
	for _, l := range c.Log {
		size += len(l) + binary.MaxVarintLen64
	}
	out := make([]byte, 0, size)
	out = append(out, byte(CmdJobUpdateFrames))
	out = binary.AppendVarint(out, c.Now)
	out = binary.AppendUvarint(out, c.Epoch)
	out = binary.AppendVarint(out, c.JobID)
	out = binary.AppendVarint(out, int64(c.OpIndex))
	out = appendString(out, c.Action)
	out = appendString(out, c.Status)
	out = appendBytes(out, c.Result)
	out = binary.AppendUvarint(out, uint64(len(c.Log)))
	for _, l := range c.Log {
		out = appendString(out, l)
	}
	out = binary.AppendVarint(out, int64(c.Step))
	out = appendString(out, c.StepName)
	return appendBytes(out, rare), nil
}

// validResult reports whether b is one JSON value, exactly as json.Valid
// does. The results most updates carry are one of a few literals, and
// those skip encoding/json's scanner (the leader encodes each update and
// every member decodes it).
func validResult(b []byte) bool {
	switch string(b) {
	case "null", "true", "false", "[]", "{}", `""`:
		return true
	}
	return json.Valid(b)
}

// DecodeJobUpdate reads the body of a CmdJobUpdateFrames entry (without
// its type byte).
func DecodeJobUpdate(body []byte) (JobUpdate, *Error) {
	r := frameReader{b: body, what: "job update"}
	c := JobUpdate{Now: r.varint("time"), Epoch: r.uvarint("epoch"), JobID: r.varint("job id"), OpIndex: int(r.varint("opcode index")),
		Action: r.str("action"), Status: r.str("status"), Result: r.bytes("result")}
	if len(c.Result) == 0 {
		c.Result = nil
	} else if r.err == nil && !validResult(c.Result) {
		r.fail("result")
	}
	if n := r.count("log count"); n > 0 {
		c.Log = make([]string, n)
		for i := range c.Log {
			c.Log[i] = r.str("log line")
		}
	}
	c.Step, c.StepName = int(r.varint("step")), r.str("step name")
	rare := r.bytes("locks and changes")
	if e := r.end(); e != nil {
		return JobUpdate{}, e
	}
	if len(rare) > 0 {
		var x jobUpdateRare
		if err := DecodeStrict(rare, &x); err != nil {
			return JobUpdate{}, AsError(err)
		}
		c.Locks, c.Changes, c.Incarnation, c.Survived = x.Locks, x.Changes, x.Incarnation, x.Survived
	}
	return c, nil
}
