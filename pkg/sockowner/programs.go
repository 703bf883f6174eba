package sockowner

// The BPF programs, written with cilium/ebpf's asm package (no C compiler):
// four that watch TCP sockets open, listen and close, and the socket filter
// a packet capture runs. Helper semantics: include/uapi/linux/bpf.h.

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// The record each program hands to user space (the events ring buffer),
// in the host's byte order but for the ports:
//
//	offset  size
//	     0     8  bpf_get_current_pid_tgid(): tgid<<32 | thread id (close,
//	              unlisten: the tgid the connection or listener was kept
//	              for, thread id 0)
//	     8     4  the network namespace's inode number
//	    12     1  kind (Kind)
//	    13     1  flags: 1 the process was found by its executable
//	    14     2  the socket's address family (AF_INET 2, AF_INET6 10)
//	    16    16  bpf_get_current_comm() (zero for close and unlisten)
//	    32    16  the local address, IPv6 or IPv4-mapped (RFC 4291 §2.5.5.2)
//	    48    16  the remote address, so
//	    64     2  the local port, network byte order
//	    66     2  the remote port, network byte order
//	    68     4  0
//	    72     8  bpf_ktime_get_ns() (CLOCK_MONOTONIC)
const (
	evPIDTGID  = 0
	evNetNS    = 8
	evKind     = 12
	evFlags    = 13
	evFamily   = 14
	evComm     = 16
	evLocal    = 32
	evRemote   = 48
	evLPort    = 64
	evRPort    = 66
	evTime     = 72
	recordSize = 80
)

// The connections map's key: one direction of a connection, as a packet
// going that way shows it.
//
//	offset  size
//	     0     4  the network namespace's inode number
//	     4     2  source port, network byte order
//	     6     2  destination port, network byte order
//	     8    16  source address, IPv6 or IPv4-mapped
//	    24    16  destination address, so
//
// and its value: the tgid it is kept for (4 bytes), connFlags (4), and when
// the connection closed (8: bpf_ktime_get_ns, 0 while open).
const (
	kNetNS    = 0
	kSPort    = 4
	kDPort    = 6
	kSrc      = 8
	kDst      = 24
	keySize   = 40
	vTGID     = 0
	vFlags    = 4
	vClosed   = 8
	valueSize = 16
)

// connFlags say how a connection came into the connections map.
const (
	connClient = 1 // the followed process connected (tcp_connect)
	connServer = 2 // the followed process accepted it (inet_csk_accept)
	connProc   = 4 // user space put it there (AddConn: open before)
	// connLocalSrc marks the direction whose source is the process's
	// own end (the key local → remote).
	connLocalSrc = 8
)

// The ports map's key: a listening port in a network namespace (0: in any,
// which the connect program asks), network byte order, 2 bytes of padding.
// Its value is the tgid of the followed process that listens.
const portKeySize = 8

// The exes map's key: a file's device (the kernel's dev_t: major<<20 |
// minor, include/linux/kdev_t.h), 4 bytes of padding, its inode number.
const exeKeySize = 16

// Slots of the config array (uint64 each).
const (
	configFlags = 0 // bit 0: the exes map holds a file
	numConfig   = 1
	cfgExes     = 1
)

// Slots of the counters array (uint64 each).
const (
	counterLost = 0 // a record found the ring buffer full
	counterFull = 1 // the connections or ports map was full
	numCounters = 2
)

// Map names the programs' references resolve against.
const (
	mapEvents   = "events"
	mapConns    = "conns"
	mapPorts    = "ports"
	mapPIDs     = "pids"
	mapExes     = "exes"
	mapConfig   = "config"
	mapCounters = "counters"
)

// TCP states (include/net/tcp_states.h) and address families
// (include/linux/socket.h).
const (
	tcpClose  = 7
	tcpListen = 10
	afInet    = 2
	afInet6   = 10
)

// Where the programs keep things on their stack (offsets from R10, the
// frame pointer; every slot aligned to 8, as the verifier wants stack
// accesses aligned to their size).
const (
	stCommon = -maxCommon            // the copy of struct sock_common
	stEvent  = stCommon - recordSize // the record
	stKeyA   = stEvent - keySize     // key: local → remote
	stKeyB   = stKeyA - keySize      // key: remote → local
	stValue  = stKeyB - valueSize    // a connections map value
	stTGID   = stValue - 8           // the pids map key (4 bytes)
	stExe    = stTGID - exeKeySize   // the exes map key
	stPort   = stExe - portKeySize   // the ports map key
	stPtr    = stPort - 8            // a pointer read from the kernel
	stSmall  = stPtr - 8             // an array index, a pids value
	// stInum is where the network namespace's inode number is read to.
	stInum = stPtr
)

// The stack is 512 bytes (MAX_BPF_STACK): a larger frame does not compile.
var _ [512 + stSmall]struct{}

// builder writes one program, handing out labels unique within it.
type builder struct {
	insns asm.Instructions
	n     int
	o     *offsets
	// pending is a label for the next instruction added (at).
	pending string
	// scalarSock says that the socket pointer (R7) is a plain number
	// (a raw tracepoint's argument), which readSock may add offsets to;
	// a sock_ops program's is a checked socket pointer.
	scalarSock bool
}

// add appends instructions, the first one labelled with a pending label.
func (b *builder) add(in ...asm.Instruction) {
	if len(in) == 0 {
		return
	}
	if b.pending != "" {
		if in[0].Symbol() != "" {
			b.nop()
		} else {
			in[0] = in[0].WithSymbol(b.pending)
			b.pending = ""
		}
	}
	b.insns = append(b.insns, in...)
}

// nop adds a jump to the next instruction, carrying the pending label.
func (b *builder) nop() {
	ja := asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Ja)}
	b.insns = append(b.insns, ja.WithSymbol(b.pending))
	b.pending = ""
}

// label returns a label not used before in this program.
func (b *builder) label(what string) string {
	b.n++
	return fmt.Sprintf("%s_%d", what, b.n)
}

// at labels the next instruction added.
func (b *builder) at(label string) {
	if b.pending != "" {
		b.nop()
	}
	b.pending = label
}

// zero writes 0 to n bytes of the stack from off (both multiples of 8).
func (b *builder) zero(off int16, n int) {
	for i := 0; i < n; i += 8 {
		b.add(storeImm(asm.RFP, off+int16(i), 0, asm.DWord))
	}
}

// stackPtr sets reg to R10+off.
func stackPtr(reg asm.Register, off int16) asm.Instructions {
	return asm.Instructions{asm.Mov.Reg(reg, asm.RFP), asm.Add.Imm(reg, int32(off))}
}

// readSock copies struct sock_common of the socket in reg sk (R7) to the
// stack and fills the record's family, addresses, ports and network
// namespace from it; a socket that is neither AF_INET nor AF_INET6, or
// that cannot be read, goes to exit. An AF_INET6 socket whose remote
// address is IPv4-mapped carries IPv4 (tcp_v6_connect hands it to
// tcp_v4_connect): its IPv4 fields are read, which are set by then, where
// skc_v6_rcv_saddr may not be yet.
func (b *builder) readSock(exit string) {
	o := b.o
	v4, v6, ports, nonet := b.label("v4"), b.label("v6"), b.label("ports"), b.label("nonet")
	b.add(stackPtr(asm.R1, stCommon)...)
	b.add(
		asm.Mov.Imm(asm.R2, int32(o.commonSize)),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, exit),
		asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(o.family.off), asm.Half),
		asm.StoreMem(asm.RFP, stEvent+evFamily, asm.R1, asm.Half),
		asm.JEq.Imm(asm.R1, afInet, v4),
		asm.JNE.Imm(asm.R1, afInet6, exit),
	)
	// IPv4-mapped: ::ffff:a.b.c.d, the words 0, 0, 0x0000ffff (network
	// order; 0xffff0000 read as a little-endian word).
	d := stCommon + int16(o.v6daddr.off)
	b.add(
		asm.LoadMem(asm.R1, asm.RFP, d, asm.Word),
		asm.JNE.Imm(asm.R1, 0, v6),
		asm.LoadMem(asm.R1, asm.RFP, d+4, asm.Word),
		asm.JNE.Imm(asm.R1, 0, v6),
		asm.LoadMem(asm.R1, asm.RFP, d+8, asm.Word),
		asm.JNE.Imm32(asm.R1, mappedWord, v6),
		asm.Ja.Label(v4),
	)
	b.at(v6)
	for i := int16(0); i < 16; i += 4 {
		b.add(
			asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(o.v6rcvSaddr.off)+i, asm.Word),
			asm.StoreMem(asm.RFP, stEvent+evLocal+i, asm.R1, asm.Word),
			asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(o.v6daddr.off)+i, asm.Word),
			asm.StoreMem(asm.RFP, stEvent+evRemote+i, asm.R1, asm.Word),
		)
	}
	b.add(asm.Ja.Label(ports))
	b.at(v4)
	for _, a := range []struct {
		ev  int16
		off uint32
	}{{evLocal, o.rcvSaddr.off}, {evRemote, o.daddr.off}} {
		b.add(
			storeImm(asm.RFP, stEvent+a.ev, 0, asm.DWord),
			storeImm(asm.RFP, stEvent+a.ev+8, mappedWord, asm.Word),
			asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(a.off), asm.Word),
			asm.StoreMem(asm.RFP, stEvent+a.ev+12, asm.R1, asm.Word),
		)
	}
	b.at(ports)
	if b.scalarSock {
		// The local port from inet_sock's inet_sport (network order):
		// as the socket closes, __inet_put_port has zeroed skc_num
		// before the state becomes TCP_CLOSE.
		b.add(
			asm.Mov.Reg(asm.R3, asm.R7),
			asm.Add.Imm(asm.R3, int32(o.sport.off)),
		)
		b.add(stackPtr(asm.R1, stEvent+evLPort)...)
		b.add(
			asm.Mov.Imm(asm.R2, 2),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, exit),
		)
	} else {
		// skc_num, the local port in the host's order (a sock_ops
		// program may do no arithmetic on its socket pointer to reach
		// inet_sport; skc_num is set at its three operations).
		b.add(
			asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(o.num.off), asm.Half),
			asm.HostTo(asm.BE, asm.R1, asm.Half),
			asm.StoreMem(asm.RFP, stEvent+evLPort, asm.R1, asm.Half),
		)
	}
	b.add(
		// The remote port: skc_dport, in network order.
		asm.LoadMem(asm.R1, asm.RFP, stCommon+int16(o.dport.off), asm.Half),
		asm.StoreMem(asm.RFP, stEvent+evRPort, asm.R1, asm.Half),
		// The network namespace: skc_net.net->ns.inum.
		asm.LoadMem(asm.R3, asm.RFP, stCommon+int16(o.net.off), asm.DWord),
		asm.JEq.Imm(asm.R3, 0, nonet),
		asm.Add.Imm(asm.R3, int32(o.netInum.off)),
	)
	b.add(stackPtr(asm.R1, stInum)...)
	b.add(
		asm.Mov.Imm(asm.R2, 4),
		storeImm(asm.RFP, stInum, 0, asm.DWord),
		asm.FnProbeReadKernel.Call(),
		asm.LoadMem(asm.R1, asm.RFP, stInum, asm.Word),
		asm.StoreMem(asm.RFP, stEvent+evNetNS, asm.R1, asm.Word),
	)
	b.at(nonet)
}

// mappedWord is the third 32-bit word of an IPv4-mapped IPv6 address
// (bytes 00 00 ff ff) as a little-endian load reads it.
const mappedWord = -0x10000 // 0xffff0000

// keys builds the connections map's two keys of the record's connection:
// stKeyA local → remote, stKeyB remote → local.
func (b *builder) keys() {
	for _, k := range []struct {
		key          int16
		src, dst     int16
		sport, dport int16
	}{{stKeyA, evLocal, evRemote, evLPort, evRPort}, {stKeyB, evRemote, evLocal, evRPort, evLPort}} {
		b.add(
			asm.LoadMem(asm.R1, asm.RFP, stEvent+evNetNS, asm.Word),
			asm.StoreMem(asm.RFP, k.key+kNetNS, asm.R1, asm.Word),
			asm.LoadMem(asm.R1, asm.RFP, stEvent+k.sport, asm.Half),
			asm.StoreMem(asm.RFP, k.key+kSPort, asm.R1, asm.Half),
			asm.LoadMem(asm.R1, asm.RFP, stEvent+k.dport, asm.Half),
			asm.StoreMem(asm.RFP, k.key+kDPort, asm.R1, asm.Half),
		)
		for i := int16(0); i < 16; i += 8 {
			b.add(
				asm.LoadMem(asm.R1, asm.RFP, stEvent+k.src+i, asm.DWord),
				asm.StoreMem(asm.RFP, k.key+kSrc+i, asm.R1, asm.DWord),
				asm.LoadMem(asm.R1, asm.RFP, stEvent+k.dst+i, asm.DWord),
				asm.StoreMem(asm.RFP, k.key+kDst+i, asm.R1, asm.DWord),
			)
		}
	}
}

// listenKey writes the ports map's key for the event's socket at stPort:
// its network namespace and local port, as a listening socket is kept
// (listen, accept and close build the same key).
func (b *builder) listenKey() {
	b.add(
		storeImm(asm.RFP, stPort, 0, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, stEvent+evNetNS, asm.Word),
		asm.StoreMem(asm.RFP, stPort, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stEvent+evLPort, asm.Half),
		asm.StoreMem(asm.RFP, stPort+4, asm.R1, asm.Half),
	)
}

// mapCall calls fn (lookup, delete) on map m with the key at key.
func (b *builder) mapCall(fn asm.BuiltinFunc, m string, key int16) {
	b.add(asm.LoadMapPtr(asm.R1, 0).WithReference(m))
	b.add(stackPtr(asm.R2, key)...)
	b.add(fn.Call())
}

// update puts the value at val under the key at key in map m; a map that
// is full is counted (counterFull).
func (b *builder) update(m string, key, val int16) {
	ok := b.label("updated")
	b.add(asm.LoadMapPtr(asm.R1, 0).WithReference(m))
	b.add(stackPtr(asm.R2, key)...)
	b.add(stackPtr(asm.R3, val)...)
	b.add(asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call()) // BPF_ANY
	b.add(asm.JEq.Imm(asm.R0, 0, ok))
	b.count(counterFull)
	b.at(ok)
}

// count adds 1 to counters[i].
func (b *builder) count(i int32) {
	done := b.label("counted")
	b.add(storeImm(asm.RFP, stSmall, int64(i), asm.Word))
	b.mapCall(asm.FnMapLookupElem, mapCounters, stSmall)
	b.add(
		asm.JEq.Imm(asm.R0, 0, done),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	)
	b.at(done)
}

// emit writes the record with kind (and the current command name when
// comm) to the ring buffer; one that finds it full is counted.
func (b *builder) emit(kind Kind, comm bool) {
	done := b.label("emitted")
	b.add(storeImm(asm.RFP, stEvent+evKind, int64(kind), asm.Byte))
	if comm {
		b.add(stackPtr(asm.R1, stEvent+evComm)...)
		b.add(asm.Mov.Imm(asm.R2, 16), asm.FnGetCurrentComm.Call())
	}
	b.add(asm.FnKtimeGetNs.Call(), asm.StoreMem(asm.RFP, stEvent+evTime, asm.R0, asm.DWord))
	b.add(asm.LoadMapPtr(asm.R1, 0).WithReference(mapEvents))
	b.add(stackPtr(asm.R2, stEvent)...)
	b.add(
		asm.Mov.Imm(asm.R3, recordSize),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
	)
	b.count(counterLost)
	b.at(done)
}

// followed goes to yes when the current process is followed: its tgid is
// in the pids map, or (when the exes map holds a file: config) its
// executable is in the exes map, in which case its tgid is added to the
// pids map and the record flagged; else it goes on. R8 holds
// bpf_get_current_pid_tgid().
func (b *builder) followed(yes string) {
	o := b.o
	no := b.label("notfollowed")
	b.add(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.RSh.Imm(asm.R1, 32),
		storeImm(asm.RFP, stTGID, 0, asm.DWord),
		asm.StoreMem(asm.RFP, stTGID, asm.R1, asm.Word),
	)
	b.mapCall(asm.FnMapLookupElem, mapPIDs, stTGID)
	b.add(asm.JNE.Imm(asm.R0, 0, yes))
	b.add(storeImm(asm.RFP, stSmall, configFlags, asm.DWord))
	b.mapCall(asm.FnMapLookupElem, mapConfig, stSmall)
	b.add(
		asm.JEq.Imm(asm.R0, 0, no),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.And.Imm(asm.R1, cfgExes),
		asm.JEq.Imm(asm.R1, 0, no),
		// current->mm->exe_file->f_inode: i_ino, i_sb->s_dev.
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(asm.R3, asm.R0),
	)
	deref := func(off uint32) {
		b.add(asm.Add.Imm(asm.R3, int32(off)))
		b.add(stackPtr(asm.R1, stPtr)...)
		b.add(
			asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, no),
			asm.LoadMem(asm.R3, asm.RFP, stPtr, asm.DWord),
			asm.JEq.Imm(asm.R3, 0, no),
		)
	}
	deref(o.taskMM.off)
	deref(o.mmExeFile.off)
	deref(o.fileInode.off)
	b.add(asm.Mov.Reg(asm.R9, asm.R3)) // the inode
	b.add(storeImm(asm.RFP, stExe, 0, asm.DWord))
	b.add(stackPtr(asm.R1, stExe+8)...)
	b.add(
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, int32(o.inodeIno.off)),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, no),
		asm.Mov.Reg(asm.R3, asm.R9),
	)
	deref(o.inodeSb.off)
	b.add(asm.Add.Imm(asm.R3, int32(o.sbDev.off)))
	b.add(stackPtr(asm.R1, stExe)...)
	b.add(
		asm.Mov.Imm(asm.R2, 4),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, no),
	)
	b.mapCall(asm.FnMapLookupElem, mapExes, stExe)
	b.add(asm.JEq.Imm(asm.R0, 0, no))
	b.add(storeImm(asm.RFP, stSmall, 1, asm.DWord))
	b.update(mapPIDs, stTGID, stSmall)
	b.add(
		storeImm(asm.RFP, stEvent+evFlags, 1, asm.Byte),
		asm.Ja.Label(yes),
	)
	b.at(no)
}

// start begins a program's work on a socket: the record zeroed, R8 and
// the record's first word bpf_get_current_pid_tgid(). R6 holds the
// context.
func (b *builder) start() {
	b.zero(stEvent, recordSize)
	b.add(
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.StoreMem(asm.RFP, stEvent+evPIDTGID, asm.R8, asm.DWord),
	)
}

// putConn puts the record's connection in the connections map, both
// directions, for the tgid in R8's upper half, with flags (and
// connLocalSrc on the direction local → remote).
func (b *builder) putConn(flags int32) {
	b.keys()
	b.add(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.RSh.Imm(asm.R1, 32),
		asm.StoreMem(asm.RFP, stValue+vTGID, asm.R1, asm.Word),
		storeImm(asm.RFP, stValue+vFlags, int64(flags|connLocalSrc), asm.Word),
		storeImm(asm.RFP, stValue+vClosed, 0, asm.DWord),
	)
	b.update(mapConns, stKeyA, stValue)
	b.add(storeImm(asm.RFP, stValue+vFlags, int64(flags), asm.Word))
	b.update(mapConns, stKeyB, stValue)
}

// finish ends a program: "exit" returns ret.
func (b *builder) finish(ret int32) asm.Instructions {
	b.at("exit")
	b.add(asm.Mov.Imm(asm.R0, ret), asm.Return())
	return b.insns
}

// The operations of a sock_ops program (enum in include/uapi/linux/bpf.h)
// it acts on: called without any flag set on the socket
// (BPF_SOCK_OPS_STATE_CB and others need one).
const (
	opTCPConnect         = 3  // BPF_SOCK_OPS_TCP_CONNECT_CB
	opPassiveEstablished = 5  // BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB
	opTCPListen          = 11 // BPF_SOCK_OPS_TCP_LISTEN_CB
)

// sockopsProgram is the cgroup sock_ops program (BPF_CGROUP_SOCK_OPS,
// attached to the root of the cgroup v2 hierarchy: every TCP socket), for
// three of its operations:
//
//   - BPF_SOCK_OPS_TCP_CONNECT_CB, called by tcp_connect()
//     (net/ipv4/tcp_output.c) in the connecting process's context, once
//     tcp_v4_connect or tcp_v6_connect chose the source port
//     (inet_hash_connect) and before the SYN is built. A followed
//     process's connection goes into the connections map, both
//     directions, before its first packet exists, and is reported
//     (Connect). Another process's connection replaces any closed one of
//     the same four-tuple in the map, and is reported (Peer) only when its
//     remote port is a followed process's listening port (ports map, any
//     namespace).
//   - BPF_SOCK_OPS_TCP_LISTEN_CB, called by __inet_listen_sk() in the
//     process's context once the socket listens with its port chosen. A
//     followed process's listening port goes into the ports map, for its
//     network namespace and for any (the connect operation's question),
//     and is reported (Listen).
//   - BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, called when the handshake of a
//     connection to a listening socket completes (in softirq: no process
//     context). A connection whose local port is a followed process's
//     listening port in its namespace goes into the connections map for
//     that process and is reported (Accept); its packets were kept by that
//     port from its SYN on. Another's forgets a closed connection of the
//     same four-tuple.
//
// It returns 1 whatever it did: a sock_ops program's 0 would make the
// kernel ignore the reply of every program on the socket (another tool's
// SYN timeout, say) for the operations that read one.
func sockopsProgram(o *offsets) asm.Instructions {
	b := &builder{o: o}
	b.add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, int16(o.opsOp.off), asm.Word),
		asm.JEq.Imm(asm.R1, opTCPConnect, "connect"),
		asm.JEq.Imm(asm.R1, opTCPListen, "listen"),
		asm.JEq.Imm(asm.R1, opPassiveEstablished, "accept"),
		asm.Ja.Label("exit"),
	)
	// sock reads the socket of the operation (struct bpf_sock_ops's sk,
	// a full socket for these three) into the record.
	sock := func() {
		b.start()
		b.add(
			asm.LoadMem(asm.R7, asm.R6, int16(o.opsSk.off), asm.DWord),
			asm.JEq.Imm(asm.R7, 0, "exit"),
		)
		b.readSock("exit")
	}

	b.at("connect")
	sock()
	b.followed("connect_mine")
	b.keys()
	b.mapCall(asm.FnMapDeleteElem, mapConns, stKeyA)
	b.mapCall(asm.FnMapDeleteElem, mapConns, stKeyB)
	b.add(
		storeImm(asm.RFP, stPort, 0, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, stEvent+evRPort, asm.Half),
		asm.StoreMem(asm.RFP, stPort+4, asm.R1, asm.Half),
	)
	b.mapCall(asm.FnMapLookupElem, mapPorts, stPort)
	b.add(asm.JEq.Imm(asm.R0, 0, "exit"))
	b.emit(Peer, true)
	b.add(asm.Ja.Label("exit"))
	b.at("connect_mine")
	b.putConn(connClient)
	b.emit(Connect, true)
	b.add(asm.Ja.Label("exit"))

	b.at("listen")
	sock()
	b.followed("listen_mine")
	b.add(asm.Ja.Label("exit"))
	b.at("listen_mine")
	b.add(
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.RSh.Imm(asm.R1, 32),
		storeImm(asm.RFP, stValue, 0, asm.DWord),
		asm.StoreMem(asm.RFP, stValue, asm.R1, asm.Word),
	)
	b.listenKey()
	b.update(mapPorts, stPort, stValue)
	b.add(storeImm(asm.RFP, stPort, 0, asm.Word))
	b.update(mapPorts, stPort, stValue)
	b.emit(Listen, true)
	b.add(asm.Ja.Label("exit"))

	b.at("accept")
	sock()
	b.listenKey()
	b.mapCall(asm.FnMapLookupElem, mapPorts, stPort)
	b.add(
		asm.JEq.Imm(asm.R0, 0, "accept_other"),
		// The listener's process owns it: R8 and the record take its
		// tgid (the current task is whatever softirq interrupted).
		asm.LoadMem(asm.R8, asm.R0, 0, asm.Word),
		asm.LSh.Imm(asm.R8, 32),
		asm.StoreMem(asm.RFP, stEvent+evPIDTGID, asm.R8, asm.DWord),
	)
	b.putConn(connServer)
	b.emit(Accept, false)
	b.add(asm.Ja.Label("exit"))
	b.at("accept_other")
	b.keys()
	b.mapCall(asm.FnMapLookupElem, mapConns, stKeyA)
	b.add(
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R0, vClosed, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "exit"), // open: another end's, kept
	)
	b.mapCall(asm.FnMapDeleteElem, mapConns, stKeyA)
	b.mapCall(asm.FnMapDeleteElem, mapConns, stKeyB)
	return b.finish(1)
}

// stateProgram is the raw tracepoint program of inet_sock_set_state(const
// struct sock *sk, int oldstate, int newstate) (include/trace/events/
// sock.h), which every TCP state change passes, in any context. On
// TCP_CLOSE: a listening socket of the ports map leaves it (Unlisten); a
// connection of the connections map gets its close time in both directions'
// values (the socket filter keeps its packets for Grace more: the last
// ACKs, on loopback, are received after the state changed) and is reported
// (Close).
func stateProgram(o *offsets) asm.Instructions {
	b := &builder{o: o, scalarSock: true}
	b.add(asm.Mov.Reg(asm.R6, asm.R1))
	b.start()
	b.add(
		asm.LoadMem(asm.R1, asm.R6, 16, asm.DWord), // newstate
		asm.JNE.Imm32(asm.R1, tcpClose, "exit"),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.DWord),
		asm.LoadMem(asm.R9, asm.R6, 8, asm.DWord), // oldstate
	)
	b.readSock("exit")
	b.add(asm.JNE.Imm32(asm.R9, tcpListen, "conn"))
	b.listenKey()
	b.mapCall(asm.FnMapLookupElem, mapPorts, stPort)
	b.add(
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, stEvent+evPIDTGID+4, asm.R1, asm.Word),
		storeImm(asm.RFP, stEvent+evPIDTGID, 0, asm.Word),
	)
	b.mapCall(asm.FnMapDeleteElem, mapPorts, stPort)
	b.emit(Unlisten, false)
	b.add(asm.Ja.Label("exit"))
	b.at("conn")
	b.keys()
	b.add(asm.FnKtimeGetNs.Call(), asm.Mov.Reg(asm.R9, asm.R0))
	b.mapCall(asm.FnMapLookupElem, mapConns, stKeyA)
	b.add(
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.StoreMem(asm.R0, vClosed, asm.R9, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, vTGID, asm.Word),
		asm.StoreMem(asm.RFP, stEvent+evPIDTGID+4, asm.R1, asm.Word),
		storeImm(asm.RFP, stEvent+evPIDTGID, 0, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, vFlags, asm.Word),
		asm.StoreMem(asm.RFP, stEvent+evFlags, asm.R1, asm.Byte),
	)
	b.mapCall(asm.FnMapLookupElem, mapConns, stKeyB)
	b.add(
		asm.JEq.Imm(asm.R0, 0, "closed"),
		asm.StoreMem(asm.R0, vClosed, asm.R9, asm.DWord),
	)
	b.at("closed")
	b.emit(Close, false)
	return b.finish(0)
}

// Offsets into struct __sk_buff, the socket filter's context
// (include/uapi/linux/bpf.h, a stable ABI).
const (
	skbPktType = 4
	skbIfindex = 40
)

// Packet types of a packet socket (include/uapi/linux/if_packet.h).
const packetOutgoing = 4

// loopbackIndex is the loopback interface's index in every network
// namespace: the kernel gives it LOOPBACK_IFINDEX, 1 (include/net/flow.h;
// drivers/net/loopback.c checks it, since Linux 3.9's "net: Loopback
// ifindex is constant now").
const loopbackIndex = 1

// Where the filter keeps things on its stack.
const (
	fHdr  = -48       // the first 40 bytes of the packet
	fKey  = fHdr - 40 // the connections map key
	fPort = fKey - 8  // the ports map key
)

// filterProgram is the socket filter of a packet socket (SOCK_DGRAM: the
// packet starts at its IP header) in the network namespace netns. It keeps
// a TCP segment (returning snap, the bytes to keep) when its four-tuple is
// in the connections map, open or closed less than grace (ns) ago, or when
// either port is a listening port of a followed process in netns (ports
// map); it drops everything else (returning 0), and on loopback the copy of
// each packet seen as it is sent (PACKET_OUTGOING: it is seen again as it
// is received, as libpcap keeps one of the two). IPv4 fragments after the
// first, IPv4 headers shorter than 20 bytes and IPv6 packets with extension
// headers are dropped, as pkg/live's classic filter does.
func filterProgram(netns uint32, snap uint32, grace int64) asm.Instructions {
	b := &builder{}
	b.add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, skbIfindex, asm.Word),
		asm.JNE.Imm(asm.R1, loopbackIndex, "ip"),
		asm.LoadMem(asm.R1, asm.R6, skbPktType, asm.Word),
		asm.JEq.Imm(asm.R1, packetOutgoing, "drop"),
	)
	b.at("ip")
	// A TCP segment holds at least 40 bytes: 20 of IPv4 and 20 of TCP.
	b.add(
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
	)
	b.add(stackPtr(asm.R3, fHdr)...)
	b.add(
		asm.Mov.Imm(asm.R4, 40),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		storeImm(asm.RFP, fKey+kNetNS, int64(int32(netns)), asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, fHdr, asm.Byte),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.JEq.Imm(asm.R2, 4, "v4"),
		asm.JNE.Imm(asm.R2, 6, "drop"),
		// IPv6 (RFC 8200 §3): next header at 6, the addresses at 8
		// and 24, TCP at 40.
		asm.LoadMem(asm.R2, asm.RFP, fHdr+6, asm.Byte),
		asm.JNE.Imm(asm.R2, 6, "drop"),
	)
	for i := int16(0); i < 32; i += 8 {
		b.add(
			asm.LoadMem(asm.R2, asm.RFP, fHdr+8+i, asm.DWord),
			asm.StoreMem(asm.RFP, fKey+kSrc+i, asm.R2, asm.DWord),
		)
	}
	b.add(
		asm.Mov.Imm(asm.R7, 40),
		asm.Ja.Label("ports"),
	)
	// IPv4 (RFC 791 §3.1): header length in 0's low nibble, fragment
	// offset in 6-7's low 13 bits, protocol at 9, the addresses at 12
	// and 16; IPv4-mapped in the key.
	b.at("v4")
	b.add(
		asm.LoadMem(asm.R2, asm.RFP, fHdr+9, asm.Byte),
		asm.JNE.Imm(asm.R2, 6, "drop"),
		asm.LoadMem(asm.R2, asm.RFP, fHdr+6, asm.Byte),
		asm.And.Imm(asm.R2, 0x1f),
		asm.JNE.Imm(asm.R2, 0, "drop"),
		asm.LoadMem(asm.R2, asm.RFP, fHdr+7, asm.Byte),
		asm.JNE.Imm(asm.R2, 0, "drop"),
		asm.Mov.Reg(asm.R7, asm.R1),
		asm.And.Imm(asm.R7, 0x0f),
		asm.LSh.Imm(asm.R7, 2),
		asm.JLT.Imm(asm.R7, 20, "drop"),
	)
	for _, a := range []struct{ key, hdr int16 }{{kSrc, 12}, {kDst, 16}} {
		b.add(
			storeImm(asm.RFP, fKey+a.key, 0, asm.DWord),
			storeImm(asm.RFP, fKey+a.key+8, mappedWord, asm.Word),
			asm.LoadMem(asm.R2, asm.RFP, fHdr+a.hdr, asm.Word),
			asm.StoreMem(asm.RFP, fKey+a.key+12, asm.R2, asm.Word),
		)
	}
	// The ports, straight into the key: source then destination, as the
	// key has them (RFC 9293 §3.1).
	b.at("ports")
	b.add(
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
	)
	b.add(stackPtr(asm.R3, fKey+kSPort)...)
	b.add(
		asm.Mov.Imm(asm.R4, 4),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
	)
	b.add(asm.LoadMapPtr(asm.R1, 0).WithReference(mapConns))
	b.add(stackPtr(asm.R2, fKey)...)
	b.add(
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "listening"),
		asm.LoadMem(asm.R9, asm.R0, vClosed, asm.DWord),
		asm.JEq.Imm(asm.R9, 0, "keep"),
		asm.FnKtimeGetNs.Call(),
		asm.Sub.Reg(asm.R0, asm.R9),
		asm.LoadImm(asm.R1, grace, asm.DWord),
		asm.JLT.Reg(asm.R0, asm.R1, "keep"),
	)
	b.at("listening")
	for _, port := range []int16{kDPort, kSPort} {
		b.add(
			storeImm(asm.RFP, fPort, 0, asm.DWord),
			storeImm(asm.RFP, fPort, int64(int32(netns)), asm.Word),
			asm.LoadMem(asm.R1, asm.RFP, fKey+port, asm.Half),
			asm.StoreMem(asm.RFP, fPort+4, asm.R1, asm.Half),
		)
		b.add(asm.LoadMapPtr(asm.R1, 0).WithReference(mapPorts))
		b.add(stackPtr(asm.R2, fPort)...)
		b.add(
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "keep"),
		)
	}
	b.add(
		asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, int32(snap)).WithSymbol("keep"),
		asm.Return(),
	)
	return b.insns
}

// storeImm is *(size *)(dst + off) = value, as asm.StoreImm, for 64-bit
// stores too (BPF_ST | BPF_MEM | BPF_DW: the 32-bit immediate is
// sign-extended), which asm.StoreImm does not build.
func storeImm(dst asm.Register, off int16, value int64, size asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: dst, Offset: off, Constant: int64(int32(value))}
}
