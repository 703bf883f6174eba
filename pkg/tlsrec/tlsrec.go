// Package tlsrec reads what a TLS connection shows in the clear: the record
// layer (RFC 8446 §5.1, RFC 5246 §6.2) and the ClientHello and ServerHello
// handshake messages (RFC 8446 §4.1.2, §4.1.3), so that kwatch can say what
// an encrypted connection is (version, cipher suite, server name, ALPN)
// instead of only that it is encrypted.
//
// Parsing uses golang.org/x/crypto/cryptobyte; crypto/tls parses hellos only
// inside a handshake it takes part in, not from captured bytes.
package tlsrec

import (
	"crypto/tls"
	"fmt"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// Record content types (RFC 8446 §5.1).
const (
	typeChangeCipherSpec = 20
	typeHandshake        = 22
	typeApplicationData  = 23
)

// Handshake message types (RFC 8446 §4).
const (
	msgClientHello = 1
	msgServerHello = 2
)

// Extension types (RFC 8446 §4.2, RFC 6066 §3, RFC 7301 §3.1).
const (
	extServerName        = 0
	extALPN              = 16
	extSupportedVersions = 43
	extEarlyData         = 42
)

// recordHeaderLen is the size of a record header in bytes: type, version,
// length (RFC 8446 §5.1).
const recordHeaderLen = 5

// maxHelloBytes bounds what a Sniffer holds while it waits for a hello
// message to be complete: a ClientHello with post-quantum key shares is
// about 1.8 KiB; a hello never needs more than a few records.
const maxHelloBytes = 64 << 10

// IsRecord reports whether p starts with a TLS record header (RFC 8446
// §5.1): content type 20 to 23 (change_cipher_spec, alert, handshake,
// application_data), then legacy_record_version 3.0 to 3.4. p needs 3 bytes.
func IsRecord(p []byte) bool {
	return len(p) >= 3 && p[0] >= typeChangeCipherSpec && p[0] <= typeApplicationData && p[1] == 0x03 && p[2] <= 0x04
}

// Hello is what a ClientHello or ServerHello says in the clear.
type Hello struct {
	// Server is true for a ServerHello.
	Server bool
	// Version is the TLS version: for a ServerHello the one negotiated
	// (supported_versions, RFC 8446 §4.2.1, else legacy_version); for a
	// ClientHello the highest offered.
	Version uint16
	// CipherSuite is the ServerHello's cipher suite (0 in a ClientHello).
	CipherSuite uint16
	// ServerName is the ClientHello's server_name (SNI, RFC 6066 §3).
	ServerName string
	// ALPN lists the protocols the client offers, or the one the server
	// chose (in TLS 1.2 only: TLS 1.3 sends it encrypted).
	ALPN []string
	// Random is the hello's random (32 bytes): a ClientHello's names the
	// connection in a key log (RFC 9850).
	Random [32]byte
	// LegacyVersion is the hello's legacy_version field (0x0303 for a
	// TLS 1.3 hello), before supported_versions replaced it.
	LegacyVersion uint16
	// EarlyData is set when a ClientHello offers 0-RTT data (the
	// early_data extension, RFC 8446 §4.2.10): protected records may
	// follow it before the ServerHello.
	EarlyData bool
}

// helloRetryRandom is the Random of a ServerHello that is a
// HelloRetryRequest: SHA-256 of "HelloRetryRequest" (RFC 8446 §4.1.3).
var helloRetryRandom = [32]byte{
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
}

// IsHelloRetryRequest reports whether h is a ServerHello that asks the
// client for another ClientHello (RFC 8446 §4.1.4) rather than one that
// chooses the connection's parameters.
func (h *Hello) IsHelloRetryRequest() bool { return h.Server && h.Random == helloRetryRandom }

// VersionName returns "TLS 1.3", "TLS 1.2", … for v, as crypto/tls names it.
func VersionName(v uint16) string {
	return tls.VersionName(v)
}

// String describes h in a few words, e.g. "TLS 1.3, TLS_AES_128_GCM_SHA256".
func (h *Hello) String() string {
	parts := []string{VersionName(h.Version)}
	if h.Server {
		parts = append(parts, tls.CipherSuiteName(h.CipherSuite))
	}
	if h.ServerName != "" {
		parts = append(parts, fmt.Sprintf("server name %q", h.ServerName))
	}
	if len(h.ALPN) > 0 {
		parts = append(parts, "ALPN "+ALPNText(h.ALPN))
	}
	return strings.Join(parts, ", ")
}

// ALPNText joins protocol names with commas, each quoted (Go syntax) unless
// it is a plain token (letters, digits, "-", ".", "/", "_"), so that a name
// holding a comma, a newline or a bidirectional control shows as what it is.
func ALPNText(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if n == "" || strings.IndexFunc(n, func(r rune) bool {
			return !(r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-./_", r)))
		}) >= 0 {
			out[i] = fmt.Sprintf("%q", n)
		}
	}
	return strings.Join(out, ",")
}

// Sniffer reads the first bytes of one direction of a TLS connection until
// it knows what they show. Feed it with Write; Done reports when it needs
// no more.
type Sniffer struct {
	buf []byte
	// msgs holds the handshake bytes of the complete records read so far,
	// and used how many bytes of buf they came from: each record is
	// looked at once.
	msgs []byte
	used int
	// Hello is the direction's hello message, once parsed.
	Hello *Hello
	// MidStream is set when the direction's first record is not a
	// handshake record: the capture started after the handshake.
	MidStream bool
	// FirstVersion is the legacy_record_version of the first record
	// (0x0301 for "3.1").
	FirstVersion uint16
	// Err says why the hello could not be read (a malformed message, or
	// more than 64 KiB without a complete one); Done is then true.
	Err  error
	done bool
}

// Gap tells the Sniffer that bytes of the direction were lost: what it has
// not read by then it cannot read.
func (s *Sniffer) Gap() {
	if !s.done {
		s.finish(fmt.Errorf("bytes lost before the hello was complete"))
	}
}

// Done reports whether the Sniffer has what it can learn.
func (s *Sniffer) Done() bool { return s.done }

// Write takes the next bytes of the direction. It never fails; it returns
// len(p).
func (s *Sniffer) Write(p []byte) (int, error) {
	if s.done {
		return len(p), nil
	}
	n := len(p)
	over := len(s.buf)+len(p) > maxHelloBytes
	if over {
		p = p[:maxHelloBytes-len(s.buf)]
	}
	s.buf = append(s.buf, p...)
	s.parse()
	if over && !s.done {
		s.finish(fmt.Errorf("no complete hello message in the first %d bytes", maxHelloBytes))
	}
	return n, nil
}

func (s *Sniffer) finish(err error) {
	s.done, s.Err, s.buf, s.msgs = true, err, nil, nil
}

// parse looks at the records held so far.
func (s *Sniffer) parse() {
	if len(s.buf) < recordHeaderLen {
		return
	}
	if s.FirstVersion == 0 {
		s.FirstVersion = uint16(s.buf[1])<<8 | uint16(s.buf[2])
		switch s.buf[0] {
		case typeHandshake:
		case typeApplicationData:
			s.MidStream = true
			s.finish(nil)
			return
		default:
			// An alert (a refused handshake) or change_cipher_spec
			// first: the handshake was captured, there is no hello.
			what := "an alert"
			if s.buf[0] == typeChangeCipherSpec {
				what = "change_cipher_spec"
			}
			if s.buf[0] != typeChangeCipherSpec && len(s.buf) >= recordHeaderLen+2 {
				what = fmt.Sprintf("an alert (level %d, description %d)", s.buf[5], s.buf[6])
			} else if s.buf[0] != typeChangeCipherSpec {
				// Wait for the alert's two bytes, and look at the first
				// record again then.
				s.FirstVersion = 0
				return
			}
			s.finish(fmt.Errorf("the first record is %s, not a hello", what))
			return
		}
	}
	// The handshake messages are the concatenated fragments of the
	// handshake records (RFC 8446 §5.1); the hello is the first message.
	// Each complete record is appended to msgs once.
	rest := s.buf[s.used:]
	for len(rest) >= recordHeaderLen && rest[0] == typeHandshake {
		n := int(rest[3])<<8 | int(rest[4])
		if len(rest) < recordHeaderLen+n {
			break
		}
		s.msgs = append(s.msgs, rest[recordHeaderLen:recordHeaderLen+n]...)
		rest = rest[recordHeaderLen+n:]
		s.used += recordHeaderLen + n
	}
	msgs := s.msgs
	if len(msgs) < 4 {
		return
	}
	n := int(msgs[1])<<16 | int(msgs[2])<<8 | int(msgs[3])
	if len(msgs) < 4+n {
		if len(rest) >= recordHeaderLen && rest[0] != typeHandshake {
			s.finish(fmt.Errorf("hello message cut short by a record of type %d", rest[0]))
		}
		return
	}
	body := msgs[4 : 4+n]
	var h *Hello
	var err error
	switch msgs[0] {
	case msgClientHello:
		h, err = ParseClientHello(body)
	case msgServerHello:
		h, err = ParseServerHello(body)
	default:
		err = fmt.Errorf("first handshake message is of type %d, not a hello", msgs[0])
	}
	s.Hello = h
	s.finish(err)
}

// ParseClientHello reads a ClientHello's body, the handshake message
// without its 4-byte header (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2). It returns
// an error naming what is malformed.
func ParseClientHello(b []byte) (*Hello, error) {
	in := cryptobyte.String(b)
	h := &Hello{}
	var random, sessionID, suites, compression cryptobyte.String
	if !in.ReadUint16(&h.Version) || !in.ReadBytes((*[]byte)(&random), 32) ||
		!in.ReadUint8LengthPrefixed(&sessionID) || !in.ReadUint16LengthPrefixed(&suites) ||
		!in.ReadUint8LengthPrefixed(&compression) {
		return nil, fmt.Errorf("malformed ClientHello")
	}
	h.LegacyVersion = h.Version
	copy(h.Random[:], random)
	if in.Empty() {
		return h, nil // no extensions: TLS 1.2 or older
	}
	err := readExtensions(&in, func(typ uint16, data cryptobyte.String) bool {
		switch typ {
		case extServerName:
			var list cryptobyte.String
			if !data.ReadUint16LengthPrefixed(&list) {
				return false
			}
			for !list.Empty() {
				var nameType uint8
				var name cryptobyte.String
				if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) {
					return false
				}
				if nameType == 0 { // host_name
					h.ServerName = string(name)
				}
			}
		case extALPN:
			alpn, ok := readALPN(data)
			if !ok {
				return false
			}
			h.ALPN = alpn
		case extEarlyData:
			h.EarlyData = true
		case extSupportedVersions:
			var versions cryptobyte.String
			if !data.ReadUint8LengthPrefixed(&versions) || !data.Empty() {
				return false
			}
			// When present, it replaces legacy_version (RFC 8446 §4.2.1):
			// the highest version it offers.
			var best uint16
			for !versions.Empty() {
				var v uint16
				if !versions.ReadUint16(&v) {
					return false
				}
				// GREASE values (RFC 8701) are 0x?a?a; they are not versions.
				if v&0x0f0f != 0x0a0a && v > best && v <= tls.VersionTLS13 {
					best = v
				}
			}
			if best != 0 {
				h.Version = best
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("malformed ClientHello: %w", err)
	}
	return h, nil
}

// ParseServerHello reads a ServerHello's body, the handshake message without
// its 4-byte header (RFC 8446 §4.1.3, RFC 5246 §7.4.1.3); Version is the one
// negotiated. It returns an error naming what is malformed.
func ParseServerHello(b []byte) (*Hello, error) {
	in := cryptobyte.String(b)
	h := &Hello{Server: true}
	var random, sessionID cryptobyte.String
	var compression uint8
	if !in.ReadUint16(&h.Version) || !in.ReadBytes((*[]byte)(&random), 32) ||
		!in.ReadUint8LengthPrefixed(&sessionID) || !in.ReadUint16(&h.CipherSuite) || !in.ReadUint8(&compression) {
		return nil, fmt.Errorf("malformed ServerHello")
	}
	h.LegacyVersion = h.Version
	copy(h.Random[:], random)
	if in.Empty() {
		return h, nil
	}
	err := readExtensions(&in, func(typ uint16, data cryptobyte.String) bool {
		switch typ {
		case extALPN:
			alpn, ok := readALPN(data)
			if !ok {
				return false
			}
			h.ALPN = alpn
		case extSupportedVersions:
			return data.ReadUint16(&h.Version) && data.Empty()
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("malformed ServerHello: %w", err)
	}
	return h, nil
}

// readExtensions calls f for each extension of an extensions block (RFC
// 8446 §4.2); f returns false for extension data it cannot read.
func readExtensions(in *cryptobyte.String, f func(typ uint16, data cryptobyte.String) bool) error {
	var exts cryptobyte.String
	if !in.ReadUint16LengthPrefixed(&exts) {
		return fmt.Errorf("extensions block cut short")
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return fmt.Errorf("extension cut short")
		}
		if !f(typ, data) {
			return fmt.Errorf("extension %d malformed", typ)
		}
	}
	return nil
}

// readALPN reads a ProtocolNameList (RFC 7301 §3.1).
func readALPN(data cryptobyte.String) ([]string, bool) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) {
		return nil, false
	}
	var out []string
	for !list.Empty() {
		var name cryptobyte.String
		if !list.ReadUint8LengthPrefixed(&name) {
			return nil, false
		}
		out = append(out, string(name))
	}
	return out, true
}
