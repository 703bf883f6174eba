package tlsconn

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// suite is what kwatch needs to know of a cipher suite to decrypt it: the
// AEAD and its key length, and the hash of the key schedule.
type suite struct {
	id     uint16
	tls13  bool
	keyLen int // bytes
	hash   func() hash.Hash
	chacha bool // ChaCha20-Poly1305 (else AES-GCM)
}

// suites are the AEAD cipher suites kwatch decrypts: TLS 1.3's (RFC 8446
// §B.4, without the CCM ones) and TLS 1.2's AES-GCM (RFC 5288, RFC 5289) and
// ChaCha20-Poly1305 (RFC 7905) suites with ECDHE, DHE or RSA key exchange.
var suites = map[uint16]*suite{
	tls.TLS_AES_128_GCM_SHA256:       {tls13: true, keyLen: 16, hash: sha256.New},
	tls.TLS_AES_256_GCM_SHA384:       {tls13: true, keyLen: 32, hash: sha512.New384},
	tls.TLS_CHACHA20_POLY1305_SHA256: {tls13: true, keyLen: 32, hash: sha256.New, chacha: true},

	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:         {keyLen: 16, hash: sha256.New},
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       {keyLen: 16, hash: sha256.New},
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:         {keyLen: 32, hash: sha512.New384},
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       {keyLen: 32, hash: sha512.New384},
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   {keyLen: 32, hash: sha256.New, chacha: true},
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: {keyLen: 32, hash: sha256.New, chacha: true},
	tls.TLS_RSA_WITH_AES_128_GCM_SHA256:               {keyLen: 16, hash: sha256.New},
	tls.TLS_RSA_WITH_AES_256_GCM_SHA384:               {keyLen: 32, hash: sha512.New384},
	0x009e:                                            {keyLen: 16, hash: sha256.New},               // TLS_DHE_RSA_WITH_AES_128_GCM_SHA256
	0x009f:                                            {keyLen: 32, hash: sha512.New384},            // TLS_DHE_RSA_WITH_AES_256_GCM_SHA384
	0xccaa:                                            {keyLen: 32, hash: sha256.New, chacha: true}, // TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256
}

func init() {
	for id, s := range suites {
		s.id = id
	}
}

// suiteName names a cipher suite as IANA does ("TLS_AES_128_GCM_SHA256"),
// with the hex value for those crypto/tls does not know.
func suiteName(id uint16) string {
	switch id {
	case 0x009e:
		return "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256"
	case 0x009f:
		return "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384"
	case 0xccaa:
		return "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
	}
	return tls.CipherSuiteName(id)
}

// expandLabel is HKDF-Expand-Label (RFC 8446 §7.1) with an empty context:
// HKDF-Expand(secret, HkdfLabel, length), HkdfLabel being the length, the
// label prefixed with "tls13 " and the context, each length-prefixed.
// crypto/tls has it internally only.
func expandLabel(h func() hash.Hash, secret []byte, label string, length int) ([]byte, error) {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // empty context
	return hkdf.Expand(h, secret, string(info), length)
}

// prf12 is TLS 1.2's PRF (RFC 5246 §5): P_hash(secret, label + seed) cut to
// length bytes, with the cipher suite's hash (SHA-256, or SHA-384 for the
// _SHA384 suites). crypto/tls has it internally only.
func prf12(h func() hash.Hash, secret []byte, label string, seed []byte, length int) []byte {
	ls := append([]byte(label), seed...)
	mac := hmac.New(h, secret)
	mac.Write(ls)
	a := mac.Sum(nil) // A(1)
	out := make([]byte, 0, length+mac.Size())
	for len(out) < length {
		mac.Reset()
		mac.Write(a)
		mac.Write(ls)
		out = mac.Sum(out)
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(a[:0])
	}
	return out[:length]
}

// cipherState protects the records of one direction under one key: the
// AEAD, its IV and the next record sequence number (RFC 8446 §5.3, RFC 5246
// §6.1).
type cipherState struct {
	aead cipher.AEAD
	// iv is the 12-byte IV XORed with the sequence number (TLS 1.3, and
	// ChaCha20-Poly1305 in TLS 1.2, RFC 7905 §2), or TLS 1.2 AES-GCM's
	// 4-byte salt, followed in each record by an 8-byte explicit nonce
	// (RFC 5288 §3).
	iv    []byte
	tls13 bool
	seq   uint64
	// secret is the TLS 1.3 traffic secret the key came from, for
	// KeyUpdate (RFC 8446 §7.2); hash its hash.
	secret []byte
	hash   func() hash.Hash
	nonce  [12]byte
	aad    [13]byte
}

func newAEAD(s *suite, key []byte) (cipher.AEAD, error) {
	if s.chacha {
		return chacha20poly1305.New(key)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// newTLS13State derives the key and IV of a TLS 1.3 traffic secret (RFC
// 8446 §7.3).
func newTLS13State(s *suite, secret []byte) (*cipherState, error) {
	key, err := expandLabel(s.hash, secret, "key", s.keyLen)
	if err != nil {
		return nil, err
	}
	iv, err := expandLabel(s.hash, secret, "iv", 12)
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(s, key)
	if err != nil {
		return nil, err
	}
	return &cipherState{aead: aead, iv: iv, tls13: true, secret: secret, hash: s.hash}, nil
}

// next is the state after a KeyUpdate: the next traffic secret (RFC 8446
// §7.2, "traffic upd") and its key, sequence number 0.
func (c *cipherState) next(s *suite) (*cipherState, error) {
	secret, err := expandLabel(c.hash, c.secret, "traffic upd", c.hash().Size())
	if err != nil {
		return nil, err
	}
	return newTLS13State(s, secret)
}

// newTLS12States derives both directions' states from a TLS 1.2 master
// secret (RFC 5246 §6.3: the key block from "key expansion" with the
// server random then the client random). AEAD suites have no MAC keys.
func newTLS12States(s *suite, master []byte, clientRandom, serverRandom [32]byte) (client, server *cipherState, err error) {
	ivLen := 4
	if s.chacha {
		ivLen = 12
	}
	seed := append(append([]byte(nil), serverRandom[:]...), clientRandom[:]...)
	kb := prf12(s.hash, master, "key expansion", seed, 2*s.keyLen+2*ivLen)
	ck, sk := kb[:s.keyLen], kb[s.keyLen:2*s.keyLen]
	civ, siv := kb[2*s.keyLen:2*s.keyLen+ivLen], kb[2*s.keyLen+ivLen:]
	ca, err := newAEAD(s, ck)
	if err != nil {
		return nil, nil, err
	}
	sa, err := newAEAD(s, sk)
	if err != nil {
		return nil, nil, err
	}
	return &cipherState{aead: ca, iv: civ}, &cipherState{aead: sa, iv: siv}, nil
}

var errShort = errors.New("record shorter than its nonce and tag")

// open decrypts and authenticates one record (hdr, its 5-byte header, and
// body) under sequence number seq, into dst. For TLS 1.3 it returns the
// content and its inner content type, the padding removed (RFC 8446 §5.2,
// §5.4); for TLS 1.2 the content and the header's type. It returns an error
// when the record does not authenticate.
func (c *cipherState) open(dst, hdr, body []byte, seq uint64) ([]byte, byte, error) {
	typ := hdr[0]
	if len(c.iv) == 4 {
		// TLS 1.2 AES-GCM: salt and the record's explicit nonce.
		if len(body) < 8+c.aead.Overhead() {
			return nil, 0, errShort
		}
		copy(c.nonce[:4], c.iv)
		copy(c.nonce[4:], body[:8])
		body = body[8:]
	} else {
		copy(c.nonce[:], c.iv)
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		for i := range s {
			c.nonce[4+i] ^= s[i]
		}
	}
	if len(body) < c.aead.Overhead() {
		return nil, 0, errShort
	}
	var aad []byte
	if c.tls13 {
		aad = hdr
	} else {
		binary.BigEndian.PutUint64(c.aad[:8], seq)
		c.aad[8], c.aad[9], c.aad[10] = hdr[0], hdr[1], hdr[2]
		binary.BigEndian.PutUint16(c.aad[11:], uint16(len(body)-c.aead.Overhead()))
		aad = c.aad[:]
	}
	out, err := c.aead.Open(dst, c.nonce[:], body, aad)
	if err != nil {
		return nil, 0, err
	}
	if !c.tls13 {
		return out, typ, nil
	}
	// TLSInnerPlaintext: content, the real type, zero padding.
	i := len(out) - 1
	for i >= 0 && out[i] == 0 {
		i--
	}
	if i < 0 {
		return nil, 0, errors.New("decrypted record holds no content type (all padding)")
	}
	return out[:i], out[i], nil
}
