package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// A small client of QEMU's Machine Protocol (QMP): one JSON object per
// line over a unix socket; the server greets ({"QMP": {...}}), the client
// enters command mode with qmp_capabilities, then each command
// ({"execute", "arguments", "id"}) gets one reply, {"return": ...} or
// {"error": {"class", "desc"}}, carrying the command's id; asynchronous
// {"event": ...} messages can come at any time in between.

// maxQMPLine bounds one QMP message; QEMU's replies to the commands the
// driver sends are a few KiB.
const maxQMPLine = 1 << 20

// qmpMessage is one parsed QMP message: exactly one of Greeting, Return,
// Error or Event is set.
type qmpMessage struct {
	Greeting bool
	Return   json.RawMessage
	Error    *qmpError
	Event    string
	ID       string // the command's id of a return or error ("" if none)
}

// qmpError is QEMU's error reply.
type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

// parseQMP parses one line from QEMU. It refuses anything that is not a
// single JSON object with exactly one of the keys QMP, return, error or
// event, an error without a class, an event without a name, and an id
// that is not a string or a number.
func parseQMP(line []byte) (qmpMessage, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return qmpMessage{}, errors.New("qmp: empty message")
	}
	if len(line) > maxQMPLine {
		return qmpMessage{}, fmt.Errorf("qmp: message of %d bytes, over the limit of %d", len(line), maxQMPLine)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return qmpMessage{}, fmt.Errorf("qmp: not a JSON object: %w", err)
	}
	if raw == nil {
		return qmpMessage{}, errors.New("qmp: not a JSON object: null")
	}
	if dec.More() {
		return qmpMessage{}, errors.New("qmp: trailing data after the message")
	}
	var m qmpMessage
	kinds := 0
	if v, ok := raw["QMP"]; ok {
		kinds++
		var g map[string]json.RawMessage
		if err := json.Unmarshal(v, &g); err != nil || g == nil {
			return qmpMessage{}, errors.New("qmp: greeting is not an object")
		}
		m.Greeting = true
	}
	if v, ok := raw["return"]; ok {
		kinds++
		m.Return = v
	}
	if v, ok := raw["error"]; ok {
		kinds++
		var e qmpError
		if err := json.Unmarshal(v, &e); err != nil {
			return qmpMessage{}, fmt.Errorf("qmp: error reply is not an object: %w", err)
		}
		if e.Class == "" {
			return qmpMessage{}, errors.New("qmp: error reply without a class")
		}
		m.Error = &e
	}
	if v, ok := raw["event"]; ok {
		kinds++
		if err := json.Unmarshal(v, &m.Event); err != nil || m.Event == "" {
			return qmpMessage{}, errors.New("qmp: event without a name")
		}
	}
	if kinds != 1 {
		return qmpMessage{}, fmt.Errorf("qmp: want exactly one of QMP, return, error, event; got %d", kinds)
	}
	if v, ok := raw["id"]; ok {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(v, &s) == nil:
			m.ID = s
		case json.Unmarshal(v, &n) == nil:
			m.ID = n.String()
		default:
			return qmpMessage{}, errors.New("qmp: id is neither a string nor a number")
		}
	}
	return m, nil
}

// qmpConn is one QMP session in command mode.
type qmpConn struct {
	c    net.Conn
	r    *bufio.Reader
	next atomic.Int64
}

// dialQMP connects to the QMP socket at path, reads the greeting and
// enters command mode, all within ctx. A path too long for a unix socket
// address is reached through its directory's /proc/self/fd entry.
func dialQMP(ctx context.Context, path string) (*qmpConn, error) {
	addr := path
	if len(path) > 100 {
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		addr = "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + filepath.Base(path)
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, err
	}
	q := &qmpConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	m, err := q.read()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if !m.Greeting {
		c.Close()
		return nil, errors.New("qmp: the server did not greet")
	}
	if _, err := q.exec(ctx, "qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpConn) Close() error { return q.c.Close() }

func (q *qmpConn) read() (qmpMessage, error) {
	var line []byte
	for {
		chunk, isPrefix, err := q.r.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return qmpMessage{}, err
		}
		line = append(line, chunk...)
		if len(line) > maxQMPLine {
			return qmpMessage{}, fmt.Errorf("qmp: message over the limit of %d bytes", maxQMPLine)
		}
		if !isPrefix {
			break
		}
	}
	return parseQMP(line)
}

// exec runs one command and returns its reply's return value; events
// that arrive meanwhile are skipped.
func (q *qmpConn) exec(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return q.execFD(ctx, cmd, args, nil)
}

// execFD is exec, passing f's descriptor to qemu with the command
// (SCM_RIGHTS), as QMP's add-fd and getfd take theirs; f nil: none.
func (q *qmpConn) execFD(ctx context.Context, cmd string, args any, f *os.File) (json.RawMessage, error) {
	if dl, ok := ctx.Deadline(); ok {
		q.c.SetDeadline(dl)
	} else {
		q.c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { q.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	id := "gnt-" + strconv.FormatInt(q.next.Add(1), 10)
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	if f == nil {
		_, err = q.c.Write(data)
	} else if uc, ok := q.c.(*net.UnixConn); !ok {
		err = errors.New("passing a file descriptor needs a unix socket")
	} else {
		_, _, err = uc.WriteMsgUnix(data, syscall.UnixRights(int(f.Fd())), nil)
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		m, err := q.read()
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		if m.Event != "" || m.Greeting || m.ID != id {
			continue
		}
		if m.Error != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, m.Error)
		}
		return m.Return, nil
	}
}

// call runs one command and decodes its return value into out (nil:
// ignored).
func (q *qmpConn) call(ctx context.Context, cmd string, args, out any) error {
	ret, err := q.exec(ctx, cmd, args)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(ret, out); err != nil {
		return fmt.Errorf("qmp %s: unexpected reply %s: %w", cmd, truncate(string(ret), 200), err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// qmpDo dials path, runs fn with the session and closes it.
func qmpDo(ctx context.Context, path string, fn func(q *qmpConn) error) error {
	q, err := dialQMP(ctx, path)
	if err != nil {
		return err
	}
	defer q.Close()
	return fn(q)
}

// QMPCall runs one QMP command on the QEMU monitor socket at path (a
// session of its own: greeting, qmp_capabilities, the command) and
// decodes its return value into out (nil: ignored). It is the driver's
// own client, for tools and benchmarks that drive a qemu of their own.
func QMPCall(ctx context.Context, path, cmd string, args, out any) error {
	return qmpDo(ctx, path, func(q *qmpConn) error { return q.call(ctx, cmd, args, out) })
}
