package pcap

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/reassembly"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// stream is one TCP connection (reassembly.Stream).
type stream struct {
	rd        *reader
	net, tcp  gopacket.Flow
	clientDir reassembly.TCPFlowDirection
	known     bool // clientDir is decided
	rec       *record.Conn
	hc        *wire.Conn
	half      [2]direction // by gopacket direction
	sawSYN    bool         // a SYN was captured (either direction)
	noStart   bool         // reported that the connection began before the capture
	done      bool
	lastSeen  time.Time // capture time of the last packet
	// finFirst is the direction whose FIN came first (finFirstSet once
	// one came), to tell a client that gave an exchange up from a
	// server that ended it.
	finFirst    reassembly.TCPFlowDirection
	finFirstSet bool
	// afterReset is set when reassembly hands on bytes after a reset
	// finished the connection (rare: allocated then).
	afterReset *afterReset
	counted    bool // counted in reader.tcpConns
	carried    bool // counted in reader.dataConns: payload was seen
	// ignored: the filters (Options.Client, Server) leave the connection
	// out, once its sides are known; nothing of it is decoded.
	ignored bool
	// guessed: which side is the client could not be decided
	// (record.Conn.RolesGuessed).
	guessed bool
	first   bool // a packet was accepted
	// leftover is the connection that ended on this 4-tuple when this
	// stream is its leftovers (see Accept).
	leftover *endedConn
}

// afterReset is what came after a reset: n bytes, the first of them in
// direction dir at stream offset at, in packet packet at time t.
type afterReset struct {
	n, at, packet int64
	dir           reassembly.TCPFlowDirection
	t             time.Time
}

// direction is what kwatch tracks of one direction beyond reassembly.
type direction struct {
	fin, rst, closed bool
	overlap          overlapCheck
	// delivered counts the bytes of this direction handed on or reported
	// missing, from the first byte captured.
	delivered int64
	// finAt is the stream offset of the FIN (finKnown when one was seen
	// after the stream's start was known).
	finAt    int64
	finKnown bool
	finCI    gopacket.CaptureInfo // the FIN's packet
	// finTime and rstTime are the capture times of this direction's
	// first FIN and first RST: an end is dated by the packet that made
	// it, not by when reassembly got round to it.
	finTime, rstTime time.Time
	// snapCut: a packet of this direction was cut short by the snaplen.
	snapCut bool
	// next is the sequence number after the last in-order byte (SYN and
	// FIN count one), nextOK once a packet set it: where a synthetic RST
	// must be to close this direction in the assembler.
	next   uint32
	nextOK bool
	// maxEnd is the highest sequence number a packet reached: beyond
	// next while segments wait behind a missing one (ahead).
	maxEnd uint32
	// zeroSince is when this direction's sender began to advertise a
	// receive window of 0 (its receive buffer full: the peer may send
	// nothing until it reads), zero while its window is open; zeroNotes
	// counts the stalls said of it, zeroMore those past maxZeroNotes.
	zeroSince           time.Time
	zeroNotes, zeroMore int
	// winAck is the acknowledgment number of the packet whose window was
	// taken last (winAckOK once one was): a packet acknowledging less is
	// an old one (a duplicate, one captured late), whose window is
	// not the current one (RFC 9293 §3.10.7.4 updates the send window
	// only from segments no older than the last update).
	winAck   uint32
	winAckOK bool
}

// maxZeroNotes bounds the TCP zero-window notes of one direction of a
// connection; later stalls are counted in one note at its end.
const maxZeroNotes = 64

// Accept sees every TCP packet of the connection before reassembly. It
// accepts all of them, starts a stream whose SYN was not captured (gopacket
// would otherwise hold its data until the end), notes FIN and RST, and
// compares retransmitted bytes with the first copy.
func (s *stream) Accept(tcp *layers.TCP, ci gopacket.CaptureInfo, dir reassembly.TCPFlowDirection, nextSeq reassembly.Sequence, start *bool, ac reassembly.AssemblerContext) bool {
	*start = true
	if s.rd.synthetic {
		return true // closeLingering's RST: not a packet of the capture
	}
	s.lastSeen = ci.Timestamp
	if !s.first {
		s.first = true
		// A stream that does not start with a SYN, on the 4-tuple of a
		// connection that just ended, is that connection's leftovers (a
		// last ACK, a late FIN or RST, bytes sent after a reset, a
		// retransmission): not a connection of its own. It is closed
		// after this packet.
		if e := s.rd.ended[tupleHash(s.net, s.tcp)]; e != nil && !tcp.SYN {
			s.leftover = e
		}
	}
	if s.leftover != nil {
		if len(tcp.Payload) > 0 && s.leftover.reset != "" && !s.leftover.warned && s.leftover.rec != nil {
			s.leftover.warned = true
			s.rd.Emit(s.rd.afterReset(s.leftover.rec, s.rd.stats.Packets, ci.Timestamp,
				fmt.Sprintf("%d bytes (and any after them)", len(tcp.Payload)), s.leftover.reset))
		}
		s.linger()
		return false // not reassembled: nothing of it is decoded
	}
	if s.ignored {
		s.rd.stats.other(s.sides())
		return false
	}
	s.count(tcp)
	s.halfOf(dir).advance(tcp)
	if tcp.ACK && !tcp.SYN && !tcp.RST && !tcp.FIN && !s.done {
		s.window(dir, tcp.Window, tcp.Ack, ci.Timestamp)
	}
	if s.done {
		// Finished at a reset: what follows is not decoded (ReassembledSG
		// counts it), and no longer checked for overlaps.
		return true
	}
	if tcp.SYN {
		s.sawSYN = true
	}
	h := s.halfOf(dir)
	if tcp.FIN {
		if !h.fin {
			h.finTime = ci.Timestamp
		}
		h.fin = true
		if !s.finFirstSet && !s.halfOf(dir.Reverse()).rst {
			s.finFirst, s.finFirstSet = dir, true
		}
	}
	if tcp.RST && h.inWindow(tcp.Seq) {
		if !h.rst {
			h.rstTime = ci.Timestamp
		}
		h.rst = true
		if h.closed && s.hc != nil && !s.halfOf(dir.Reverse()).ahead() {
			// This direction had ended with its FIN: reassembly will
			// not hand the RST on, and the other direction ends here.
			s.finish(ci)
			s.linger()
		}
	}
	if len(tcp.Payload) > 0 {
		if off, ok := h.overlap.add(tcp.Seq, tcp.SYN, tcp.Payload); !ok && s.ensureConn(dir, nil) {
			s.rd.Emit(&record.Problem{File: s.rd.opt.Name, Packet: s.rd.stats.Packets, Conn: s.rec,
				Direction: s.dirName(dir), Where: "stream", Offset: off, Time: ci.Timestamp,
				Kind:   "retransmission differs from the first copy",
				Detail: fmt.Sprintf("%d bytes at seq %d overlap earlier bytes with other content", len(tcp.Payload), tcp.Seq),
				Hint:   "the stream may have been tampered with; which copy the endpoint used is unknown"})
		}
	} else if tcp.SYN {
		h.overlap.add(tcp.Seq, true, nil)
	}
	if tcp.FIN && !tcp.SYN && h.overlap.init && !h.finKnown {
		h.finAt, h.finKnown = h.overlap.rel(tcp.Seq)+int64(len(tcp.Payload)), true
		h.finCI = ci
	}
	if ci.CaptureLength < ci.Length {
		h.snapCut = true
	}
	return true
}

// window follows the receive window a packet of dir advertises (RFC 9293
// §3.8.6) with acknowledgment number ack: when it opens again after being
// 0, a note says for how long the sender of dir held the peer's bytes back
// by not reading them, the TCP counterpart of an HTTP/2 flow-control
// stall. A packet acknowledging less than the last one taken is old and
// not followed; so is a window closing at the acknowledgment number it was
// open at (a window closes as bytes arrive, which moves the
// acknowledgment: what closes without is a copy of an earlier packet).
func (s *stream) window(dir reassembly.TCPFlowDirection, w uint16, ack uint32, t time.Time) {
	h := s.halfOf(dir)
	if h.winAckOK && (int32(ack-h.winAck) < 0 || (w == 0 && h.zeroSince.IsZero() && ack == h.winAck)) {
		return
	}
	h.winAck, h.winAckOK = ack, true
	switch {
	case w == 0 && h.zeroSince.IsZero():
		h.zeroSince = t
	case w > 0 && !h.zeroSince.IsZero():
		s.zeroWindowNote(dir, t, t.Sub(h.zeroSince), "")
		h.zeroSince = time.Time{}
	}
}

// zeroWindowNote says that dir's receive window was 0 for stall (how,
// when not empty, says until what: " until the connection closed"), up to
// maxZeroNotes times a direction. A connection that has carried no
// byte yet has no record, nor a known client (which its first bytes will
// tell): a stall before them is not said.
func (s *stream) zeroWindowNote(dir reassembly.TCPFlowDirection, t time.Time, stall time.Duration, how string) {
	h := s.halfOf(dir)
	if s.hc == nil {
		return
	}
	if h.zeroNotes >= maxZeroNotes {
		h.zeroMore++
		return
	}
	h.zeroNotes++
	who, peer := s.dirName(dir), s.dirName(dir.Reverse())
	s.rd.Emit(&record.ConnNote{Conn: s.rec, Time: t, Kind: "tcp", Stall: stall,
		Message: fmt.Sprintf("TCP zero window: the %s's receive window was at 0 for %s%s, holding back the %s's bytes (the %s did not read them)",
			who, stall.Round(time.Microsecond), how, peer, who)})
}

// zeroWindowEnd says, at the end of the connection (at t, ended as until
// says: "until the connection closed"), the stalls still on and those past
// maxZeroNotes.
func (s *stream) zeroWindowEnd(t time.Time, until string) {
	for _, dir := range []reassembly.TCPFlowDirection{s.clientDir.Reverse(), s.clientDir} {
		h := s.halfOf(dir)
		if !h.zeroSince.IsZero() {
			s.zeroWindowNote(dir, t, max(0, t.Sub(h.zeroSince)), " "+until)
			h.zeroSince = time.Time{}
		}
		if h.zeroMore > 0 {
			s.rd.Emit(&record.ConnNote{Conn: s.rec, Time: t, Kind: "tcp", Unlisted: h.zeroMore,
				Message: fmt.Sprintf("TCP zero window: the %s's receive window was at 0 %d more times (not listed)", s.dirName(dir), h.zeroMore)})
			h.zeroMore = 0
		}
	}
}

// count counts the connection in reader.tcpConns at its first packet that
// opens it (SYN), carries bytes, or closes it without being the leftover of
// a connection that ended on the same 4-tuple; a bare ACK never does.
func (s *stream) count(tcp *layers.TCP) {
	if len(tcp.Payload) > 0 && !s.carried && !s.ignored {
		s.carried = true
		s.rd.dataConns++
	}
	if s.counted {
		return
	}
	switch {
	case tcp.SYN, len(tcp.Payload) > 0, tcp.FIN, tcp.RST:
	default:
		return
	}
	s.counted = true
	s.rd.tcpConns++
}

// advance moves the direction's next sequence number past an in-order
// packet (RFC 9293 §3.4: SYN and FIN occupy one each).
func (h *direction) advance(tcp *layers.TCP) {
	if tcp.RST && len(tcp.Payload) == 0 {
		return // a RST occupies no sequence number; judged by inWindow
	}
	end := tcp.Seq + uint32(len(tcp.Payload))
	if tcp.SYN {
		end++
	}
	if tcp.FIN {
		end++
	}
	if !h.nextOK || (int32(tcp.Seq-h.next) <= 0 && int32(end-h.next) > 0) {
		h.next, h.nextOK = end, true
	}
	if int32(end-h.maxEnd) > 0 || h.maxEnd == 0 {
		h.maxEnd = end
	}
}

// ahead reports whether segments of this direction wait behind a missing
// one.
func (h *direction) ahead() bool { return h.nextOK && int32(h.maxEnd-h.next) > 0 }

// inWindow reports whether a RST at seq is one the receiver takes: at the
// next sequence number expected (RFC 5961 §3.2; gopacket's assembler drops
// the others too). Before any packet of the direction, any RST is.
func (h *direction) inWindow(seq uint32) bool { return !h.nextOK || seq == h.next }

// linger asks the reader to close, after this packet, the directions of
// the connection the assembler still has open, so that it forgets the
// connection: one a reset finished, or a stream started by the leftovers
// of one that ended.
func (s *stream) linger() {
	for _, dir := range []reassembly.TCPFlowDirection{reassembly.TCPDirClientToServer, reassembly.TCPDirServerToClient} {
		h := s.halfOf(dir)
		if h.rst || h.closed && h.fin {
			continue
		}
		net, tcp := s.net, s.tcp
		if dir == reassembly.TCPDirServerToClient {
			net, tcp = net.Reverse(), tcp.Reverse()
		}
		s.rd.toClose = append(s.rd.toClose, closeReq{net: net, tcp: tcp, seq: h.next})
	}
}

// halfOf returns the state of one gopacket direction.
func (s *stream) halfOf(dir reassembly.TCPFlowDirection) *direction {
	if dir == reassembly.TCPDirClientToServer {
		return &s.half[0]
	}
	return &s.half[1]
}

func (s *stream) dirName(dir reassembly.TCPFlowDirection) string {
	if s.known && dir == s.clientDir {
		return "client"
	}
	if s.known {
		return "server"
	}
	return ""
}

// sides returns the connection's client and server endpoints, as
// clientDir has them.
func (s *stream) sides() (client, server netip.AddrPort) {
	a := endpoint(s.net.Src().Raw(), s.tcp.Src().Raw())
	b := endpoint(s.net.Dst().Raw(), s.tcp.Dst().Raw())
	if s.clientDir != reassembly.TCPDirClientToServer {
		a, b = b, a
	}
	return a, b
}

// rolesKnown is called once which side is the client is decided: the
// server's endpoint is remembered as listening (unless only guessed), and
// a connection the filters leave out is ignored from here on, uncounted.
func (s *stream) rolesKnown() {
	client, server := s.sides()
	if !s.guessed {
		s.rd.listening(server)
	}
	if s.rd.filtered && !s.rd.opt.keeps(client, server) {
		s.ignore()
	}
}

// ignore leaves the connection out (the filters do not keep it): from
// here on it is not decoded, and not counted among the capture's.
func (s *stream) ignore() {
	s.ignored = true
	s.rd.stats.other(s.sides())
	if s.counted {
		s.counted = false
		s.rd.tcpConns--
	}
	if s.carried {
		s.carried = false
		s.rd.dataConns--
	}
}

// ensureConn decides which side is the client (from the SYN, or else
// decideRoles) and creates the HTTP state; it reports false for a
// connection the filters leave out.
func (s *stream) ensureConn(dir reassembly.TCPFlowDirection, data []byte) bool {
	if s.ignored {
		return false
	}
	if s.hc != nil {
		return true
	}
	if !s.known {
		s.known = true
		s.guessed = s.decideRoles(dir, data) == guessed
		s.rolesKnown()
		if s.ignored {
			return false
		}
	}
	a, b := s.sides()
	var who string
	var procs []record.ConnProcess
	if s.rd.opt.Owner != nil {
		who, procs = s.rd.opt.Owner(a, b)
	}
	if name := s.rd.opt.ClientProcess; name != "" {
		if client := clientProcess(procs); client != name {
			// Another process's connection (or one whose client is
			// not known): not decoded at all.
			count(&s.rd.stats.OtherProcesses, client)
			s.ignore()
			return false
		}
	}
	// Connections are numbered in the order they first carried data.
	s.rd.nconn++
	s.rec = &record.Conn{ID: s.rd.nconn, Client: a, Server: b, RolesGuessed: s.guessed}
	s.hc = s.rd.board.Conn(s.rec, s.rd.dec)
	if who != "" {
		s.rd.Emit(&record.ConnNote{Conn: s.rec, Time: s.rd.now, Kind: "process", Message: who, Processes: procs})
	}
	return true
}

// clientProcess is the name of the client among procs (Options.Owner's),
// "" when none is known.
func clientProcess(procs []record.ConnProcess) string {
	for _, p := range procs {
		if p.Role == "client" {
			return p.Name
		}
	}
	return ""
}

func isRequestStart(p []byte) bool {
	for _, m := range []string{"GET ", "POST ", "PUT ", "PATCH ", "DELETE ", "HEAD ", "OPTIONS ", "CONNECT ", "TRACE "} {
		if bytes.HasPrefix(p, []byte(m)) {
			return true
		}
	}
	return false
}

// ReassembledSG receives in-order bytes of one direction, with the size of
// any gap before them.
func (s *stream) ReassembledSG(sg reassembly.ScatterGather, ac reassembly.AssemblerContext) {
	dir, _, end, skip := sg.Info()
	length, _ := sg.Lengths()
	if s.ignored {
		return
	}
	if s.done {
		// The connection was finished at a reset: bytes of the other
		// direction that reassembly still hands on were sent to an
		// endpoint that had reset it, and never read.
		if length > 0 {
			h := s.halfOf(dir)
			if s.afterReset == nil {
				ci := sg.CaptureInfo(0)
				s.afterReset = &afterReset{dir: dir, at: h.delivered + int64(max(skip, 0)), packet: packetOf(ci), t: ci.Timestamp}
			}
			s.afterReset.n += int64(length)
			h.delivered += int64(max(skip, 0) + length)
		}
		return
	}
	var data []byte
	if length > 0 {
		data = sg.Fetch(length)
	}
	ci := gopacket.CaptureInfo{Timestamp: s.rd.now}
	if ac != nil {
		ci = ac.GetCaptureInfo()
	}
	if length > 0 {
		ci = sg.CaptureInfo(length - 1)
	}
	if (length > 0 || skip > 0) && !s.ensureConn(dir, data) {
		return
	}
	client := dir == s.clientDir
	// Accept forces every stream to start, so gopacket never reports
	// skip < 0 ("start not seen"): whether the SYN was captured says it.
	if !s.sawSYN && !s.noStart && length > 0 {
		s.noStart = true
		msg := "the capture starts after this connection opened (no SYN seen); decoding from the first byte captured"
		if s.guessed {
			msg += guessedText(s.rec.Client)
		}
		s.rd.Emit(&record.ConnNote{Conn: s.rec, Time: ci.Timestamp, Kind: "no-syn", Message: msg})
	}
	h := s.halfOf(dir)
	if skip > 0 {
		// The gap is located at the first byte after it.
		gci := ci
		if length > 0 {
			gci = sg.CaptureInfo(0)
		}
		s.gap(dir, int64(skip), gci)
	}
	h.delivered += int64(length)
	if len(data) > 0 {
		s.rd.q.addData(s.hc, client, data, ci.Timestamp, s.rd.stats.Packets)
	}
	if end {
		s.closeHalf(dir, ci)
		if h.rst && !s.halfOf(dir.Reverse()).ahead() {
			// gopacket ends only the direction that sent the RST; the
			// other one would stay open until the capture's end. A reset
			// ends both at once (RFC 9293 §3.10.7.4); the assembler is
			// told so after this packet (linger). When the other
			// direction has segments waiting behind a missing one, they
			// are flushed (and the loss reported) first, as usual.
			s.finish(ci)
			s.linger()
		}
	}
}

// gap reports n bytes of one direction that the capture lost.
func (s *stream) gap(dir reassembly.TCPFlowDirection, n int64, ci gopacket.CaptureInfo) {
	h := s.halfOf(dir)
	h.delivered += n
	// The gap problem is made by the follower; the decoder's locate gives it
	// the packet after the gap, and the snaplen hint when this direction
	// had packets cut short.
	s.rd.q.add(op{kind: opGap, hc: s.hc, client: dir == s.clientDir, n: n, t: ci.Timestamp,
		packet: s.rd.stats.Packets, gap: gapContext{packet: packetOf(ci), snap: h.snapCut}})
}

func (s *stream) closeHalf(dir reassembly.TCPFlowDirection, ci gopacket.CaptureInfo) {
	h := s.halfOf(dir)
	if h.closed || s.hc == nil {
		return
	}
	h.closed = true
	// gopacket's reassembly ends a direction at its FIN without reporting
	// the bytes lost just before it (the last segment, or the part of it
	// the snaplen cut off): the FIN's sequence number says how many there
	// were.
	if h.fin && h.finKnown && !h.rst && h.finAt > h.delivered {
		s.gap(dir, h.finAt-h.delivered, h.finCI)
	}
	how := exchange.EndFIN
	switch {
	case s.dropped():
		how = exchange.EndDropped
	case h.rst || s.halfOf(dir.Reverse()).rst:
		how = exchange.EndRST
		if s.known && s.resetBy() == s.clientDir {
			how = exchange.EndClientRST
		}
		ci.Timestamp = s.resetTime()
	case s.known && dir != s.clientDir && s.finFirstSet && s.finFirst == s.clientDir:
		// The client closed first: it gave the exchange up (a watch it
		// stopped), whether or not the server's FIN followed.
		how = exchange.EndClient
	case !h.fin && s.rd.ending && s.rd.opt.Detach:
		how = exchange.EndDetach
	case !h.fin && s.rd.ending:
		how = exchange.EndCapture
	}
	if how != exchange.EndRST && how != exchange.EndDropped && h.fin && !h.finTime.IsZero() {
		// Dated by the FIN, also when reassembly delivers it later (a
		// gap before it, the end of the capture).
		ci.Timestamp = h.finTime
	}
	s.rd.q.add(op{kind: opClose, hc: s.hc, client: dir == s.clientDir, how: how, t: ci.Timestamp, packet: s.rd.stats.Packets})
}

// dropped reports whether the stream is being closed because too many
// connections are open (reader.dropIdle).
func (s *stream) dropped() bool {
	return !s.rd.dropBefore.IsZero() && s.lastSeen.Before(s.rd.dropBefore)
}

// ReassemblyComplete is called once when both directions are done: closed
// by FIN or RST, or flushed at the end of the capture.
func (s *stream) ReassemblyComplete(ac reassembly.AssemblerContext) bool {
	delete(s.rd.live, s)
	if s.leftover != nil {
		return true
	}
	if s.done {
		if a := s.afterReset; a != nil && s.hc != nil {
			// A warning: what these bytes carried (watch events) was
			// sent, and never reached the endpoint that had reset.
			p := s.rd.afterReset(s.rec, a.packet, a.t, fmt.Sprintf("%d bytes", a.n), s.dirName(a.dir.Reverse()))
			p.Direction, p.Where, p.Offset = s.dirName(a.dir), "stream", a.at
			s.rd.Emit(p)
		}
		return true
	}
	ci := gopacket.CaptureInfo{Timestamp: s.rd.now}
	if ac != nil {
		ci = ac.GetCaptureInfo()
	}
	if s.rd.ending {
		ci.Timestamp = s.rd.now
	}
	s.finish(ci)
	return true
}

// afterReset is the warning about bytes ("808 bytes") sent on conn after
// who ("client", "server") reset it: never read by the endpoint that reset.
// Its Offset is -1 (unknown) until the caller sets where it was.
func (rd *reader) afterReset(conn *record.Conn, packet int64, t time.Time, bytes, who string) *record.Problem {
	return &record.Problem{File: rd.opt.Name, Packet: packet, Conn: conn, Offset: -1, Time: t, Warning: true,
		Kind:   "bytes after the reset",
		Detail: fmt.Sprintf("%s sent after the %s reset the connection (RST) were not decoded", bytes, who),
		Hint:   "the endpoint that reset never read them: events in them never reached it"}
}

// resetBy is the direction of the first RST captured.
func (s *stream) resetBy() reassembly.TCPFlowDirection {
	a, b := s.half[0].rstTime, s.half[1].rstTime
	if !a.IsZero() && (b.IsZero() || !b.Before(a)) {
		return reassembly.TCPDirClientToServer
	}
	return reassembly.TCPDirServerToClient
}

// resetTime is when the connection was reset: the first RST captured,
// in either direction.
func (s *stream) resetTime() time.Time {
	a, b := s.half[0].rstTime, s.half[1].rstTime
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// finish ends both directions and says how the connection ended, dated
// by the packet that ended it: the RST, the later FIN, or else ci (the
// end of the capture, or the flush of an idle connection).
func (s *stream) finish(ci gopacket.CaptureInfo) {
	if s.done {
		return
	}
	s.done = true
	if !s.dropped() {
		e := &endedConn{rec: s.rec}
		for _, d := range []reassembly.TCPFlowDirection{reassembly.TCPDirClientToServer, reassembly.TCPDirServerToClient} {
			if h := s.halfOf(d); h.rst && (e.reset == "" || h.rstTime.Before(e.resetAt)) {
				e.reset, e.resetAt = s.dirName(d), h.rstTime
				if e.reset == "" {
					e.reset = "peer"
				}
			}
		}
		s.rd.markEnded(s.net, s.tcp, e)
	}
	s.half[0].overlap.release()
	s.half[1].overlap.release()
	s.closeHalf(s.clientDir.Reverse(), ci)
	s.closeHalf(s.clientDir, ci)
	if s.hc != nil {
		note := &record.ConnNote{Conn: s.rec, Time: ci.Timestamp, Kind: "closed", Bytes: s.half[0].delivered + s.half[1].delivered}
		switch {
		case s.dropped():
			note.Message = fmt.Sprintf("no longer followed: more than %d connections were open at once, and this one was idle the longest",
				s.rd.opt.MaxConnections)
		case s.half[0].rst || s.half[1].rst:
			note.Message = "connection reset (RST)"
			note.Reset = true
			note.Time = s.resetTime()
		case s.half[0].fin && s.half[1].fin:
			note.Message = "connection closed (FIN both ways)"
			note.Time = s.half[0].finTime
			if s.half[1].finTime.After(note.Time) {
				note.Time = s.half[1].finTime
			}
		case s.half[0].fin || s.half[1].fin:
			note.Message = "capture ended with the connection half-closed"
			note.Kind = "capture-ended"
			if s.rd.opt.Detach {
				note.Message = "kwatch detached with the connection half-closed"
			}
		default:
			note.Message = "capture ended with the connection open"
			note.Kind = "capture-ended"
			if s.rd.opt.Detach {
				note.Message = "kwatch detached with the connection still open"
			}
		}
		until := "until the connection closed"
		switch {
		case s.dropped():
			until = "until kwatch stopped following the connection"
		case s.half[0].rst || s.half[1].rst:
			until = "until the connection was reset"
		case note.Kind == "capture-ended":
			until = "until the capture ended"
		}
		s.zeroWindowEnd(note.Time, until)
		s.rd.Emit(note)
	}
}
