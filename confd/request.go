package confd

import (
	"encoding/json"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// QueryKind is the JSON kind of a request's query, the three Ganeti
// accepts (ConfdQuery: EmptyQuery, PlainQuery, DictQuery).
type QueryKind int

// Query kinds.
const (
	QueryNone   QueryKind = iota // null or absent
	QueryString                  // a plain string: a name, an IP, a link, a pointer
	QueryDict                    // an object with the CONFD_REQQ_* keys
)

// Query is a request's query. For a dict, each Has* says whether its key
// was present; BadDict is set when a key Ganeti knows held a value of the
// wrong kind (the answer is then an argument error).
type Query struct {
	Kind QueryKind
	Str  string // QueryString

	HasLink, HasIP, HasIPList, HasFields bool
	Link, IP                             string
	IPList                               []string
	Fields                               []int
	BadDict                              bool
}

// Request is the inner message of a request packet.
type Request struct {
	Protocol int
	Type     RequestType
	Query    Query
	RSalt    string
}

// maxListItems bounds the lists of a dict query. A packet of MaxPacket
// bytes cannot hold more items than this anyway; the bound only makes that
// explicit.
const maxListItems = MaxPacket / 3

// ParseRequest reads an authenticated request message. It refuses what
// Ganeti's daemons refuse without answering: malformed JSON, a missing
// protocol, type or rsalt, an empty rsalt, a protocol other than 1, an
// unknown type, and a query that is neither null, a string nor an object.
// buf is scratch space as for ParseEnvelope.
func ParseRequest(msg, buf []byte) (Request, []byte, error) {
	var q Request
	if cap(buf) < len(msg) {
		buf = make([]byte, 0, max(len(msg), 256))
	}
	buf = buf[:0]
	r := reader{fsm.NewJSONReader(msg)}
	var haveProto, haveType, haveSalt bool
	var proto, typ int64
	ok := r.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "protocol":
			proto, ok = r.Int()
			haveProto = true
		case "type":
			typ, ok = r.Int()
			haveType = true
		case "rsalt":
			var s []byte
			s, ok = r.Str(&buf)
			q.RSalt = string(s)
			haveSalt = true
		case "query":
			q.Query, ok = r.query(&buf)
		default:
			_, ok = r.Skip()
		}
		return ok
	})
	if !ok || !r.End() || !haveProto || !haveType || !haveSalt || q.RSalt == "" {
		return Request{}, buf, ErrMessage
	}
	if proto != ProtocolVersion {
		return Request{}, buf, ErrProtocol
	}
	q.Protocol = int(proto)
	q.Type = RequestType(typ)
	if typ < 0 || typ > 1<<20 || !q.Type.Known() {
		return Request{}, buf, ErrType
	}
	return q, buf, nil
}

func (r *reader) query(buf *[]byte) (Query, bool) {
	var q Query
	switch r.Peek() {
	case 'n':
		return q, r.Lit("null")
	case '"':
		s, ok := r.Str(buf)
		q.Kind, q.Str = QueryString, string(s)
		return q, ok
	case '{':
		q.Kind = QueryDict
	default:
		return q, false
	}
	ok := r.object(func(key []byte) bool {
		switch string(key) {
		case QueryLink, QueryIP:
			if r.Peek() != '"' {
				q.BadDict = true
				_, ok := r.Skip()
				return ok
			}
			s, ok := r.Str(buf)
			if string(key) == QueryLink {
				q.HasLink, q.Link = true, string(s)
			} else {
				q.HasIP, q.IP = true, string(s)
			}
			return ok
		case QueryIPList, QueryFields:
			if r.Peek() != '[' {
				q.BadDict = true
				_, ok := r.Skip()
				return ok
			}
			if string(key) == QueryIPList {
				q.HasIPList, q.IPList = true, q.IPList[:0]
			} else {
				q.HasFields, q.Fields = true, q.Fields[:0]
			}
			return r.list(func() bool {
				if string(key) == QueryIPList {
					if r.Peek() != '"' || len(q.IPList) >= maxListItems {
						q.BadDict = true
						_, ok := r.Skip()
						return ok
					}
					s, ok := r.Str(buf)
					q.IPList = append(q.IPList, string(s))
					return ok
				}
				if c := r.Peek(); c != '-' && (c < '0' || c > '9') || len(q.Fields) >= maxListItems {
					q.BadDict = true
					_, ok := r.Skip()
					return ok
				}
				save := r.Pos()
				n, ok := r.Int()
				if !ok {
					// A number, but not a small integer.
					r.SetPos(save)
					q.BadDict = true
					_, ok := r.Skip()
					return ok
				}
				q.Fields = append(q.Fields, int(n))
				return true
			})
		default:
			_, ok := r.Skip()
			return ok
		}
	})
	return q, ok
}

// list reads a JSON array, calling item with the reader at each element.
func (r *reader) list(item func() bool) bool {
	if !r.Eat('[') {
		return false
	}
	if r.Eat(']') {
		return true
	}
	for {
		if !item() {
			return false
		}
		if r.Eat(']') {
			return true
		}
		if !r.Eat(',') {
			return false
		}
	}
}

// AppendRequestMsg appends the inner message of a request with a query
// given as JSON ("null" when empty).
func AppendRequestMsg(dst []byte, t RequestType, query []byte, rsalt string) []byte {
	dst = append(dst, `{"protocol":`...)
	dst = strconv.AppendInt(dst, ProtocolVersion, 10)
	dst = append(dst, `,"type":`...)
	dst = strconv.AppendInt(dst, int64(t), 10)
	dst = append(dst, `,"query":`...)
	if len(query) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, query...)
	}
	dst = append(dst, `,"rsalt":`...)
	dst = appendString(dst, rsalt)
	return append(dst, '}')
}

// QueryJSON encodes a query as JSON, ASCII only.
func QueryJSON(q Query) []byte {
	switch q.Kind {
	case QueryString:
		return appendString(nil, q.Str)
	case QueryDict:
		m := map[string]any{}
		if q.HasLink {
			m[QueryLink] = q.Link
		}
		if q.HasIP {
			m[QueryIP] = q.IP
		}
		if q.HasIPList {
			m[QueryIPList] = nonNil(q.IPList)
		}
		if q.HasFields {
			m[QueryFields] = nonNil(q.Fields)
		}
		b, _ := json.Marshal(m) // strings, string lists and int lists always encode
		return asciiJSON(b)
	}
	return []byte("null")
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Reply is the inner message of a reply packet. Answer is raw JSON.
type Reply struct {
	Protocol int
	Status   int
	Answer   json.RawMessage
	Serial   int64
}

// AppendReplyMsg appends the inner message of a reply; answer must be
// valid ASCII JSON.
func AppendReplyMsg(dst []byte, status int, answer []byte, serial int64) []byte {
	dst = append(dst, `{"protocol":`...)
	dst = strconv.AppendInt(dst, ProtocolVersion, 10)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, `,"answer":`...)
	dst = append(dst, answer...)
	dst = append(dst, `,"serial":`...)
	dst = strconv.AppendInt(dst, serial, 10)
	return append(dst, '}')
}

// ParseReply reads an authenticated reply message. The answer is copied
// out of msg.
func ParseReply(msg []byte) (Reply, error) {
	var p Reply
	var haveProto, haveStatus, haveAnswer, haveSerial bool
	r := reader{fsm.NewJSONReader(msg)}
	ok := r.object(func(key []byte) bool {
		var ok bool
		var n int64
		switch string(key) {
		case "protocol":
			n, ok = r.Int()
			p.Protocol, haveProto = int(n), true
		case "status":
			n, ok = r.Int()
			p.Status, haveStatus = int(n), true
		case "serial":
			p.Serial, ok = r.Int()
			haveSerial = true
		case "answer":
			var raw []byte
			raw, ok = r.Skip()
			p.Answer, haveAnswer = append(json.RawMessage(nil), raw...), true
		default:
			_, ok = r.Skip()
		}
		return ok
	})
	if !ok || !r.End() || !haveProto || !haveStatus || !haveAnswer || !haveSerial {
		return Reply{}, ErrMessage
	}
	if p.Protocol != ProtocolVersion {
		return Reply{}, ErrProtocol
	}
	return p, nil
}
