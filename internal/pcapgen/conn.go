// Package pcapgen builds synthetic TCP conversations and writes them as packet
// captures with deterministic bytes, for tests of capture decoding.
//
// A Conn is one TCP connection between a client and a server: its segments,
// in capture order, with correct sequence and acknowledgment numbers. The
// bytes each side sends can be cut into segments anywhere; segments can then
// be reordered, retransmitted (with the same or with different bytes) and
// dropped, and the connection can start without its SYN and end with FIN or
// RST. A Capture lays the segments of one or more Conns out as packets of a
// link type (Ethernet, Linux SLL and SLL2, BSD loopback, raw IP; IPv4 or
// IPv6), stamps them with fixed times (DefaultBase plus a step per packet)
// and encodes them as pcap (microsecond or nanosecond, little- or
// big-endian) or pcapng (several interfaces of different link types), cut
// by a snaplen, gzip'd, or cut short in the middle of the last record.
//
// Headers are serialised with gopacket (gopacket.SerializeLayers with
// layers.Ethernet, layers.Loopback, layers.IPv4, layers.IPv6, layers.TCP)
// and files are written with gopacket's pcapgo writers; the Linux SLL and
// SLL2 headers, which gopacket cannot serialise, are written here.
package pcapgen

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"
)

// DefaultMSS is the largest payload of one segment, in bytes, when Conn.MSS
// is 0: 1448, what Linux sends on an Ethernet path with TCP timestamps.
const DefaultMSS = 1448

// Side names an endpoint of a Conn.
type Side int

// The two endpoints of a Conn.
const (
	// Client opened the connection (sent the SYN).
	Client Side = iota
	// Server accepted it.
	Server
)

// Other returns the opposite side.
func (s Side) Other() Side { return 1 - s }

// String returns "client" or "server".
func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "server"
}

// Flags are TCP control bits (RFC 9293 §3.1).
type Flags uint8

// TCP control bits, as Segment.Flags holds them.
const (
	// FIN: the sender has no more data; it occupies one sequence number.
	FIN Flags = 1 << iota
	// SYN: synchronise sequence numbers; it occupies one sequence number.
	SYN
	// RST: reset the connection.
	RST
	// PSH: push the data to the application.
	PSH
	// ACK: the Ack field is significant.
	ACK
)

// Segment is one TCP segment of a Conn as it will appear in the capture.
// Tests may change its fields (for example Payload or Delay) before the Conn
// is added to a Capture.
type Segment struct {
	// From is the side that sent the segment.
	From Side
	// Seq is the sequence number of the first payload byte (of the SYN or
	// FIN when the segment carries one and no payload); Ack is the
	// acknowledgment number, meaningful when Flags has ACK.
	Seq, Ack uint32
	// Flags are the TCP control bits.
	Flags Flags
	// Payload is the TCP payload, possibly empty.
	Payload []byte
	// Delay is capture time added before this packet, on top of the
	// Capture's step between packets.
	Delay time.Duration
	// ZeroWindow makes the segment advertise a receive window of 0 (RFC
	// 9293 §3.8.6: the sender's receive buffer is full); otherwise it
	// advertises 65535.
	ZeroWindow bool
}

// Conn is a TCP conversation: the segments both sides sent, in capture
// order. Create it with NewConn; the zero value is not usable.
type Conn struct {
	// Client and Server are the endpoints; both IPv4 or both IPv6.
	Client, Server netip.AddrPort
	// MSS is the largest payload of a segment Send makes, in bytes; 0
	// means DefaultMSS.
	MSS int

	isn   [2]uint32
	next  [2]uint32 // sequence number of each side's next byte
	segs  []*Segment
	delay time.Duration // added to the next segment made
}

// NewConn returns a connection from client to server with no segments yet.
// The initial sequence numbers are derived from the endpoints (so they are
// deterministic and differ between connections); set them with SetISN
// before the first segment to test particular values, such as sequence
// number wrap-around.
func NewConn(client, server netip.AddrPort) *Conn {
	c := &Conn{Client: client, Server: server}
	h := fnv.New32a()
	fmt.Fprint(h, client.String(), ">", server.String())
	v := h.Sum32()
	c.SetISN(v, v*2654435761+0x9e3779b9)
	return c
}

// SetISN sets each side's initial sequence number. It must be called before
// any segment is made.
func (c *Conn) SetISN(client, server uint32) {
	c.isn = [2]uint32{client, server}
	c.next = c.isn
}

// NextSeq returns the sequence number of the next byte side s sends.
func (c *Conn) NextSeq(s Side) uint32 { return c.next[s] }

// Segments returns the connection's segments in capture order. The slice is
// the Conn's own: use Drop, MoveAfter, MoveBefore and Retransmit to change
// the order.
func (c *Conn) Segments() []*Segment { return c.segs }

// Wait adds d of capture time before the next segment made.
func (c *Conn) Wait(d time.Duration) { c.delay += d }

func (c *Conn) add(s *Segment) *Segment {
	s.Delay += c.delay
	c.delay = 0
	c.segs = append(c.segs, s)
	return s
}

// Handshake adds the three-way handshake: the client's SYN, the server's
// SYN+ACK and the client's ACK (RFC 9293 §3.5). Each SYN occupies one
// sequence number. Without it the capture starts mid-connection.
func (c *Conn) Handshake() {
	c.add(&Segment{From: Client, Seq: c.next[Client], Flags: SYN})
	c.next[Client]++
	c.add(&Segment{From: Server, Seq: c.next[Server], Ack: c.next[Client], Flags: SYN | ACK})
	c.next[Server]++
	c.add(&Segment{From: Client, Seq: c.next[Client], Ack: c.next[Server], Flags: ACK})
}

// SYN adds the client's SYN alone, as the first segment of a connection
// the server never answers (a half-open connection, or a SYN flood). It
// occupies one sequence number.
func (c *Conn) SYN() *Segment {
	s := c.add(&Segment{From: Client, Seq: c.next[Client], Flags: SYN})
	c.next[Client]++
	return s
}

// Send adds segments carrying data from side s and returns them in order.
// A segment starts at each offset in cuts (byte offsets into data, in
// increasing order, each inside data) and no segment is longer than the MSS.
// Every segment acknowledges all the other side has sent; the last one has
// PSH set.
func (c *Conn) Send(s Side, data []byte, cuts ...int) []*Segment {
	mss := c.MSS
	if mss <= 0 {
		mss = DefaultMSS
	}
	var out []*Segment
	start := 0
	for start < len(data) {
		end := min(start+mss, len(data))
		for _, cut := range cuts {
			if cut > start && cut < end {
				end = cut
				break
			}
		}
		p := slices.Clone(data[start:end])
		seg := c.add(&Segment{From: s, Seq: c.next[s], Ack: c.next[s.Other()], Flags: ACK, Payload: p})
		c.next[s] += uint32(len(p))
		out = append(out, seg)
		start = end
	}
	if len(out) > 0 {
		out[len(out)-1].Flags |= PSH
	}
	return out
}

// Ack adds a segment from side s without payload that acknowledges all the
// other side has sent.
func (c *Conn) Ack(s Side) *Segment {
	return c.add(&Segment{From: s, Seq: c.next[s], Ack: c.next[s.Other()], Flags: ACK})
}

// Close adds a FIN from side s (RFC 9293 §3.6); the FIN occupies one
// sequence number.
func (c *Conn) Close(s Side) *Segment {
	seg := c.add(&Segment{From: s, Seq: c.next[s], Ack: c.next[s.Other()], Flags: FIN | ACK})
	c.next[s]++
	return seg
}

// Reset adds a RST from side s (RFC 9293 §3.10.7).
func (c *Conn) Reset(s Side) *Segment {
	return c.add(&Segment{From: s, Seq: c.next[s], Ack: c.next[s.Other()], Flags: RST | ACK})
}

func (c *Conn) index(s *Segment) int {
	i := slices.Index(c.segs, s)
	if i < 0 {
		panic("pcapgen: segment is not part of this connection")
	}
	return i
}

// Drop, MoveAfter, MoveBefore and Retransmit panic when a segment passed to
// them is not one of the Conn's.

// Drop removes segment s from the capture: its sequence numbers stay used,
// so its bytes become a gap the reader of the capture cannot fill. Its Delay
// goes to the segment after it, so later packets keep their times.
func (c *Conn) Drop(s *Segment) {
	i := c.index(s)
	if i+1 < len(c.segs) {
		c.segs[i+1].Delay += s.Delay
	}
	c.remove(i)
}

func (c *Conn) remove(i int) { c.segs = slices.Delete(c.segs, i, i+1) }

// MoveAfter moves segment s, with its Delay, to just after segment ref in
// capture order.
func (c *Conn) MoveAfter(s, ref *Segment) {
	c.remove(c.index(s))
	c.segs = slices.Insert(c.segs, c.index(ref)+1, s)
}

// MoveBefore moves segment s, with its Delay, to just before segment ref in
// capture order.
func (c *Conn) MoveBefore(s, ref *Segment) {
	c.remove(c.index(s))
	c.segs = slices.Insert(c.segs, c.index(ref), s)
}

// Retransmit adds a copy of segment s (same sequence number, flags and
// length) just after segment after in capture order, or at the end when
// after is nil, and returns it. A nil payload keeps s's bytes; another
// payload makes a retransmission whose bytes differ from the first copy
// (it may be of another length).
func (c *Conn) Retransmit(s, after *Segment, payload []byte) *Segment {
	cp := *s
	cp.Delay = 0
	cp.Payload = slices.Clone(s.Payload)
	if payload != nil {
		cp.Payload = slices.Clone(payload)
	}
	if after == nil {
		c.segs = append(c.segs, &cp)
		return &cp
	}
	i := c.index(after)
	c.segs = slices.Insert(c.segs, i+1, &cp)
	return &cp
}
