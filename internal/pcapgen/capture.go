package pcapgen

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// DefaultBase is the capture time of the first packet when Capture.Base is
// zero: 2026-01-01T00:00:00Z.
var DefaultBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultStep is the capture time between two packets when Capture.Step is
// zero: 1 ms.
const DefaultStep = time.Millisecond

// DefaultSnaplen is the snaplen written in the file header when
// Capture.Snaplen is zero, in bytes: 262144, tcpdump's default. No packet
// this package makes is that long, so none is cut.
const DefaultSnaplen = 262144

// Link types a Capture can lay packets out in (the tcpdump.org LINKTYPE_
// values, as gopacket's layers.LinkType).
const (
	// Ethernet (1): a 14-byte Ethernet II header, frames padded to 60 bytes.
	Ethernet = layers.LinkTypeEthernet
	// LinuxSLL (113): the 16-byte Linux "cooked" header of tcpdump -i any.
	LinuxSLL = layers.LinkTypeLinuxSLL
	// LinuxSLL2 (276): the 20-byte Linux cooked header v2 of newer tcpdump -i any.
	LinuxSLL2 = layers.LinkTypeLinuxSLL2
	// Null (0): the 4-byte BSD loopback header holding the address family
	// in host (here little-endian) byte order: 2 for IPv4, 30 (Darwin's
	// AF_INET6, as on macOS lo0) for IPv6.
	Null = layers.LinkTypeNull
	// Raw (101): IPv4 or IPv6 packets without a link header.
	Raw = layers.LinkTypeRaw
	// RawIPv4 (228): IPv4 packets without a link header.
	RawIPv4 = layers.LinkTypeIPv4
	// RawIPv6 (229): IPv6 packets without a link header.
	RawIPv6 = layers.LinkTypeIPv6
)

// Format is a capture file format.
type Format int

// Capture file formats.
const (
	// Pcap is the classic libpcap format (one link type per file).
	Pcap Format = iota
	// PcapNG is the pcapng format (one Interface Description Block per
	// link in Capture.Links, Enhanced Packet Blocks).
	PcapNG
)

// Options select how Capture.Encode writes the file.
type Options struct {
	// Format is Pcap or PcapNG.
	Format Format
	// Nanos writes a pcap file with nanosecond timestamps (magic
	// 0xa1b23c4d) instead of microseconds. pcapng timestamps are always in
	// nanoseconds.
	Nanos bool
	// BigEndian writes a pcap file in big-endian byte order (magic bytes
	// a1 b2 c3 d4 on disk), as written on big-endian hosts.
	BigEndian bool
	// Gzip compresses the file with gzip (RFC 1952, no name, zero
	// modification time).
	Gzip bool
	// CutBytes removes this many bytes from the end of the file before
	// compression; cut inside the last record it makes a file that ends
	// mid-record, like a capture whose writer was killed.
	CutBytes int
}

// Capture is a capture file being built: packets in file order, each on an
// interface whose link type is in Links. The zero value is a capture on one
// Ethernet interface with the defaults.
type Capture struct {
	// Links are the link types of the capture's interfaces, by interface
	// index; empty means one Ethernet interface. A pcap file has only the
	// first.
	Links []layers.LinkType
	// Snaplen is the most bytes of a packet the capture keeps; longer
	// packets are cut (their CaptureLength is less than their Length). 0
	// means DefaultSnaplen.
	Snaplen int
	// Base is the capture time of the first packet; zero means DefaultBase.
	Base time.Time
	// Step is the capture time between two packets; 0 means DefaultStep.
	Step time.Duration

	packets []packet
	ipID    map[string]uint16
	added   map[*Conn]int // segments of each Conn laid out so far
}

// packet is one packet as sent, before the snaplen.
type packet struct {
	iface int
	data  []byte
	delay time.Duration
}

// Add lays out the segments c has now, in its capture order, as packets on
// interface iface (an index into Links) after the packets already added.
// Adding the same Conn again lays out only the segments it made since, so
// that connections can be interleaved: make some segments, Add, make more,
// Add again. (Segments already laid out are not looked at again: reorder
// or drop them before.)
func (cp *Capture) Add(c *Conn, iface int) error {
	link := cp.link(iface)
	if link < 0 {
		return fmt.Errorf("pcapgen: no interface %d (the capture has %d)", iface, max(len(cp.Links), 1))
	}
	if cp.added == nil {
		cp.added = map[*Conn]int{}
	}
	for i := cp.added[c]; i < len(c.segs); i++ {
		s := c.segs[i]
		data, err := cp.serialize(c, s, layers.LinkType(link))
		if err != nil {
			return fmt.Errorf("pcapgen: segment %d of %s -> %s: %w", i, c.Client, c.Server, err)
		}
		cp.packets = append(cp.packets, packet{iface: iface, data: data, delay: s.Delay})
	}
	cp.added[c] = len(c.segs)
	return nil
}

// link returns the link type of interface iface, or -1.
func (cp *Capture) link(iface int) int {
	if len(cp.Links) == 0 && iface == 0 {
		return int(Ethernet)
	}
	if iface < 0 || iface >= len(cp.Links) {
		return -1
	}
	return int(cp.Links[iface])
}

// MACs of the two sides on Ethernet and in Linux cooked headers.
var (
	clientMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	serverMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
)

// serialize builds the bytes of one packet: link header, IP header, TCP
// header and payload, with lengths and checksums computed by gopacket.
func (cp *Capture) serialize(c *Conn, s *Segment, link layers.LinkType) ([]byte, error) {
	src, dst := c.Client, c.Server
	srcMAC, dstMAC := clientMAC, serverMAC
	if s.From == Server {
		src, dst = dst, src
		srcMAC, dstMAC = dstMAC, srcMAC
	}
	if src.Addr().Is4() != dst.Addr().Is4() {
		return nil, errors.New("client and server must both be IPv4 or both IPv6")
	}
	v6 := !src.Addr().Is4()
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()),
		Seq: s.Seq, Ack: s.Ack, Window: 65535,
		FIN: s.Flags&FIN != 0, SYN: s.Flags&SYN != 0, RST: s.Flags&RST != 0,
		PSH: s.Flags&PSH != 0, ACK: s.Flags&ACK != 0,
	}
	if s.ZeroWindow {
		tcp.Window = 0
	}
	if tcp.SYN {
		mss := uint16(DefaultMSS)
		if c.MSS > 0 {
			mss = uint16(c.MSS)
		}
		tcp.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4,
			OptionData: binary.BigEndian.AppendUint16(nil, mss)}}
	}
	if cp.ipID == nil {
		cp.ipID = map[string]uint16{}
	}
	key := src.String() + ">" + dst.String()
	cp.ipID[key]++
	var ip gopacket.SerializableLayer
	var netLayer gopacket.NetworkLayer
	ethType, family := layers.EthernetTypeIPv4, layers.ProtocolFamilyIPv4
	if v6 {
		ethType, family = layers.EthernetTypeIPv6, layers.ProtocolFamilyIPv6Darwin
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		ip, netLayer = ip6, ip6
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
			Id: cp.ipID[key], SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		ip, netLayer = ip4, ip4
	}
	if err := tcp.SetNetworkLayerForChecksum(netLayer); err != nil {
		return nil, err
	}
	ls := []gopacket.SerializableLayer{}
	switch link {
	case Ethernet:
		ls = append(ls, &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: ethType})
	case LinuxSLL:
		ls = append(ls, &sllHeader{from: s.From, mac: srcMAC, proto: ethType})
	case LinuxSLL2:
		ls = append(ls, &sllHeader{v2: true, from: s.From, mac: srcMAC, proto: ethType})
	case Null:
		ls = append(ls, &layers.Loopback{Family: family})
	case Raw:
	case RawIPv4:
		if v6 {
			return nil, errors.New("link type 228 carries IPv4 only")
		}
	case RawIPv6:
		if !v6 {
			return nil, errors.New("link type 229 carries IPv6 only")
		}
	default:
		return nil, fmt.Errorf("link type %d (%s) is not supported", int(link), link)
	}
	ls = append(ls, ip, tcp, gopacket.Payload(s.Payload))
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		return nil, err
	}
	return bytes.Clone(buf.Bytes()), nil
}

// sllHeader is the Linux cooked-mode capture header, v1 (16 bytes) or v2
// (20 bytes), which gopacket can decode but not serialise
// (https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html and
// LINKTYPE_LINUX_SLL2.html; all fields big-endian). Packets from the client
// are marked outgoing and packets from the server incoming, as a capture on
// the client host shows them.
type sllHeader struct {
	v2    bool
	from  Side
	mac   net.HardwareAddr
	proto layers.EthernetType
}

// sllIfIndex is the interface index written in SLL2 headers.
const sllIfIndex = 2

// LayerType returns the layer type of the header's link type.
func (h *sllHeader) LayerType() gopacket.LayerType {
	if h.v2 {
		return layers.LayerTypeLinuxSLL2
	}
	return layers.LayerTypeLinuxSLL
}

// SerializeTo prepends the 16- or 20-byte cooked header to b.
func (h *sllHeader) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	pktType := uint16(layers.LinuxSLLPacketTypeHost)
	if h.from == Client {
		pktType = uint16(layers.LinuxSLLPacketTypeOutgoing)
	}
	if !h.v2 {
		p, err := b.PrependBytes(16)
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint16(p[0:], pktType)
		binary.BigEndian.PutUint16(p[2:], uint16(layers.ARPHardwareTypeEthernet))
		binary.BigEndian.PutUint16(p[4:], uint16(len(h.mac)))
		clear(p[6:14])
		copy(p[6:14], h.mac)
		binary.BigEndian.PutUint16(p[14:], uint16(h.proto))
		return nil
	}
	p, err := b.PrependBytes(20)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint16(p[0:], uint16(h.proto))
	binary.BigEndian.PutUint16(p[2:], 0) // reserved
	binary.BigEndian.PutUint32(p[4:], sllIfIndex)
	binary.BigEndian.PutUint16(p[8:], uint16(layers.ARPHardwareTypeEthernet))
	p[10] = byte(pktType)
	p[11] = byte(len(h.mac))
	clear(p[12:20])
	copy(p[12:20], h.mac)
	return nil
}

// Encode writes the capture file as opt says and returns its bytes. Packet
// i (from 0) is stamped Base + i×Step plus the Delay of every segment up to
// and including it.
func (cp *Capture) Encode(opt Options) ([]byte, error) {
	base, step := cp.Base, cp.Step
	if base.IsZero() {
		base = DefaultBase
	}
	if step <= 0 {
		step = DefaultStep
	}
	snap := cp.Snaplen
	if snap <= 0 {
		snap = DefaultSnaplen
	}
	links := cp.Links
	if len(links) == 0 {
		links = []layers.LinkType{Ethernet}
	}
	var out bytes.Buffer
	var write func(ci gopacket.CaptureInfo, data []byte) error
	var flush func() error
	switch opt.Format {
	case Pcap:
		w := pcapgo.NewWriter(&out)
		if opt.Nanos {
			w = pcapgo.NewWriterNanos(&out)
		}
		if err := w.WriteFileHeader(uint32(snap), links[0]); err != nil {
			return nil, err
		}
		write = w.WritePacket
		flush = func() error { return nil }
	case PcapNG:
		intf := func(i int) pcapgo.NgInterface {
			return pcapgo.NgInterface{Name: fmt.Sprintf("gen%d", i), LinkType: links[i],
				SnapLength: uint32(snap), TimestampResolution: 9}
		}
		// Fixed section options: pcapgo's defaults name the host's OS and
		// architecture, which would make the bytes differ between machines.
		w, err := pcapgo.NewNgWriterInterface(&out, intf(0),
			pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "kwatch pcapgen"}})
		if err != nil {
			return nil, err
		}
		for i := 1; i < len(links); i++ {
			if _, err := w.AddInterface(intf(i)); err != nil {
				return nil, err
			}
		}
		write = w.WritePacket
		flush = w.Flush
	default:
		return nil, fmt.Errorf("pcapgen: unknown format %d", opt.Format)
	}
	t := base
	for i, p := range cp.packets {
		if i > 0 {
			t = t.Add(step)
		}
		t = t.Add(p.delay)
		if opt.Format == Pcap && p.iface != 0 {
			return nil, fmt.Errorf("pcapgen: packet %d is on interface %d; a pcap file has one interface", i+1, p.iface)
		}
		data := p.data
		if len(data) > snap {
			data = data[:snap]
		}
		ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(p.data), InterfaceIndex: p.iface}
		if err := write(ci, data); err != nil {
			return nil, fmt.Errorf("pcapgen: packet %d: %w", i+1, err)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	b := out.Bytes()
	if opt.BigEndian {
		if opt.Format != Pcap {
			return nil, errors.New("pcapgen: BigEndian applies to pcap files only")
		}
		swapPcap(b)
	}
	if opt.CutBytes > 0 {
		if opt.CutBytes >= len(b) {
			return nil, fmt.Errorf("pcapgen: cannot cut %d bytes of a %d-byte file", opt.CutBytes, len(b))
		}
		b = b[:len(b)-opt.CutBytes]
	}
	if !opt.Gzip {
		return b, nil
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz) // no name, zero ModTime: deterministic header
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

// swapPcap turns a little-endian pcap file, as pcapgo writes it, into the
// same file in big-endian byte order: the 24-byte file header (magic,
// version, thiszone, sigfigs, snaplen, link type) and each 16-byte record
// header (seconds, sub-seconds, captured and original length). Packet bytes
// are not touched.
func swapPcap(b []byte) {
	sw32 := func(p []byte) { binary.BigEndian.PutUint32(p, binary.LittleEndian.Uint32(p)) }
	sw16 := func(p []byte) { binary.BigEndian.PutUint16(p, binary.LittleEndian.Uint16(p)) }
	sw32(b[0:])
	sw16(b[4:])
	sw16(b[6:])
	for off := 8; off < 24; off += 4 {
		sw32(b[off:])
	}
	for off := 24; off+16 <= len(b); {
		caplen := int(binary.LittleEndian.Uint32(b[off+8:]))
		for k := 0; k < 16; k += 4 {
			sw32(b[off+k:])
		}
		off += 16 + caplen
	}
}
