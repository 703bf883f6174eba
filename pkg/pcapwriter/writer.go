// Package pcapwriter writes the bytes of live TCP connections as a pcap or
// pcapng capture file (kwatch stream --record), for kwatch pcap and
// Wireshark to read as if they had been captured. It holds the file formats
// only (gopacket's pcapgo writes the blocks); reading and reassembling
// captures is pkg/pcap's.
package pcapwriter

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// maxSegment is the most payload bytes Writer puts in one TCP segment, as
// on Linux loopback (MTU 65536 minus IPv4 and TCP headers with timestamps).
const maxSegment = 65483

// Writer writes the bytes of live TCP connections as a pcap or pcapng
// capture (Ethernet with zero MACs, as tcpdump -i lo writes; microsecond
// times): synthesised segments with a handshake, sequence and
// acknowledgement numbers, and a FIN at the close, carrying exactly the
// bytes given, so that kwatch pcap and Wireshark read the session as if it
// had been captured. A pcapng also holds TLS key logs (Write). It is safe
// for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  interface {
		WritePacket(gopacket.CaptureInfo, []byte) error
	}
	ng    *pcapgo.NgWriter // the same writer when the file is pcapng
	buf   gopacket.SerializeBuffer
	err   error
	conns int
}

// New writes the pcap file header to w and returns a Writer. The
// error is the header's write error.
func New(w io.Writer) (*Writer, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(262144, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &Writer{w: pw, buf: gopacket.NewSerializeBuffer()}, nil
}

// NewNg writes a pcapng Section Header Block and one Ethernet
// interface to w (draft-ietf-opsawg-pcapng §4.1, §4.2) and returns a Writer
// whose file can also hold TLS key logs (Write). Every packet is flushed
// to w as it is written. The error is the header's write error.
func NewNg(w io.Writer) (*Writer, error) {
	nw, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
	if err != nil {
		return nil, err
	}
	if err := nw.Flush(); err != nil {
		return nil, err
	}
	return &Writer{w: nw, ng: nw, buf: gopacket.NewSerializeBuffer()}, nil
}

// PCAPNG reports whether the Writer writes pcapng (and so can hold TLS
// key logs).
func (w *Writer) PCAPNG() bool { return w.ng != nil }

// Write writes TLS key log lines (RFC 9850) as a pcapng Decryption
// Secrets Block (draft-ietf-opsawg-pcapng §4.7, secrets type 0x544c534b),
// so that kwatch pcap, Wireshark and TShark decrypt the connections that
// follow with no key log of their own. It implements io.Writer for
// tls.Config.KeyLogWriter; a pcap Writer refuses.
func (w *Writer) Write(keyLog []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ng == nil {
		return 0, fmt.Errorf("a pcap file cannot hold TLS secrets; write a pcapng")
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := w.ng.WriteDecryptionSecretsBlock(pcapgo.DSB_SECRETS_TYPE_TLS, keyLog); err != nil {
		w.err = err
		return 0, err
	}
	if err := w.ng.Flush(); err != nil {
		w.err = err
		return 0, err
	}
	return len(keyLog), nil
}

// Err returns the first write error.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ConnWriter writes one connection's segments. It is safe for concurrent
// use (a connection's reads and writes come from different goroutines).
type ConnWriter struct {
	mu         sync.Mutex
	w          *Writer
	client     netip.AddrPort
	server     netip.AddrPort
	cseq, sseq uint32
	fins       uint8 // FIN written: 1 from the client, 2 from the server
	reset      bool  // RST written
}

// Conn starts a connection from client to server, writing its three-way
// handshake at time t. Initial sequence numbers are derived from the
// connection's number, so files are reproducible.
func (w *Writer) Conn(client, server netip.AddrPort, t time.Time) *ConnWriter {
	w.mu.Lock()
	w.conns++
	n := uint32(w.conns)
	w.mu.Unlock()
	c := &ConnWriter{w: w, client: client, server: server, cseq: 1000000 * n, sseq: 2000000 * n}
	c.segment(true, flagSYN, nil, t)
	c.segment(false, flagSYN|flagACK, nil, t)
	c.segment(true, flagACK, nil, t)
	return c
}

const (
	flagSYN = 1 << iota
	flagACK
	flagFIN
	flagPSH
	flagRST
)

// Client writes bytes the client sent at time t.
func (c *ConnWriter) Client(p []byte, t time.Time) { c.data(true, p, t) }

// Server writes bytes the server sent at time t.
func (c *ConnWriter) Server(p []byte, t time.Time) { c.data(false, p, t) }

func (c *ConnWriter) data(fromClient bool, p []byte, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reset || (fromClient && c.fins&1 != 0) || (!fromClient && c.fins&2 != 0) {
		return // nothing follows a side's FIN, or a reset
	}
	for len(p) > 0 {
		k := min(len(p), maxSegment)
		c.segment(fromClient, flagACK|flagPSH, p[:k], t)
		p = p[k:]
	}
}

// FIN writes a FIN from the client (fromClient) or the server at time t,
// once per side: what each side did is all a recording shows, so a
// connection kwatch closed has the client's FIN and no answer from the
// server, whose later packets were not read.
func (c *ConnWriter) FIN(fromClient bool, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bit := uint8(1)
	if !fromClient {
		bit = 2
	}
	if c.fins&bit != 0 || c.reset {
		return
	}
	c.fins |= bit
	c.segment(fromClient, flagFIN|flagACK, nil, t)
}

// RST writes a reset from the client or the server at time t; nothing is
// written for the connection after it.
func (c *ConnWriter) RST(fromClient bool, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reset {
		return
	}
	c.reset = true
	c.segment(fromClient, flagRST|flagACK, nil, t)
}

func (c *ConnWriter) segment(fromClient bool, flags int, payload []byte, t time.Time) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	src, dst := c.client, c.server
	seq, ack := &c.cseq, c.sseq
	if !fromClient {
		src, dst = dst, src
		seq, ack = &c.sseq, c.cseq
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: *seq,
		SYN: flags&flagSYN != 0, ACK: flags&flagACK != 0, FIN: flags&flagFIN != 0, PSH: flags&flagPSH != 0,
		RST:    flags&flagRST != 0,
		Window: 65535}
	if tcp.ACK {
		tcp.Ack = ack
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0, 0, 0, 0, 0, 0}, DstMAC: net.HardwareAddr{0, 0, 0, 0, 0, 0}}
	var netLayer gopacket.SerializableLayer
	if src.Addr().Is4() && dst.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		netLayer = ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: as16(src.Addr()), DstIP: as16(dst.Addr())}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		netLayer = ip
	}
	if err := gopacket.SerializeLayers(w.buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, netLayer, tcp, gopacket.Payload(payload)); err != nil {
		w.err = fmt.Errorf("recording a segment: %w", err)
		return
	}
	b := w.buf.Bytes()
	if err := w.w.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(b), Length: len(b)}, b); err != nil {
		w.err = err
		return
	}
	if w.ng != nil {
		if err := w.ng.Flush(); err != nil {
			w.err = err
			return
		}
	}
	*seq += uint32(len(payload))
	if flags&(flagSYN|flagFIN) != 0 {
		*seq++ // SYN and FIN each take one sequence number (RFC 9293 §3.4)
	}
}

func as16(a netip.Addr) net.IP {
	b := a.As16()
	return b[:]
}
