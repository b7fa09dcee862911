package pki

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// sealPrefix marks a sealed value and its scheme.
const sealPrefix = "gnt-seal-v1:"

// SealKey derives the key that seals the CA key in the replicated state
// from the cluster key: HMAC-SHA256(clusterKey, "gnt ca seal v1"). Every
// gntd holding cluster.key can unseal it; the replicated state alone
// cannot.
func SealKey(clusterKey []byte) []byte {
	m := hmac.New(sha256.New, clusterKey)
	m.Write([]byte("gnt ca seal v1"))
	return m.Sum(nil)
}

// Seal encrypts plain with AES-256-GCM under key (32 bytes), with a fresh
// random nonce; the result is printable.
func Seal(key, plain []byte) (string, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := aead.Seal(nonce, nonce, plain, []byte(sealPrefix))
	return sealPrefix + base64.StdEncoding.EncodeToString(out), nil
}

// Unseal decrypts what Seal made; a wrong key or a changed value is an
// error.
func Unseal(key []byte, sealed string) ([]byte, error) {
	rest, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok {
		return nil, errors.New("not a sealed value")
	}
	data, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, errors.New("sealed value is not base64")
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(data) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("sealed value is too short")
	}
	plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(sealPrefix))
	if err != nil {
		return nil, errors.New("sealed value does not open with this cluster key")
	}
	return plain, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, errors.New("a sealing key has 32 bytes")
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
