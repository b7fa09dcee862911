package confd

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"hash"

	"github.com/gnt-cluster/gnt/fsm"
)

// Why a packet is refused. The server drops refused packets without a
// reply; these errors say why, for its log and metrics.
var (
	ErrMagic     = errors.New("confd: packet does not start with " + Magic)
	ErrTooLarge  = errors.New("confd: packet larger than the protocol allows")
	ErrEnvelope  = errors.New("confd: malformed signed envelope")
	ErrHMAC      = errors.New("confd: wrong HMAC")
	ErrTimestamp = errors.New("confd: timestamp outside the allowed clock skew")
	ErrReplay    = errors.New("confd: request seen before")
	ErrMessage   = errors.New("confd: malformed message")
	ErrProtocol  = errors.New("confd: unknown protocol version")
	ErrType      = errors.New("confd: unknown request type")
	ErrSalt      = errors.New("confd: reply salt is not the request's rsalt")
)

// Envelope is the outer, signed object of a packet: msg is the serialized
// inner request or reply, salt is the request's timestamp or the reply's
// rsalt, and HMAC is hex HMAC-SHA1(key, salt+msg). Its slices point into
// the packet or into the buffer given to ParseEnvelope.
type Envelope struct {
	Msg, Salt, HMAC []byte
}

// ParseEnvelope checks the magic and reads the envelope of a packet. It
// does not check the HMAC (see MAC.Verify). buf is scratch space for
// unescaped strings; it is grown to len(packet) if smaller, and the grown
// buffer is returned for reuse.
func ParseEnvelope(packet, buf []byte) (Envelope, []byte, error) {
	var e Envelope
	if len(packet) > MaxPacket {
		return e, buf, ErrTooLarge
	}
	if len(packet) < len(Magic) || string(packet[:len(Magic)]) != Magic {
		return e, buf, ErrMagic
	}
	if cap(buf) < len(packet) {
		buf = make([]byte, 0, max(len(packet), 512))
	}
	buf = buf[:0]
	r := reader{fsm.NewJSONReader(packet[len(Magic):])}
	var haveMsg, haveSalt, haveHMAC bool
	ok := r.object(func(key []byte) bool {
		var dst *[]byte
		switch string(key) {
		case "msg":
			dst, haveMsg = &e.Msg, true
		case "salt":
			dst, haveSalt = &e.Salt, true
		case "hmac":
			dst, haveHMAC = &e.HMAC, true
		default:
			_, ok := r.Skip()
			return ok
		}
		s, ok := r.Str(&buf)
		*dst = s
		return ok
	})
	if !ok || !r.End() || !haveMsg || !haveSalt || !haveHMAC {
		return Envelope{}, buf, ErrEnvelope
	}
	return e, buf, nil
}

// object reads a JSON object, calling field for each key with the reader
// positioned at the value, which field must consume. Keys are compared as
// unescaped text; a key needing more than 64 bytes of unescaping is
// refused (no confd key is that long).
func (r *reader) object(field func(key []byte) bool) bool {
	if !r.Eat('{') {
		return false
	}
	if r.Eat('}') {
		return true
	}
	for {
		var scratch [64]byte
		kb := scratch[:0]
		key, ok := r.Str(&kb)
		if !ok || !r.Eat(':') || !field(key) {
			return false
		}
		if r.Eat('}') {
			return true
		}
		if !r.Eat(',') {
			return false
		}
	}
}

// AppendEnvelope appends a whole packet: the magic, then the envelope
// {"hmac": ..., "msg": ..., "salt": ...} with msg signed under salt. The
// packet is ASCII whatever msg and salt hold.
func AppendEnvelope(dst []byte, m *MAC, salt, msg []byte) []byte {
	dst = append(dst, Magic...)
	dst = append(dst, `{"hmac":"`...)
	dst = m.Append(dst, salt, msg)
	dst = append(dst, `","msg":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"salt":`...)
	dst = appendString(dst, salt)
	return append(dst, '}')
}

// MAC signs and verifies with the cluster key: HMAC-SHA1 over salt+msg,
// keyed with the whole key file as it is on disk (Ganeti's hmac.key is 40
// hex characters and a newline, and the newline is part of the key). A MAC
// is not safe for concurrent use; give each goroutine its own.
type MAC struct {
	h   hash.Hash
	sum [sha1.Size]byte
}

// NewMAC returns a MAC for the key.
func NewMAC(key []byte) *MAC {
	return &MAC{h: hmac.New(sha1.New, key)}
}

func (m *MAC) compute(salt, msg []byte) []byte {
	m.h.Reset()
	m.h.Write(salt)
	m.h.Write(msg)
	return m.h.Sum(m.sum[:0])
}

// Append appends the lowercase hex digest of salt+msg.
func (m *MAC) Append(dst, salt, msg []byte) []byte {
	return hex.AppendEncode(dst, m.compute(salt, msg))
}

// Verify reports whether digest is the hex digest of salt+msg. Ganeti
// compares digests case-insensitively; so does Verify, in constant time.
func (m *MAC) Verify(salt, msg, digest []byte) bool {
	if len(digest) != 2*sha1.Size {
		return false
	}
	var want, got [2 * sha1.Size]byte
	hex.Encode(want[:], m.compute(salt, msg))
	for i, c := range digest {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		got[i] = c
	}
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}
