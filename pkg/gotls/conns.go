package gotls

// Which TLS connections a process uses: entry uprobes on crypto/tls's
// (*Conn).Read and (*Conn).Write that report the *Conn receiver, so that
// the connection's state can be read from the process (ReadConnState) when
// its handshake came before the probe.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
)

// The functions the connections probe is placed on: crypto/tls's
// (*Conn).Read(b []byte) (int, error) and (*Conn).Write(b []byte) (int,
// error), called for every read and write of application data (an HTTP/2
// client's read loop calls Read for every frame that arrives; its writes
// go through Write). Neither is ever inlined: both hold a defer, which Go's
// inliner refuses whatever the budget, PGO included ("cannot inline
// (*Conn).Read: unhandled op DEFER", go build -gcflags=crypto/tls=-m=2,
// Go 1.26), so every call enters the function's own code; and nearly all
// come through an interface (net.Conn, io.Reader), which calls the
// function itself.
const (
	// ConnReadFunc is crypto/tls.(*Conn).Read.
	ConnReadFunc = "crypto/tls.(*Conn).Read"
	// ConnWriteFunc is crypto/tls.(*Conn).Write.
	ConnWriteFunc = "crypto/tls.(*Conn).Write"
)

// ConnReportInterval is how often, at most, the connections probe reports
// one connection: a connection used again within it is not reported again
// (a BPF LRU hash keyed by process and *Conn pointer holds the time of its
// last report). One second: a busy connection costs one record a second,
// while a connection that was freed and whose memory now holds a new
// crypto/tls.Conn at the same address (Go's allocator reuses a size class's
// slots quickly) is reported within a second of its first use after that
// second. A report is a hint to read the state again, not a new
// connection: ReadConnState's secrets and addresses tell whether the
// pointer still holds the same connection, and a changed secret at the
// same pointer is a KeyUpdate.
const ConnReportInterval = time.Second

// ConnRingBufferSize is the size of the BPF ring buffer the connection
// reports wait in until ReadConn takes them, in bytes: 64 KiB, about 2,000
// reports (24 bytes each, plus the ring's 8-byte header). A report that
// finds it full is dropped and counted (ConnsLost), and that connection is
// reported at its next use. On kernels without ring buffers a perf event
// array is used instead, connPerfBufferSize bytes per CPU.
const ConnRingBufferSize = 64 << 10

const connPerfBufferSize = 16 << 10

// connsSeenEntries bounds the LRU hash of connections reported: 8,192
// (process, *Conn) pairs, 16-byte keys and 8-byte values. When more are in
// use the least recently reported are forgotten, and reported again at
// their next use.
const connsSeenEntries = 8192

// connKnown is the conns_seen value of a connection ConnKnown was told of:
// no time of a report, which the program compares as unsigned, can be it.
const connKnown = ^uint64(0)

// ConnUse is one report of the connections probe: a thread of a process
// entered (*Conn).Read or (*Conn).Write of the crypto/tls.Conn at Conn.
type ConnUse struct {
	// PID and TID are the process (thread group) and the thread, as
	// bpf_get_current_pid_tgid gives them: in the initial PID namespace.
	PID, TID uint32
	// Conn is the address of the crypto/tls.Conn in the process (the
	// method's receiver, first integer argument register by Go's
	// internal ABI: RAX on amd64, X0 on arm64; abi-internal.md). Go's
	// garbage collector does not move heap objects, so it stays the
	// Conn's address for the connection's life; after that it may hold
	// another's (see ConnReportInterval).
	Conn uint64
	// Write says the call was (*Conn).Write; else it was (*Conn).Read.
	Write bool
}

// The connection record, in the host's byte order:
//
//	offset  size
//	     0     8  bpf_get_current_pid_tgid(): tgid<<32 | thread id
//	     8     8  the *Conn receiver
//	    16     4  connOpRead or connOpWrite
//	    20     4  0
const (
	connRecPIDTGID = 0
	connRecConn    = 8
	connRecOp      = 16
	connRecordSize = 24
	connOpRead     = 1
	connOpWrite    = 2
)

// Where the connection program keeps things on its stack (offsets from
// R10, the frame pointer): the map key (tgid as 8 bytes, then the *Conn),
// the map value (the report's time), the perf path's record and the
// counters map's key.
const (
	connKey     = -16
	connValue   = -24
	connRecord  = connValue - connRecordSize // -48
	connCounter = connRecord - 8             // -56
)

// Names the connection program's map references resolve against.
const (
	mapConnsSeen   = "conns_seen"
	mapConnsEvents = "conns_events"
)

// connWakeAt is how full the connection ring gets, in bytes, before a
// report wakes ReadConn; below it ReadConn finds reports when it next looks
// (pollInterval, 20 ms).
const connWakeAt = ConnRingBufferSize / 4

// connProgram returns the instructions of the connections probe for arch's
// registers, writing to out, reporting op (connOpRead or connOpWrite). On
// entry it takes the receiver (argRegs.recv), skips a nil one, and looks
// up (tgid, receiver) in the conns_seen LRU hash: present with a time less
// than ConnReportInterval ago (bpf_ktime_get_ns, CLOCK_MONOTONIC), or
// marked known (ConnKnown), it returns; otherwise it stores the time and
// writes a record. A record that
// finds its buffer full is counted in counters[counterConnLost] and the
// key deleted, so that the next use reports again. Helper semantics: the
// kernel's include/uapi/linux/bpf.h.
func connProgram(arch string, out output, op int32) (asm.Instructions, error) {
	r, err := regsFor(arch)
	if err != nil {
		return nil, err
	}
	// R6 the context, R7 pid_tgid, R8 the receiver, R9 the time.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R8, asm.R6, r.recv, asm.DWord),
		asm.JEq.Imm(asm.R8, 0, "exit"),
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.RSh.Imm(asm.R1, 32),
		asm.StoreMem(asm.RFP, connKey, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, connKey+8, asm.R8, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapConnsSeen),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, connKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "report"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		// connKnown (all ones, the immediate sign-extended): never
		// reported again (ConnKnown).
		asm.JEq.Imm(asm.R1, -1, "exit"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.LoadImm(asm.R3, int64(ConnReportInterval), asm.DWord),
		asm.JLT.Reg(asm.R2, asm.R3, "exit"),
		asm.StoreMem(asm.RFP, connValue, asm.R9, asm.DWord).WithSymbol("report"),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapConnsSeen),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, connKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, connValue),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
	}
	switch out {
	case toRing:
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, 0).WithReference(mapConnsEvents),
			asm.Mov.Imm(asm.R2, connRecordSize),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "lost"),
			asm.StoreMem(asm.R0, connRecPIDTGID, asm.R7, asm.DWord),
			asm.StoreMem(asm.R0, connRecConn, asm.R8, asm.DWord),
			asm.StoreImm(asm.R0, connRecOp, int64(op), asm.Word),
			asm.StoreImm(asm.R0, connRecOp+4, 0, asm.Word),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.LoadMapPtr(asm.R1, 0).WithReference(mapConnsEvents),
			asm.Mov.Imm(asm.R2, rbAvailData),
			asm.FnRingbufQuery.Call(),
			asm.Mov.Imm(asm.R2, rbNoWakeup),
			asm.JLE.Imm(asm.R0, connWakeAt, "submit"),
			asm.Mov.Imm(asm.R2, rbForceWakeup),
			asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("submit"),
			asm.FnRingbufSubmit.Call(),
			asm.Ja.Label("exit"),
		)
	case toPerf:
		insns = append(insns,
			asm.StoreMem(asm.RFP, connRecord+connRecPIDTGID, asm.R7, asm.DWord),
			asm.StoreMem(asm.RFP, connRecord+connRecConn, asm.R8, asm.DWord),
			asm.StoreImm(asm.RFP, connRecord+connRecOp, int64(op), asm.Word),
			asm.StoreImm(asm.RFP, connRecord+connRecOp+4, 0, asm.Word),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, 0).WithReference(mapConnsEvents),
			asm.LoadImm(asm.R3, 0xffffffff, asm.DWord), // BPF_F_CURRENT_CPU
			asm.Mov.Reg(asm.R4, asm.RFP),
			asm.Add.Imm(asm.R4, connRecord),
			asm.Mov.Imm(asm.R5, connRecordSize),
			asm.FnPerfEventOutput.Call(),
			asm.JNE.Imm(asm.R0, 0, "lost"),
			asm.Ja.Label("exit"),
		)
	default:
		return nil, fmt.Errorf("output %d", out)
	}
	insns = append(insns,
		// Not reported: forgotten, so that the next use reports.
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapConnsSeen).WithSymbol("lost"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, connKey),
		asm.FnMapDeleteElem.Call(),
		asm.StoreImm(asm.RFP, connCounter, counterConnLost, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, connCounter),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapCounters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	return insns, nil
}

// decodeConn reads a record the connection program wrote.
func decodeConn(b []byte) (ConnUse, error) {
	if len(b) < connRecordSize {
		return ConnUse{}, fmt.Errorf("connection record of %d bytes, want %d", len(b), connRecordSize)
	}
	bo := binary.NativeEndian
	pidTGID, conn, op := bo.Uint64(b[connRecPIDTGID:]), bo.Uint64(b[connRecConn:]), bo.Uint32(b[connRecOp:])
	if conn == 0 || op != connOpRead && op != connOpWrite {
		return ConnUse{}, fmt.Errorf("connection record with receiver %#x, operation %d", conn, op)
	}
	return ConnUse{PID: uint32(pidTGID >> 32), TID: uint32(pidTGID), Conn: conn, Write: op == connOpWrite}, nil
}

// connProbe is the loaded connections probe: its two programs (Read,
// Write), its maps and its buffer's reading end.
type connProbe struct {
	read, write *ebpf.Program
	seen        *ebpf.Map
	events      *ebpf.Map
	buf         *buffer
}

// loadConns loads the connections probe, writing to the same kind of
// buffer as p's. p.mu must be held.
func (p *Probe) loadConns() (*connProbe, error) {
	if c := p.conns.Load(); c != nil {
		return c, nil
	}
	events := &ebpf.MapSpec{Name: "gotls_conns", Type: ebpf.RingBuf, MaxEntries: ConnRingBufferSize}
	if p.out == toPerf {
		events = &ebpf.MapSpec{Name: "gotls_conns", Type: ebpf.PerfEventArray}
	}
	progs := map[string]*ebpf.ProgramSpec{}
	for name, op := range map[string]int32{"read": connOpRead, "write": connOpWrite} {
		insns, err := connProgram(runtime.GOARCH, p.out, op)
		if err != nil {
			return nil, err
		}
		progs[name] = &ebpf.ProgramSpec{
			Name:         "gotls_conn_" + name,
			Type:         ebpf.Kprobe,
			Instructions: insns,
			License:      "Dual MIT/GPL",
		}
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			mapConnsSeen:   {Name: "gotls_conns_seen", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 8, MaxEntries: connsSeenEntries},
			mapConnsEvents: events,
		},
		Programs: progs,
	}
	// The counters are the key probe's: one map for Lost, Skipped and
	// ConnsLost.
	spec.Maps[mapCounters] = countersSpec()
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{mapCounters: p.counters}})
	if err != nil {
		return nil, bpfError("loading the connections program", err)
	}
	c := &connProbe{
		read: coll.DetachProgram("read"), write: coll.DetachProgram("write"),
		seen: coll.DetachMap(mapConnsSeen), events: coll.DetachMap(mapConnsEvents),
		buf: &buffer{what: "connections"},
	}
	coll.Close()
	if p.out == toRing {
		c.buf.ring, err = ringbuf.NewReader(c.events)
	} else {
		c.buf.perf, err = perf.NewReader(c.events, connPerfBufferSize)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("opening the connections probe's buffer: %w", err)
	}
	c.buf.deadline.Store(p.connDeadline.Load())
	p.conns.Store(c)
	return c, nil
}

func (c *connProbe) close() error {
	return errors.Join(c.buf.close(), c.read.Close(), c.write.Close(), c.seen.Close(), c.events.Close())
}

// AttachConns places the connections probe on the entries of ConnReadFunc
// and ConnWriteFunc in the executable at path (found as Find finds
// writeKeyLog: symbol table, else .gopclntab), for process pid (0: every
// process of the executable), and returns where the two are, in that
// order. path and pid are read as Attach reads them ("" for
// /proc/PID/exe). From then on ReadConn reports each connection the
// process reads or writes, at most once per ConnReportInterval.
//
// The probe is loaded by the first call: two BPF programs, an LRU hash of
// 8,192 entries and a ring buffer of ConnRingBufferSize bytes (a perf event
// array where Open chose one). Entry uprobes only. Attaching the same file
// and pid again does nothing more. Errors are Find's, ErrUnsupportedArch,
// os.ErrClosed after Close, and the kernel's.
func (p *Probe) AttachConns(path string, pid int) ([]Location, error) {
	path, err := targetPath(path, pid)
	if err != nil {
		return nil, err
	}
	locs, err := findFuncs(path, ConnReadFunc, ConnWriteFunc)
	if err != nil {
		return nil, err
	}
	key, err := target(locs[0], pid)
	if err != nil {
		return locs, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return locs, fmt.Errorf("attaching %s: %w", path, os.ErrClosed)
	}
	c, err := p.loadConns()
	if err != nil {
		return locs, err
	}
	key.fn = probeConnRead
	if err := p.uprobe(key, locs[0], c.read); err != nil {
		return locs, err
	}
	key.fn = probeConnWrite
	return locs, p.uprobe(key, locs[1], c.write)
}

// ReadConn blocks until the connections probe has a report, and returns
// it, up to 20 ms (pollInterval) after the call was made, as Read does for
// secrets. The same connection comes again after ConnReportInterval if it
// is still used, and rarely twice within it (two threads entering at the
// same moment). Call AttachConns first: before it, ReadConn returns an
// error at once. After Close it returns an error wrapping os.ErrClosed;
// past a deadline (SetConnDeadline), one wrapping os.ErrDeadlineExceeded.
// ReadConn may be called while Read is, from another goroutine, but from
// one goroutine at a time.
func (p *Probe) ReadConn() (ConnUse, error) {
	c := p.conns.Load()
	if c == nil {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return ConnUse{}, fmt.Errorf("reading connections: the probe is closed: %w", os.ErrClosed)
		}
		return ConnUse{}, errors.New("reading connections: no connections probe: call AttachConns first")
	}
	for {
		raw, err := c.buf.read()
		if err != nil {
			return ConnUse{}, err
		}
		u, err := decodeConn(raw)
		if err != nil {
			p.bad.Add(1)
			continue
		}
		return u, nil
	}
}

// SetConnDeadline is SetDeadline for ReadConn: past t a blocked ReadConn,
// or a later one, returns an error wrapping os.ErrDeadlineExceeded; the
// zero time removes the deadline.
func (p *Probe) SetConnDeadline(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connDeadline.Store(deadlineNanos(t))
	if c := p.conns.Load(); c != nil {
		c.buf.deadline.Store(deadlineNanos(t))
	}
}

// ConnsLost returns how many connection reports the probe could not hand
// on because its buffer was full (ReadConn did not keep up). Each such
// connection is reported at its next use.
func (p *Probe) ConnsLost() uint64 { return p.counter(counterConnLost) }

// ConnKnown tells the connections probe that the crypto/tls.Conn at conn in
// process pid (as ConnUse gave them) needs no more reports: the program
// returns at its lookup from then on, before it reads the time or writes a
// record. The mark lives in the LRU hash of connections reported
// (connsSeenEntries): forgotten under pressure, the connection is reported
// again at its next use. An error when the probe is not loaded or closed.
func (p *Probe) ConnKnown(pid uint32, conn uint64) error {
	c := p.conns.Load()
	if c == nil {
		return errors.New("no connections probe: call AttachConns first")
	}
	var key [16]byte
	binary.NativeEndian.PutUint64(key[:], uint64(pid))
	binary.NativeEndian.PutUint64(key[8:], conn)
	return c.seen.Put(key[:], connKnown)
}

// DetachConns removes the connections probe's uprobes (on ConnReadFunc and
// ConnWriteFunc) placed for process pid, whatever the file (pid 0: those
// placed for every process of a file), and returns how many it removed:
// the process's calls of (*Conn).Read and Write no longer enter the kernel.
// The program and its maps stay loaded for a later AttachConns. Errors are
// the kernel's, for links it could not close (they are forgotten all the
// same).
func (p *Probe) DetachConns(pid int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	n := 0
	for k, l := range p.links {
		if k.pid == pid && (k.fn == probeConnRead || k.fn == probeConnWrite) {
			errs = append(errs, l.Close())
			delete(p.links, k)
			n++
		}
	}
	return n, errors.Join(errs...)
}

// ConnProbes returns how many uprobes of the connections probe are in
// place (two for each process, or file, AttachConns placed them for).
func (p *Probe) ConnProbes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k := range p.links {
		if k.fn == probeConnRead || k.fn == probeConnWrite {
			n++
		}
	}
	return n
}
