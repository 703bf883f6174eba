// Package pcap reads packet captures (pcap and pcapng, optionally gzip'd),
// decodes their link, IP and TCP layers with gopacket, reassembles each TCP
// connection with gopacket's reassembly package, and hands the bytes of both
// directions of every connection to the switchboard (pkg/wire), which hands
// them to the follower of their protocol. It reports what it cannot
// decode (truncated files, snaplen-cut packets, lost segments, retransmissions
// whose bytes differ from the first copy) as records with their location.
package pcap

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/kwatch/kwatch/pkg/keylog"
)

// Capture file magic numbers (pcap: the tcpdump.org file format; pcapng:
// draft-ietf-opsawg-pcapng §4.1 Section Header Block; gzip: RFC 1952 §2.3.1).
const (
	magicPcapMicro    = 0xa1b2c3d4
	magicPcapNano     = 0xa1b23c4d
	magicPcapMicroSwp = 0xd4c3b2a1
	magicPcapNanoSwp  = 0x4d3cb2a1
	magicPcapNG       = 0x0a0d0d0a
)

// ErrNotCapture is wrapped by the error Open returns for input that is not a
// pcap or pcapng file.
var ErrNotCapture = errors.New("not a pcap or pcapng file")

// CaptureFormat names the format of a file from its first 4 bytes: "pcap",
// "pcapng", "gzip'd data" (a compressed capture, or anything else
// compressed), or "" for none of these.
func CaptureFormat(prefix []byte) string {
	if len(prefix) < 4 {
		return ""
	}
	switch m := binary.BigEndian.Uint32(prefix); {
	case m == magicPcapMicro || m == magicPcapNano || m == magicPcapMicroSwp || m == magicPcapNanoSwp:
		return "pcap"
	case m == magicPcapNG:
		return "pcapng"
	case prefix[0] == 0x1f && prefix[1] == 0x8b:
		return "gzip'd data"
	}
	return ""
}

// source reads packets with their link type.
type source struct {
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	count  *countingReader
	link   layers.LinkType
	format string // "pcap", "pcapng", with " (gzip)" when compressed
	gz     bool
	// recOff is the offset of the next pcap record in the (decompressed)
	// file: pcapgo reads through its own buffer, so count.n runs ahead.
	recOff int64
	// secrets reads the key logs of a pcapng's Decryption Secrets Blocks.
	secrets *secretsTap
}

// countingReader counts the bytes read through it, to locate truncation.
type countingReader struct {
	r io.Reader
	n int64
}

// Read reads from the underlying reader and counts the bytes.
func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// openSource detects the capture format from its magic number and returns a
// packet source. The error wraps ErrNotCapture (with the magic seen) for any
// other input. The TLS key logs of a pcapng's Decryption Secrets Blocks go
// to keys as the blocks are read.
func openSource(r io.Reader, keys *keylog.Log) (*source, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil {
		if len(magic) == 0 {
			return nil, fmt.Errorf("%w (the input is empty)", ErrNotCapture)
		}
		return nil, fmt.Errorf("%w (only %d bytes)", ErrNotCapture, len(magic))
	}
	s := &source{}
	in := br
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		zr.Multistream(false)
		s.gz = true
		gbr := bufio.NewReaderSize(&gzipMembers{zr: zr, br: br}, 64<<10)
		if magic, err = gbr.Peek(4); err != nil {
			return nil, fmt.Errorf("%w (gzip'd data of %d bytes)", ErrNotCapture, len(magic))
		}
		in = gbr
	}
	s.count = &countingReader{r: in}
	switch m := binary.BigEndian.Uint32(magic); m {
	case magicPcapMicro, magicPcapNano, magicPcapMicroSwp, magicPcapNanoSwp:
		rd, err := pcapgo.NewReader(s.count)
		if err != nil {
			return nil, fmt.Errorf("pcap header: %w", err)
		}
		s.pcap, s.link, s.format = rd, rd.LinkType(), "pcap"
		s.recOff = 24 // the file header
	case magicPcapNG:
		s.secrets = &secretsTap{r: s.count, keys: keys}
		rd, err := pcapgo.NewNgReader(s.secrets, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("pcapng header: %w", err)
		}
		s.ng, s.link, s.format = rd, rd.LinkType(), "pcapng"
	default:
		if head, _ := in.Peek(256); keylog.LooksLikeKeyLog(head) {
			if s.gz {
				return nil, fmt.Errorf("%w: it reads as a gzip'd TLS key log (gunzip it, give it with --tls-keylog, and the capture as FILE)", ErrNotCapture)
			}
			return nil, fmt.Errorf("%w: it reads as a TLS key log (give it with --tls-keylog, and the capture as FILE)", ErrNotCapture)
		}
		return nil, fmt.Errorf("%w (magic 0x%08x)", ErrNotCapture, m)
	}
	if s.gz {
		s.format += " (gzip)"
	}
	return s, nil
}

// gzipMembers reads a gzip file of one or more members (RFC 1952 §2.2),
// as gzip.Reader's multistream mode does, except that it hands over the
// end of each member before it looks for the next one: gzip.Reader would
// wait for the next header first, so that on a pipe that stays open the
// last packets read would not be decoded until more input came or the
// pipe closed.
type gzipMembers struct {
	zr *gzip.Reader // not multistream
	br *bufio.Reader
}

// Read reads decompressed bytes. It returns io.EOF after the last member,
// and gzip's error for a member that is damaged or for input after a
// member that does not start another.
func (g *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		if err != io.EOF {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end: the next call goes on
		}
		if _, err := g.br.Peek(1); err != nil {
			return 0, err // io.EOF: that was the last member
		}
		if err := g.zr.Reset(g.br); err != nil {
			return 0, err
		}
		g.zr.Multistream(false)
	}
}

// next returns the next packet's bytes, capture info and link type. The
// bytes are valid until the next call. It returns io.EOF at a clean end and
// io.ErrUnexpectedEOF when the file ends inside a record.
func (s *source) next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	if s.pcap != nil {
		data, ci, err := s.pcap.ZeroCopyReadPacketData()
		if err == nil {
			s.recOff += 16 + int64(len(data)) // record header and data
		}
		return data, ci, s.link, err
	}
	data, ci, err := s.ng.ReadPacketData()
	link := s.link
	if err == nil && len(ci.AncillaryData) > 0 {
		if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			link = lt
		}
	}
	return data, ci, link, err
}

// offset returns the bytes of the (decompressed) capture consumed so far.
func (s *source) offset() int64 { return s.count.n }

// record returns the offset of the record being read in the (decompressed)
// file, or -1 when it is not known (pcapng).
func (s *source) record() int64 {
	if s.pcap == nil {
		return -1
	}
	return s.recOff
}
