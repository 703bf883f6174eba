package pcap

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/kwatch/kwatch/pkg/keylog"
)

// pcapng block types and the TLS key log secrets type
// (draft-ietf-opsawg-pcapng §4.1, §4.7).
const (
	blockSectionHeader    = 0x0A0D0D0A
	blockDecryptionSecret = 0x0000000A
	secretsTLSKeyLog      = 0x544c534b // "TLSK"
	// maxSecretsBlock bounds one Decryption Secrets Block kwatch reads, in
	// bytes: a key log of 16 MiB holds the secrets of about 50 000 TLS
	// 1.3 connections. Larger blocks are skipped and reported.
	maxSecretsBlock = 16 << 20
)

// secretsTap reads the pcapng block structure of the bytes that pass
// through it on their way to gopacket's pcapng reader, and adds the key log
// of every Decryption Secrets Block to keys, wherever the block is in the
// file (gopacket v1.7.7 keeps the one before the first interface block
// unexported and skips those between packets). The bytes are passed on
// unchanged. A block structure it cannot follow (gopacket reports the
// damage) stops it.
type secretsTap struct {
	r    io.Reader
	keys *keylog.Log
	// problems says what could not be read (at most a few).
	problems []string
	order    binary.ByteOrder
	hdr      [12]byte
	nhdr     int
	rest     int64  // bytes of the current block still to pass
	body     []byte // the current Decryption Secrets Block's body
	inDSB    bool
	blocks   int // Decryption Secrets Blocks read
	stopped  bool
	off      int64 // bytes scanned
	start    int64 // file offset of the current block
}

func (s *secretsTap) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 && !s.stopped {
		s.scan(p[:n])
	}
	return n, err
}

func (s *secretsTap) scan(p []byte) {
	for len(p) > 0 && !s.stopped {
		if s.rest == 0 && s.nhdr == 0 {
			s.start = s.off
		}
		if s.rest == 0 {
			// A block header: type, total length, and for a Section
			// Header Block the byte-order magic that says how to read
			// the length.
			k := copy(s.hdr[s.nhdr:], p)
			s.nhdr += k
			s.off += int64(k)
			p = p[k:]
			if s.nhdr < 12 {
				continue
			}
			s.nhdr = 0
			typ := binary.BigEndian.Uint32(s.hdr[:4])
			if typ == blockSectionHeader {
				switch binary.BigEndian.Uint32(s.hdr[8:]) {
				case 0x1A2B3C4D:
					s.order = binary.BigEndian
				case 0x4D3C2B1A:
					s.order = binary.LittleEndian
				default:
					s.stopped = true
					return
				}
			}
			if s.order == nil {
				s.stopped = true
				return
			}
			typ = s.order.Uint32(s.hdr[:4])
			total := int64(s.order.Uint32(s.hdr[4:8]))
			if total < 12 || total%4 != 0 {
				s.stopped = true
				return
			}
			s.rest = total - 12
			s.inDSB = typ == blockDecryptionSecret
			s.body = s.body[:0]
			if s.inDSB {
				s.body = append(s.body, s.hdr[8:12]...)
				if total > maxSecretsBlock {
					s.inDSB = false
					s.keys.Add(nil, "pcapng") // a key log was given, if unread
					s.addProblem(fmt.Sprintf("a Decryption Secrets Block of %d bytes (over %d) at byte %d of the file was skipped", total, maxSecretsBlock, s.start))
				}
			}
			if s.rest == 0 {
				s.endBlock()
			}
			continue
		}
		k := int(min(s.rest, int64(len(p))))
		if s.inDSB {
			s.body = append(s.body, p[:k]...)
		}
		s.rest -= int64(k)
		s.off += int64(k)
		p = p[k:]
		if s.rest == 0 {
			s.endBlock()
		}
	}
}

// endBlock reads a complete Decryption Secrets Block: secrets type, length,
// data, padding, then options and the trailing total length
// (draft-ietf-opsawg-pcapng §4.7).
func (s *secretsTap) endBlock() {
	if !s.inDSB {
		return
	}
	s.inDSB = false
	s.blocks++
	b := s.body
	if len(b) < 8 {
		return
	}
	typ, n := s.order.Uint32(b), int64(s.order.Uint32(b[4:]))
	if typ != secretsTLSKeyLog {
		return // WireGuard, ZigBee, … keys: not kwatch's
	}
	// After the secrets type and length: the secrets, padding, options
	// and the block's trailing total length.
	if room := int64(len(b) - 8 - 4); n > room {
		s.keys.Add(nil, "pcapng") // a key log was given, if unread
		s.addProblem(fmt.Sprintf("Decryption Secrets Block %d (at byte %d of the file) says %d bytes of secrets but holds %d", s.blocks, s.start, n, max(room, 0)))
		return
	}
	s.keys.Add(b[8:8+n], fmt.Sprintf("pcapng Decryption Secrets Block %d", s.blocks))
	s.body = nil
}

func (s *secretsTap) addProblem(detail string) {
	if len(s.problems) < 8 {
		s.problems = append(s.problems, detail)
	}
}
