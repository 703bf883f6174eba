package pcap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/reassembly"

	"github.com/kwatch/kwatch/pkg/event"

	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// Defaults of Options.
const (
	// DefaultGapTimeout is how much capture time may pass before data
	// waiting behind a missing segment is delivered and the gap reported.
	DefaultGapTimeout = 2 * time.Second
	// DefaultMaxBufferedPerConn bounds the out-of-order pages (about
	// 1900 bytes each, gopacket reassembly) one connection may buffer while
	// a segment is missing: 2048 pages, about 4 MiB.
	DefaultMaxBufferedPerConn = 2048
	// DefaultMaxBufferedTotal bounds out-of-order pages over all
	// connections: 16384 pages, about 32 MiB.
	DefaultMaxBufferedTotal = 16384
	// DefaultMaxConnections bounds the TCP connections followed at once
	// (those seen and not yet closed): 10000. An idle connection costs
	// 1.5 KiB (a SYN alone) to 4 KiB (one request waiting), so that a
	// capture of 100k half-open connections (a SYN flood, a port scan)
	// stays under 50 MiB; past the bound the connections idle the
	// longest are dropped, and that is reported. (What one connection
	// may buffer is bounded apart: wire.Options, MaxBufferedPerConn.)
	DefaultMaxConnections = 10000
	// maxTruncatedReports bounds how many snaplen-cut packets are reported
	// one by one; the rest are counted in the summary.
	maxTruncatedReports = 5
)

// Options tune Read. The zero value means the defaults.
type Options struct {
	// Name is the capture's file name, "-" for stdin; it prefixes the
	// location of every problem.
	Name string
	// Port, when not 0, keeps only connections with this TCP port on either
	// side.
	Port uint16
	// SkipPorts leaves out the connections with one of these TCP ports on
	// either side, unseen and uncounted (kwatch on a node: the kubelet's
	// port, whose connections carry the API server's streams to the
	// node's pods, kwatch's own among them).
	SkipPorts []uint16
	// Client and Server, when set, keep only connections whose client
	// (and server) is that endpoint (kwatch pcap --client, --server). A
	// connection whose SYN was not captured has its sides decided from
	// its first bytes, else from the ports (see decideRoles; between two
	// ephemeral ports, Server and Port name the listening side).
	Client, Server Endpoint
	// ClientProcess, when set, keeps only connections whose client is a
	// process of that name, as Owner names it (kwatch attach --client
	// NAME: record.ConnProcess.Name, the executable's base name); the
	// others, and those whose client no process is known for, are not
	// decoded at all.
	ClientProcess string
	// HTTP tunes the HTTP/1.1 decoding of each connection. Its Budget is
	// shared by all connections; Read makes one of event.DefaultBudgetBytes
	// when it is nil.
	HTTP wire.Options
	// MaxFeed, when not 0, hands reassembled bytes to HTTP decoding in
	// pieces of at most MaxFeed bytes. Output must not depend on it; tests
	// use 1 to prove that.
	MaxFeed int
	// GapTimeout is DefaultGapTimeout when 0.
	GapTimeout time.Duration
	// MaxBufferedPerConn and MaxBufferedTotal bound reassembly buffers, in
	// pages; 0 means the defaults.
	MaxBufferedPerConn, MaxBufferedTotal int
	// MaxConnections bounds the connections followed at once;
	// DefaultMaxConnections when 0. When a new connection goes past it,
	// the eighth of them idle the longest are closed: their bodies end
	// "not decoded further" (detail: no longer followed), a "too many
	// connections" problem says how many, and packets that come for
	// them later start new connections (without their SYN).
	MaxConnections int
	// Keys holds TLS secrets from key logs (kwatch pcap --tls-keylog);
	// a TLS connection whose secrets it has is decrypted (pkg/tlsconn).
	// Read adds those of the capture's pcapng Decryption Secrets Blocks.
	// Read makes an empty one when it is nil.
	Keys *keylog.Log
	// WaitForKeys says that a key log file may get the secrets of a TLS
	// connection after the connection's packets were read (a live
	// capture, kwatch pcap - or --follow): such a connection then holds
	// up to 64 KiB a direction until they come. A pcapng's Decryption
	// Secrets Blocks are waited for anyway.
	WaitForKeys bool
	// Owner, when set, names what is known of a connection's endpoints
	// beyond their addresses (kwatch attach: the processes at either end,
	// e.g. "client kube-controller-manager (pid 812)", and the same as
	// typed values); a non-empty message becomes the connection's
	// "process" note, before its first record. Read uses Keys.Processes
	// when it is nil: what a recording of kwatch attach said of each
	// connection (keylog.ProcessLine).
	Owner func(client, server netip.AddrPort) (message string, procs []record.ConnProcess)
	// Detach says that the capture's end is kwatch attach detaching
	// (ReadLive's context done): the streams still open end with
	// exchange.EndDetach, and their connections' "capture-ended" notes
	// say that kwatch detached, not that a capture ended.
	Detach bool
}

// Stats counts what Read saw.
type Stats struct {
	// Format is "pcap" or "pcapng", with " (gzip)" when compressed.
	Format string
	// Packets is the number of packet records read.
	Packets int64
	// TCP is the number of TCP packets given to reassembly.
	TCP int64
	// Connections is the number of TCP connections seen (by 4-tuple,
	// from their first packet), whether or not they carried data.
	Connections int
	// Truncated counts packets cut short by the capture's snaplen.
	Truncated int64
	// OtherPorts counts the TCP packets Options.Port left out, by the
	// lower of their two ports (usually the server's), for up to
	// maxOtherPorts ports.
	OtherPorts map[uint16]int64
	// OtherServers and OtherClients count the TCP packets Options.Client
	// and Server left out, by the endpoint of the lower port (usually the
	// server) and the address of the other side, up to maxOtherPorts of
	// each.
	OtherServers map[netip.AddrPort]int64
	OtherClients map[netip.Addr]int64
	// OtherProcesses counts the connections Options.ClientProcess left
	// out, by their client process's name ("" for none known), up to
	// maxOtherPorts names.
	OtherProcesses map[string]int64
	// LeftOut counts the TCP connections the filters (Port, Client,
	// Server, ClientProcess) left out, by 4-tuple: exact up to
	// maxLeftOut of them, at least that many past it.
	LeftOut int
	leftOut map[uint64]struct{}
}

// maxLeftOut bounds the 4-tuples Stats remembers to count the
// connections left out (Stats.LeftOut).
const maxLeftOut = 1 << 16

// Unmatched says, when the filters of opt (Port, Client, Server) kept no
// TCP connection of the capture, what they left out, e.g. "no TCP packet
// has port 9999; the capture's TCP ports (the lower of each pair): 8001 (20
// packets)"; "" when they kept one, or there were none.
func (s *Stats) Unmatched(opt Options) string {
	if opt.Port == 0 && opt.Client.IsZero() && opt.Server.IsZero() || s.Connections > 0 {
		return ""
	}
	if opt.ClientProcess != "" && opt.Client.IsZero() && opt.Server.IsZero() && opt.Port == 0 {
		msg := "no TCP connection's client is a process named " + opt.ClientProcess
		if len(s.OtherProcesses) == 0 {
			return msg + "; the processes' connections carried no data"
		}
		return msg + "; their clients: " + byPackets(s.OtherProcesses, func(n string) string {
			if n == "" {
				return "(no process known)"
			}
			return n
		}, "connection", "connections")
	}
	if opt.Client.IsZero() && opt.Server.IsZero() {
		if len(s.OtherPorts) == 0 {
			return ""
		}
		return fmt.Sprintf("no TCP packet has port %d; the capture's TCP ports (the lower of each pair): %s", opt.Port,
			byPackets(s.OtherPorts, func(p uint16) string { return strconv.Itoa(int(p)) }, "packet", "packets"))
	}
	var flags []string
	if opt.Port != 0 {
		flags = append(flags, fmt.Sprintf("--port %d", opt.Port))
	}
	if !opt.Client.IsZero() {
		flags = append(flags, "--client "+opt.Client.String())
	}
	if !opt.Server.IsZero() {
		flags = append(flags, "--server "+opt.Server.String())
	}
	if opt.ClientProcess != "" {
		flags = append(flags, "--client "+opt.ClientProcess)
	}
	msg := "no TCP connection matches " + strings.Join(flags, " ")
	if len(s.OtherServers) == 0 {
		return msg + "; the capture holds no TCP connection"
	}
	return fmt.Sprintf("%s; the capture's servers: %s; its clients: %s", msg,
		byPackets(s.OtherServers, netip.AddrPort.String, "packet", "packets"), byPackets(s.OtherClients, netip.Addr.String, "packet", "packets"))
}

// maxOtherPorts bounds Stats.OtherPorts.
const maxOtherPorts = 32

// Read decodes the capture read from r and sends records to sink, in the
// order their bytes were captured, then a record.Summary. It returns an
// error wrapping ErrNotCapture when r is not a capture, or another error for
// an unreadable header; problems inside the capture (a file cut mid-record,
// undecodable packets) are reported as records and do not stop it. ctx
// cancellation stops reading; what was read is flushed first.
//
// sink is called from a goroutine of Read's own, never from two at once,
// and never after Read returns (see pipeline.go for the stages).
func Read(ctx context.Context, r io.Reader, opt Options, sink record.Sink) (*Stats, error) {
	// What was read is handed on before every read of the input that may
	// wait (a pipe from tcpdump, a file being followed); the later stages
	// flush the sink whenever they have nothing left to do.
	fr := &flushingReader{r: r}
	if opt.Keys == nil {
		opt.Keys = keylog.New()
	}
	if opt.Owner == nil {
		// A recording of kwatch attach names each connection's
		// processes in its Decryption Secrets Blocks.
		opt.Owner = opt.Keys.Processes
	}
	src, err := openSource(fr, opt.Keys)
	if err != nil {
		return nil, err
	}
	rd := newReader(opt.withDefaults(), src.format, src.secrets != nil)
	fr.flush = rd.q.ship
	run := rd.start(sink)
	for ctx.Err() == nil {
		data, ci, link, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() == nil { // not a read stopped by Ctrl-C
				rd.fileProblem(src, err)
			}
			break
		}
		rd.packet(run.pk, data, ci, link)
	}
	rd.finish(run, src.secrets)
	return rd.stats, nil
}

// liveShip bounds how long ReadLive keeps what it read before handing it
// on to be decoded and shown, while packets keep coming.
const liveShip = 50 * time.Millisecond

// Packets is a live packet source (pkg/live): an AF_PACKET socket, say.
type Packets interface {
	// ReadPacket returns the next packet's bytes (valid until the next
	// call), its capture info and its link type. When no packet came for
	// a while (a tenth of a second, say) it returns no bytes and no error,
	// with ci.Timestamp the time now, so that what waits on time (data
	// behind a lost segment, records waiting for keys) goes on, and what
	// was decoded is shown. It returns io.EOF when the source ended; any
	// other error ends the capture.
	ReadPacket() (data []byte, ci gopacket.CaptureInfo, link layers.LinkType, err error)
}

// ReadLive decodes the packets of a live source as Read decodes a
// capture's, as they come, and sends records to sink, then a
// record.Summary when ctx is cancelled or src ends. A src with a
// Dropped() uint64 method (the packets its kernel dropped) gets a "packets
// dropped by the kernel" problem before the summary when it is not 0. Secrets may come into
// opt.Keys while packets flow (kwatch attach): TLS records wait for them
// (up to 64 KiB a direction) and go on when they come. A read error of src
// other than io.EOF is reported as a "live capture failed"
// problem and ends the capture. Like Read, it calls sink from a goroutine of
// its own and never after it returns.
func ReadLive(ctx context.Context, src Packets, opt Options, sink record.Sink) *Stats {
	if opt.Keys == nil {
		opt.Keys = keylog.New()
	}
	opt.WaitForKeys = true
	rd := newReader(opt.withDefaults(), "live", true)
	rd.dec.open = map[*wire.Conn]uint8{}
	run := rd.start(sink)
	gen := opt.Keys.Generation()
	var shipped time.Time
	for ctx.Err() == nil {
		data, ci, link, err := src.ReadPacket()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() == nil {
				rd.Emit(&record.Problem{File: rd.opt.Name, Offset: -1, Time: time.Now(), Kind: "live capture failed",
					Detail: err.Error(), Hint: "what was captured before is decoded"})
			}
			break
		}
		idle := data == nil
		if idle {
			rd.idle(run.pk, ci.Timestamp)
		} else {
			rd.packet(run.pk, data, ci, link)
		}
		if g := opt.Keys.Generation(); g != gen {
			gen = g
			rd.q.add(op{kind: opRetry, t: rd.now, packet: rd.stats.Packets})
		}
		// What was read is handed on when no packet came, and at least
		// every liveShip while packets keep coming (a busy process: its
		// events must not wait for a batch to fill).
		if now := time.Now(); idle || now.Sub(shipped) >= liveShip {
			rd.q.ship()
			shipped = now
		}
	}
	if d, ok := src.(interface{ Dropped() uint64 }); ok {
		if n := d.Dropped(); n > 0 {
			rd.Emit(&record.Problem{File: rd.opt.Name, Offset: -1, Time: rd.now, Kind: "packets dropped by the kernel",
				Detail: fmt.Sprintf("%d packets came while the capture's ring was full: kwatch fell behind", n),
				Hint:   "capture fewer connections (--port), or give kwatch more CPU"})
		}
	}
	rd.finish(run, nil)
	return rd.stats
}

// running is a Read or ReadLive under way: its packet state and the
// goroutines of its later stages.
type running struct {
	pk *packets
	wg sync.WaitGroup
}

// start starts the decoder and printer stages, which send records to sink.
func (rd *reader) start(sink record.Sink) *running {
	run := &running{}
	run.wg.Go(func() { rd.dec.run(rd.q) })
	run.wg.Go(func() { rd.dec.out.run(sink) })
	pool := reassembly.NewStreamPool(rd)
	asm := reassembly.NewAssembler(pool)
	asm.MaxBufferedPagesPerConnection = rd.opt.MaxBufferedPerConn
	asm.MaxBufferedPagesTotal = rd.opt.MaxBufferedTotal
	run.pk = &packets{asm: asm, dec: newPacketDecoder(), badLinks: map[layers.LinkType]bool{}}
	return run
}

// withDefaults returns o with its zero bounds set to their defaults.
func (o Options) withDefaults() Options {
	if o.GapTimeout <= 0 {
		o.GapTimeout = DefaultGapTimeout
	}
	if o.MaxBufferedPerConn <= 0 {
		o.MaxBufferedPerConn = DefaultMaxBufferedPerConn
	}
	if o.MaxBufferedTotal <= 0 {
		o.MaxBufferedTotal = DefaultMaxBufferedTotal
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	return o
}

// newReader returns the reader stage of a capture in format (secretsBlocks:
// one that may hold pcapng Decryption Secrets Blocks), with its decoder
// stage and the switchboard every connection is made by.
func newReader(opt Options, format string, secretsBlocks bool) *reader {
	rd := &reader{opt: opt, stats: &Stats{Format: format}, filtered: opt.filtered(),
		live: map[*stream]struct{}{}, ended: map[uint64]*endedConn{}, ringBudget: overlapBudget, q: newOpQueue(opt.MaxFeed)}
	dec := &decoder{name: opt.Name, out: newRecQueue()}
	rd.dec = dec
	rd.httpOpt = opt.HTTP
	if rd.httpOpt.Budget == nil {
		rd.httpOpt.Budget = event.NewBudget(0)
	}
	rd.httpOpt.Locate = dec.locate
	// A capture may begin while a watch is already open.
	rd.httpOpt.MidStream = true
	// Secrets may come later than a connection needs them from a key log
	// file still being written or a pcapng block further on.
	rd.httpOpt.Keys = opt.Keys
	rd.httpOpt.NoWait = !secretsBlocks && !opt.WaitForKeys
	rd.board = wire.NewBoard(rd.httpOpt)
	return rd
}

// packets is what the reader keeps from packet to packet: the assembler,
// the layer decoder, the link types already reported as unsupported, and
// when data stuck behind lost segments was last delivered.
type packets struct {
	asm       *reassembly.Assembler
	dec       *packetDecoder
	badLinks  map[layers.LinkType]bool
	lastFlush time.Time
}

// packet decodes one packet (data, captured as ci on link) and hands its
// TCP segment to reassembly.
func (rd *reader) packet(pk *packets, data []byte, ci gopacket.CaptureInfo, link layers.LinkType) {
	rd.stats.Packets++
	rd.now = ci.Timestamp
	if ci.CaptureLength < ci.Length {
		rd.truncated(ci)
	}
	netFlow, tcp, ok, err := pk.dec.decode(link, data)
	if err != nil {
		if !pk.badLinks[link] {
			pk.badLinks[link] = true
			rd.Emit(&record.Problem{File: rd.opt.Name, Packet: rd.stats.Packets, Offset: -1, Time: ci.Timestamp,
				Kind: "unsupported link type", Detail: err.Error()})
		}
		return
	}
	if !ok {
		return
	}
	if rd.filtered {
		src := endpoint(netFlow.Src().Raw(), tcp.TransportFlow().Src().Raw())
		dst := endpoint(netFlow.Dst().Raw(), tcp.TransportFlow().Dst().Raw())
		if rd.opt.skipped(src, dst) {
			return // unseen, uncounted
		}
		if !rd.opt.mayMatch(src, dst) {
			rd.stats.other(src, dst)
			return
		}
	}
	rd.stats.TCP++
	pk.asm.AssembleWithContext(netFlow, tcp, newCaptureContext(ci, rd.stats.Packets))
	rd.closeLingering(pk.asm, ci)
	if len(rd.live) > rd.opt.MaxConnections {
		rd.dropIdle(pk.asm)
	}
	// Deliver data stuck behind a lost segment once it has waited
	// GapTimeout of capture time; never close idle connections (a quiet
	// watch is still open).
	if ci.Timestamp.Sub(pk.lastFlush) > time.Second {
		pk.lastFlush = ci.Timestamp
		rd.q.hold()
		pk.asm.FlushWithOptions(reassembly.FlushOptions{T: ci.Timestamp.Add(-rd.opt.GapTimeout)})
		rd.q.release()
	}
}

// idle is the reader's turn when no packet came: the capture's clock is at
// now, and data stuck behind a lost segment is delivered once it waited
// GapTimeout.
func (rd *reader) idle(pk *packets, now time.Time) {
	if now.Before(rd.now) {
		return
	}
	rd.now = now
	if now.Sub(pk.lastFlush) > time.Second {
		pk.lastFlush = now
		rd.q.hold()
		pk.asm.FlushWithOptions(reassembly.FlushOptions{T: now.Add(-rd.opt.GapTimeout)})
		rd.q.release()
	}
}

// finish ends every connection still open at the end of the capture, says
// what the capture as a whole lost, emits the summary and waits for the
// later stages to be done.
func (rd *reader) finish(run *running, secrets *secretsTap) {
	rd.ending = true
	rd.q.hold()
	run.pk.asm.FlushAll()
	rd.ending = false
	rd.q.release()
	if rd.stats.Truncated > maxTruncatedReports {
		rd.Emit(&record.Problem{File: rd.opt.Name, Offset: -1, Time: rd.now, Kind: "packets cut short by the snaplen",
			Detail: fmt.Sprintf("%d packets in all were cut short", rd.stats.Truncated), Hint: "capture with -s 0", Warning: true})
	}
	rd.keyProblems(secrets)
	rd.stats.Connections = rd.tcpConns
	sum := &record.Summary{Time: rd.now, Packets: rd.stats.Packets, Connections: rd.tcpConns, NoData: max(0, rd.tcpConns-rd.dataConns)}
	if rd.opt.userFiltered() {
		sum.LeftOut = &record.LeftOut{Connections: rd.stats.LeftOut}
	}
	rd.Emit(sum)
	rd.q.close()
	run.wg.Wait()
}

// keyProblems reports the key log lines that did not parse and the pcapng
// Decryption Secrets Blocks that could not be read.
func (rd *reader) keyProblems(secrets *secretsTap) {
	if secrets != nil {
		for _, d := range secrets.problems {
			rd.Emit(&record.Problem{File: rd.opt.Name, Offset: -1, Time: rd.now, Kind: "TLS secrets not read",
				Detail: d, Warning: true})
		}
	}
	_, dropped, errs, n := rd.opt.Keys.Stats()
	for _, e := range errs {
		rd.Emit(&record.Problem{File: e.Source, Offset: -1, Time: rd.now, Kind: "key log line does not parse",
			Detail: fmt.Sprintf("line %d: %s", e.Line, e.Reason), Hint: "a key log line is LABEL <64 hex digits of client random> <hex secret> (RFC 9850)", Warning: true})
	}
	if n > len(errs) {
		rd.Emit(&record.Problem{File: rd.opt.Name, Offset: -1, Time: rd.now, Kind: "key log line does not parse",
			Detail: fmt.Sprintf("%d more lines did not parse", n-len(errs)), Warning: true})
	}
	if dropped > 0 {
		rd.Emit(&record.Problem{Offset: -1, Time: rd.now, Kind: "TLS secrets not read",
			Detail: fmt.Sprintf("the key logs hold more than %d lines: the secrets of the %d connections logged first were forgotten", keylog.DefaultMaxLines, dropped),
			Hint:   "give a key log with the secrets of the connections in this capture only", Warning: true})
	}
}

// other counts a packet between a and b that the filters left out (or
// one of a connection they left out), by the lower port's endpoint and the
// other side's address, and its connection among those left out.
func (s *Stats) other(a, b netip.AddrPort) {
	if a.Port() > b.Port() {
		a, b = b, a
	}
	count(&s.OtherPorts, a.Port())
	count(&s.OtherServers, a)
	count(&s.OtherClients, b.Addr())
	if s.leftOut == nil {
		s.leftOut = map[uint64]struct{}{}
	}
	if h := tupleOf(a, b); len(s.leftOut) < maxLeftOut {
		if _, ok := s.leftOut[h]; !ok {
			s.leftOut[h] = struct{}{}
			s.LeftOut++
		}
	}
}

// tupleOf hashes a connection's two endpoints (FNV-1a), the lower port's
// first.
func tupleOf(a, b netip.AddrPort) uint64 {
	h := uint64(14695981039346656037)
	for _, e := range []netip.AddrPort{a, b} {
		ip := e.Addr().As16()
		for _, c := range append(ip[:], byte(e.Port()>>8), byte(e.Port())) {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	return h
}

// count counts k in *m, up to maxOtherPorts keys.
func count[K comparable](m *map[K]int64, k K) {
	if *m == nil {
		*m = map[K]int64{}
	}
	if _, ok := (*m)[k]; ok || len(*m) < maxOtherPorts {
		(*m)[k]++
	}
}

// captureContext passes a packet's capture info through reassembly, with
// the packet's number in the capture in its AncillaryData (see packetOf), so
// that bytes reassembly delivers later can be traced to their packet.
type captureContext struct {
	ci     gopacket.CaptureInfo
	packet int64
	anc    [1]any
}

func newCaptureContext(ci gopacket.CaptureInfo, packet int64) *captureContext {
	c := &captureContext{packet: packet}
	c.anc[0] = c // a pointer: no allocation
	if len(ci.AncillaryData) == 0 {
		ci.AncillaryData = c.anc[:]
	} else {
		ci.AncillaryData = append(ci.AncillaryData[:len(ci.AncillaryData):len(ci.AncillaryData)], c)
	}
	c.ci = ci
	return c
}

// GetCaptureInfo returns the packet's capture info (reassembly.AssemblerContext).
func (c *captureContext) GetCaptureInfo() gopacket.CaptureInfo { return c.ci }

// packetOf returns the number of the packet ci came with, 0 if unknown.
func packetOf(ci gopacket.CaptureInfo) int64 {
	for _, a := range ci.AncillaryData {
		if c, ok := a.(*captureContext); ok {
			return c.packet
		}
	}
	return 0
}

// reader is the state of one Read's first stage: it is the reassembly
// StreamFactory, and queues what the connections deliver for the decoder.
type reader struct {
	opt     Options
	httpOpt wire.Options
	// board makes every connection, with httpOpt.
	board *wire.Board
	q     *opQueue
	dec   *decoder // the HTTP decoders' sink
	stats *Stats
	now   time.Time
	nconn int // connections that carried bytes: their IDs (#1, #2, …)
	// tcpConns counts every TCP connection seen, also those that carried
	// no byte (a handshake and its close, a refused SYN) (stream.count).
	tcpConns int
	// dataConns counts those of them whose packets carried payload.
	dataConns int
	// ended holds the 4-tuples of connections that ended lately, both
	// ways round: a last ACK or RST that comes after reassembly finished
	// a connection starts a stream that is not a new connection.
	ended map[uint64]*endedConn
	// toClose lists directions to close after the current packet
	// (closeLingering); synthetic is true while one is being closed.
	toClose   []closeReq
	synthetic bool
	ending    bool // FlushAll at the end of the capture
	// live holds the streams followed now (created and not complete).
	live map[*stream]struct{}
	// dropBefore is set while dropIdle closes the connections last seen
	// before it.
	dropBefore time.Time
	// ringBudget is what overlap windows may still allocate, in bytes.
	ringBudget int64
	// filtered: Options.Port, Client or Server keep some connections only.
	filtered bool
	// listeners holds the endpoints seen listening (the server of a SYN,
	// or of a connection whose bytes showed its sides), to tell the sides
	// of a connection the capture joined later (decideRoles).
	listeners map[netip.AddrPort]bool
}

// dropIdle closes the connections idle the longest, an eighth of
// MaxConnections of them (more when several went idle at the same time),
// so that the connections followed stay under the bound; gopacket's
// assembler closes them by last-seen time.
func (rd *reader) dropIdle(asm *reassembly.Assembler) {
	seen := make([]time.Time, 0, len(rd.live))
	for s := range rd.live {
		seen = append(seen, s.lastSeen)
	}
	slices.SortFunc(seen, time.Time.Compare)
	k := len(seen) - rd.opt.MaxConnections + rd.opt.MaxConnections/8
	cutoff := seen[min(k, len(seen))-1].Add(time.Nanosecond)
	before := len(rd.live)
	rd.dropBefore = cutoff
	rd.q.hold()
	// The assembler closes only connections that wait for no missing
	// segment: first with the usual wait for those (GapTimeout), and if
	// that did not free enough (connections kept open by segments
	// received out of order, a flood can send those too), giving up on
	// the missing segments of the connections being dropped.
	asm.FlushWithOptions(reassembly.FlushOptions{T: rd.now.Add(-rd.opt.GapTimeout), TC: cutoff})
	if before-len(rd.live) < k {
		asm.FlushWithOptions(reassembly.FlushOptions{T: cutoff, TC: cutoff})
	}
	rd.dropBefore = time.Time{}
	rd.q.release()
	rd.Emit(&record.Problem{File: rd.opt.Name, Packet: rd.stats.Packets, Offset: -1, Time: rd.now,
		Kind: "too many connections",
		Detail: fmt.Sprintf("more than %d TCP connections open at once; the %d idle the longest are no longer followed",
			rd.opt.MaxConnections, before-len(rd.live)),
		Hint: "their bodies end here and later packets of theirs start new connections; capture fewer connections (a port filter)"})
}

// gapContext describes the gap a stream is reporting, for locate.
type gapContext struct {
	packet int64 // the packet after the gap, 0 if unknown
	snap   bool  // packets of this direction were cut short by the snaplen
}

// Emit queues a record the reader made, in its place among the bytes the
// connections delivered.
func (rd *reader) Emit(r record.Record) {
	rd.q.add(op{kind: opEmit, rec: r, packet: rd.stats.Packets})
}

// flushingReader calls flush, when set, before each read of r.
type flushingReader struct {
	r     io.Reader
	flush func()
}

// Read flushes, then reads from r.
func (f *flushingReader) Read(p []byte) (int, error) {
	if f.flush != nil {
		f.flush()
	}
	return f.r.Read(p)
}

func (rd *reader) truncated(ci gopacket.CaptureInfo) {
	rd.stats.Truncated++
	if rd.stats.Truncated > maxTruncatedReports {
		return
	}
	rd.Emit(&record.Problem{File: rd.opt.Name, Packet: rd.stats.Packets, Offset: -1, Time: ci.Timestamp,
		Kind:   "packet cut short by the snaplen",
		Detail: fmt.Sprintf("captured %d of %d bytes", ci.CaptureLength, ci.Length),
		Hint:   "capture with -s 0", Warning: true})
}

func (rd *reader) fileProblem(src *source, err error) {
	kind := "capture file unreadable"
	hint := ""
	if errors.Is(err, io.ErrUnexpectedEOF) {
		kind = "capture file ends mid-record"
		hint = "the capture was cut short (was tcpdump killed?); every complete packet was decoded"
	}
	// Locate the bad record itself when the format allows (pcap);
	// otherwise say how far the file was read.
	off, detail := src.offset(), err.Error()
	if src.gz && errors.Is(err, io.ErrUnexpectedEOF) && src.record() == off {
		// The gzip stream stops between two records: what is missing is
		// gzip's own end (or a member's), not part of a packet.
		rd.Emit(&record.Problem{File: rd.opt.Name, Packet: rd.stats.Packets + 1, Where: "file", Offset: off,
			Time: rd.now, Kind: "capture file ends without its gzip trailer",
			Detail: "the gzip data stops after a complete record, before its CRC and length",
			Hint:   "the file was cut short (was gzip or the copy interrupted?); every packet in it was decoded", Warning: true})
		return
	}
	if rec := src.record(); rec >= 0 {
		off = rec
		detail = fmt.Sprintf("%v; the record starts at this offset and the file ends %d bytes into it", err, src.offset()-rec)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			detail = fmt.Sprintf("%v; the record starts at this offset", err)
		}
	}
	rd.Emit(&record.Problem{File: rd.opt.Name, Packet: rd.stats.Packets + 1, Where: "file", Offset: off,
		Time: rd.now, Kind: kind, Detail: detail, Hint: hint})
}

// New creates the Stream of a new TCP connection (reassembly.StreamFactory).
func (rd *reader) New(netFlow, tcpFlow gopacket.Flow, tcp *layers.TCP, ac reassembly.AssemblerContext) reassembly.Stream {
	s := &stream{rd: rd, net: netFlow, tcp: tcpFlow}
	s.half[0].overlap.budget = &rd.ringBudget
	s.half[1].overlap.budget = &rd.ringBudget
	rd.live[s] = struct{}{}
	// The gopacket direction "client to server" is the sender of the first
	// packet seen. A SYN without ACK confirms it; a SYN+ACK reverses it.
	switch {
	case tcp.SYN && !tcp.ACK:
		s.clientDir, s.known = reassembly.TCPDirClientToServer, true
	case tcp.SYN && tcp.ACK:
		s.clientDir, s.known = reassembly.TCPDirServerToClient, true
	}
	if s.known {
		s.rolesKnown()
	}
	return s
}

// closeReq asks to close one direction of a connection in the assembler:
// a reset ended the connection, or a leftover packet started a stream for a
// connection that had ended (stream.linger).
type closeReq struct {
	net, tcp gopacket.Flow // the direction's flows, as its packets carry them
	seq      uint32        // where the direction's next byte would be
}

// closeLingering closes the directions queued by the streams, once the
// assembler is done with the packet that made them ask: gopacket closes
// only the direction that sent a RST, and keeps a connection (its memory,
// its 4-tuple, which a new connection may reuse) until both are closed. A
// synthetic RST at the direction's next sequence number closes it.
func (rd *reader) closeLingering(asm *reassembly.Assembler, ci gopacket.CaptureInfo) {
	for len(rd.toClose) > 0 {
		reqs := rd.toClose
		rd.toClose = nil
		for _, r := range reqs {
			var hdr [20]byte
			copy(hdr[0:2], r.tcp.Src().Raw())
			copy(hdr[2:4], r.tcp.Dst().Raw())
			binary.BigEndian.PutUint32(hdr[4:8], r.seq)
			hdr[12] = 5 << 4 // data offset: 5 words
			hdr[13] = 0x04   // RST
			var tcp layers.TCP
			if tcp.DecodeFromBytes(hdr[:], gopacket.NilDecodeFeedback) != nil {
				continue
			}
			rd.synthetic = true
			asm.AssembleWithContext(r.net, &tcp, newCaptureContext(ci, rd.stats.Packets))
			rd.synthetic = false
		}
	}
}

// tupleHash identifies a connection's 4-tuple, the same both ways round
// (gopacket's FastHash is symmetric). Two tuples may share one: then a
// leftover FIN or RST of one may go uncounted as a connection of its own.
func tupleHash(net, tcp gopacket.Flow) uint64 {
	return net.FastHash()*0x9e3779b97f4a7c15 ^ tcp.FastHash()
}

// maxEnded bounds reader.ended: past it the set is emptied, and the leftover
// packets of a connection that ended long ago may count as one more.
const maxEnded = 4096

// endedConn is what is remembered of a connection that ended, for the
// packets that come after its end.
type endedConn struct {
	rec     *record.Conn // nil when it carried no byte
	reset   string       // who reset it ("client", "server", ""): not reset
	resetAt time.Time
	warned  bool // bytes after the reset were reported
}

// markEnded remembers that the connection net/tcp ended.
func (rd *reader) markEnded(net, tcp gopacket.Flow, e *endedConn) {
	if len(rd.ended) >= maxEnded {
		clear(rd.ended)
	}
	rd.ended[tupleHash(net, tcp)] = e
}

// endpoint builds an address:port from a flow's endpoint bytes.
func endpoint(ip, port []byte) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	var p uint16
	if len(port) == 2 {
		p = uint16(port[0])<<8 | uint16(port[1])
	}
	return netip.AddrPortFrom(a.Unmap(), p)
}
