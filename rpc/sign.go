package rpc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// JoinKeyLabel is the label the join key is derived with from the cluster
// key.
const JoinKeyLabel = "gnt join v1"

// MaxClockSkew is how far a signed request's timestamp may be from the
// receiver's clock.
const MaxClockSkew = 300 * time.Second

// Errors of Verify; the returned error wraps one of them.
var (
	ErrBadTimestamp = errors.New("bad, missing or stale " + HeaderTimestamp) // the timestamp is refused
	ErrBadSignature = errors.New("bad or missing " + HeaderSignature)        // the signature is refused
)

// DeriveKey derives a purpose-specific key from the cluster key:
// HMAC-SHA256(clusterKey, label).
func DeriveKey(clusterKey []byte, label string) []byte {
	m := hmac.New(sha256.New, clusterKey)
	m.Write([]byte(label))
	return m.Sum(nil)
}

func mac(key []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte{'\n'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the X-Gnt-Signature of a body sent at unix time ts: the
// lowercase hex HMAC-SHA256 of ts + "\n" + body.
func Sign(key []byte, ts int64, body []byte) string {
	return hex.EncodeToString(mac(key, strconv.FormatInt(ts, 10), body))
}

// Verify checks a signed request: the timestamp header must be a decimal
// unix time within MaxClockSkew of now, and sig its signature over body.
func Verify(key []byte, tsHeader, sig string, body []byte, now time.Time) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: no key to verify with", ErrBadSignature)
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != tsHeader {
		return fmt.Errorf("%w: %q is not a unix time in seconds", ErrBadTimestamp, tsHeader)
	}
	skew := int64(MaxClockSkew / time.Second)
	if n := now.Unix(); ts < n-skew || ts > n+skew {
		return fmt.Errorf("%w: %d is more than %d s away from this server's clock (%d)", ErrBadTimestamp, ts, skew, n)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: not a hex HMAC-SHA256", ErrBadSignature)
	}
	if !hmac.Equal(got, mac(key, tsHeader, body)) {
		return fmt.Errorf("%w: signature does not match", ErrBadSignature)
	}
	return nil
}
