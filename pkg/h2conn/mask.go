package h2conn

import (
	"golang.org/x/net/http2/hpack"
)

// CredentialMask hides credentials in the bytes an HTTP/2 client sends
// that are about to be written somewhere else (kwatch stream --http2
// --record), as pkg/httpconn's CredentialMask does for HTTP/1.1: every octet of
// the value of a credential header field (authorization,
// proxy-authorization, cookie, x-remote-user, impersonate-user) becomes '*'
// when sent as is, or the HPACK Huffman code of '*' (0xf9, 8 bits: one
// octet per '*') when Huffman-coded, so the recording decodes to as many
// asterisks as the value had octets (RFC 7541 §5.2, Appendix B). The
// stream's length does not change, and
// neither does what HPACK's dynamic table holds for anyone decoding the
// recording, which is why the mask follows the table itself (names only,
// sizes from value lengths): a literal whose name is an index must be
// resolved. It keeps its state across calls; the zero value is ready (use
// one per connection). A representation it cannot follow (an index past the
// table, an integer too long) stops it: Broken then reports true, and
// kwatch stream records the client's bytes as zeros from there.
type CredentialMask struct {
	preface int // octets of ClientPreface passed
	hdr     [9]byte
	nhdr    int
	// The frame in progress: its type and flags, what of its payload is
	// left, and how much of it is before (pad length, priority) and after
	// (padding) the header block fragment.
	ftype, flags byte
	left         int
	lead         int  // octets before the fragment still to pass
	padLen       int  // padding octets at the end of the payload
	readPad      bool // the next octet is the Pad Length field
	hp           hpackScan
	broken       bool
}

// Broken reports whether the mask lost track of the header blocks (a
// representation it could not parse): later credentials may be unmasked.
func (m *CredentialMask) Broken() bool { return m.broken || m.hp.broken }

// Mask returns p with credentials masked: p itself when there were none in
// it, else a copy (p is what goes on the wire and is not changed).
func (m *CredentialMask) Mask(p []byte) []byte {
	out := p
	for i := 0; i < len(p); {
		if m.preface < len(ClientPreface) {
			m.preface++
			i++
			continue
		}
		if m.nhdr < 9 {
			m.hdr[m.nhdr] = p[i]
			m.nhdr++
			i++
			if m.nhdr == 9 {
				m.startFrame()
			}
			continue
		}
		// Payload octets of the frame in progress.
		if m.left == 0 {
			m.nhdr = 0
			continue
		}
		b := p[i]
		switch {
		case m.readPad:
			m.readPad = false
			m.padLen = int(b)
		case m.lead > 0:
			m.lead--
		case m.left <= m.padLen:
			// padding
		default:
			if mask, c := m.hp.step(b); mask {
				if &out[0] == &p[0] {
					out = append([]byte(nil), p...)
				}
				out[i] = c
			}
		}
		m.left--
		i++
		if m.left == 0 {
			m.nhdr = 0
		}
	}
	return out
}

// startFrame reads the frame header in m.hdr.
func (m *CredentialMask) startFrame() {
	m.left = int(m.hdr[0])<<16 | int(m.hdr[1])<<8 | int(m.hdr[2])
	m.ftype, m.flags = m.hdr[3], m.hdr[4]
	m.lead, m.padLen, m.readPad = 0, 0, false
	switch m.ftype {
	case 0x1: // HEADERS
		if m.flags&0x8 != 0 { // PADDED
			m.readPad = true
		}
		if m.flags&0x20 != 0 { // PRIORITY
			m.lead = 5
		}
	case 0x9: // CONTINUATION
	default:
		// Not a header block: all of it passes. Padding of DATA is
		// padding, nothing to mask.
		m.lead = m.left
	}
	if m.left == 0 {
		m.nhdr = 0
	}
}

// hpackScan walks HPACK header field representations (RFC 7541 §6) octet by
// octet and tells which octets are a credential field's value.
type hpackScan struct {
	state   scanState
	kind    byte // representation: 'i' indexed, 'l' literal (indexed), 'n' literal (not indexed), 'u' size update
	prefix  uint8
	val     uint64 // integer being read
	shift   uint
	index   uint64
	name    []byte // literal name octets (Huffman or not), at most 64
	nameH   bool
	strLeft uint64
	strH    bool
	cred    bool // the field's name is a credential's
	valLen  uint64
	table   []tableEntry // dynamic table, newest first (names only)
	size    uint64
	max     uint64
	broken  bool
	init    bool
}

type tableEntry struct {
	name string
	size uint64
}

type scanState uint8

const (
	stStart scanState = iota
	stInt             // continuation octets of an integer
	stNameLen
	stNameLenInt
	stName
	stValueLen
	stValueLenInt
	stValue
)

// huffmanStar is '*' in HPACK's Huffman code: 8 bits, 11111001.
const huffmanStar = 0xf9

// step takes one octet of a header block and returns whether it is to be
// masked, and with what.
func (s *hpackScan) step(b byte) (mask bool, with byte) {
	if !s.init {
		s.init, s.max = true, 4096
	}
	if s.broken {
		return false, 0
	}
	switch s.state {
	case stStart:
		switch {
		case b&0x80 != 0:
			s.kind, s.prefix = 'i', 7
		case b&0xc0 == 0x40:
			s.kind, s.prefix = 'l', 6
		case b&0xe0 == 0x20:
			s.kind, s.prefix = 'u', 5
		default:
			s.kind, s.prefix = 'n', 4
		}
		s.val = uint64(b) & (1<<s.prefix - 1)
		s.shift = 0
		if s.val == 1<<s.prefix-1 {
			s.state = stInt
			return false, 0
		}
		s.afterIndex()
	case stInt, stNameLenInt, stValueLenInt:
		if s.shift > 56 {
			s.broken = true
			return false, 0
		}
		s.val += uint64(b&0x7f) << s.shift
		s.shift += 7
		if b&0x80 != 0 {
			return false, 0
		}
		switch s.state {
		case stInt:
			s.afterIndex()
		case stNameLenInt:
			s.startName()
		default:
			s.startValue()
		}
	case stNameLen, stValueLen:
		h := b&0x80 != 0
		s.val, s.shift = uint64(b&0x7f), 0
		if s.state == stNameLen {
			s.nameH = h
			if s.val == 127 {
				s.state = stNameLenInt
				return false, 0
			}
			s.startName()
		} else {
			s.strH = h
			if s.val == 127 {
				s.state = stValueLenInt
				return false, 0
			}
			s.startValue()
		}
	case stName:
		if len(s.name) < 64 {
			s.name = append(s.name, b)
		}
		s.strLeft--
		if s.strLeft == 0 {
			s.nameDone()
		}
	case stValue:
		cred := s.cred
		s.strLeft--
		if s.strLeft == 0 {
			s.fieldDone()
		}
		if cred {
			if s.strH {
				return true, huffmanStar
			}
			return true, '*'
		}
	}
	return false, 0
}

// afterIndex handles the integer that ends a representation's first part.
func (s *hpackScan) afterIndex() {
	switch s.kind {
	case 'i': // an indexed field: nothing literal
		s.state = stStart
	case 'u': // a dynamic table size update
		s.max = s.val
		s.evict()
		s.state = stStart
	default:
		s.index = s.val
		s.name = s.name[:0]
		if s.index == 0 {
			s.state = stNameLen
			return
		}
		name, ok := s.lookup(s.index)
		if !ok {
			s.broken = true
			return
		}
		s.name = append(s.name, name...)
		s.nameH = false
		s.cred = credentialName(name)
		s.state = stValueLen
	}
}

func (s *hpackScan) startName() {
	s.strLeft = s.val
	if s.strLeft == 0 {
		s.nameDone()
		return
	}
	s.state = stName
}

func (s *hpackScan) nameDone() {
	name := string(s.name)
	if s.nameH {
		if d, err := hpack.HuffmanDecodeToString(s.name); err == nil {
			name = d
		}
	}
	s.name = append(s.name[:0], name...)
	s.cred = credentialName(name)
	s.state = stValueLen
}

func (s *hpackScan) startValue() {
	s.valLen, s.strLeft = s.val, s.val
	if s.strLeft == 0 {
		s.fieldDone()
		return
	}
	s.state = stValue
}

// fieldDone ends a literal field: one with incremental indexing enters the
// dynamic table (RFC 7541 §4.4).
func (s *hpackScan) fieldDone() {
	if s.kind == 'l' {
		e := tableEntry{name: string(s.name), size: uint64(len(s.name)) + s.valLen + 32}
		if e.size > s.max {
			s.table, s.size = s.table[:0], 0
		} else {
			s.table = append([]tableEntry{e}, s.table...)
			s.size += e.size
			s.evict()
		}
	}
	s.cred = false
	s.state = stStart
}

func (s *hpackScan) evict() {
	for s.size > s.max && len(s.table) > 0 {
		s.size -= s.table[len(s.table)-1].size
		s.table = s.table[:len(s.table)-1]
	}
}

// lookup returns the name at index i: the static table (RFC 7541
// Appendix A) for 1-61, the dynamic table after it.
func (s *hpackScan) lookup(i uint64) (string, bool) {
	if i >= 1 && i <= uint64(len(staticNames)) {
		return staticNames[i-1], true
	}
	d := i - uint64(len(staticNames)) - 1
	if i == 0 || d >= uint64(len(s.table)) {
		return "", false
	}
	return s.table[d].name, true
}

func credentialName(n string) bool {
	switch n {
	case "authorization", "proxy-authorization", "cookie", "x-remote-user", "impersonate-user":
		return true
	}
	return false
}

// staticNames are the names of HPACK's static table (RFC 7541 Appendix A).
var staticNames = []string{":authority", ":method", ":method", ":path", ":path", ":scheme", ":scheme",
	":status", ":status", ":status", ":status", ":status", ":status", ":status", "accept-charset",
	"accept-encoding", "accept-language", "accept-ranges", "accept", "access-control-allow-origin", "age",
	"allow", "authorization", "cache-control", "content-disposition", "content-encoding", "content-language",
	"content-length", "content-location", "content-range", "content-type", "cookie", "date", "etag", "expect",
	"expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
	"if-unmodified-since", "last-modified", "link", "location", "max-forwards", "proxy-authenticate",
	"proxy-authorization", "range", "referer", "refresh", "retry-after", "server", "set-cookie",
	"strict-transport-security", "transfer-encoding", "user-agent", "vary", "via", "www-authenticate"}
