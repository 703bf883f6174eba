package gotls

// Reading a TLS connection's current state from the memory of the process
// that holds it: crypto/tls.Conn's version, cipher suite and role, each
// direction's traffic secret and record sequence number (halfConn, in
// crypto/tls's conn.go), and the TCP socket under it.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kwatch/kwatch/pkg/procnet"
)

// Errors of ReadConnState. Each is returned wrapped in a one-line error
// that says what was read and why it is refused; test for them with
// errors.Is.
var (
	// ErrHandshakeIncomplete: the connection's handshake has not completed
	// (isHandshakeComplete is false): its secrets come from writeKeyLog
	// (Probe.Attach) when it does, or its state can be read at a later
	// use.
	ErrHandshakeIncomplete = errors.New("the TLS handshake is not complete")
	// ErrTLS12: the connection is TLS 1.2, whose master secret crypto/tls
	// keeps only in the closure of Conn.ekm (tls12.go), and the layout
	// does not say where in it (the message says why: no DWARF closure
	// offsets, or closures not found in the program).
	ErrTLS12 = errors.New("TLS 1.2 cannot be read from this program")
	// ErrBadState: a value read does not check out for a live
	// crypto/tls.Conn (a version that is neither TLS 1.2 nor 1.3, an
	// unknown cipher suite, a secret not of the suite's hash length, a
	// bool that is neither 0 nor 1, ...): the layout does not fit the
	// program, the pointer does not hold a Conn (any more), or the
	// connection changed while it was read. Nothing is guessed.
	ErrBadState = errors.New("the connection's state does not check out")
	// ErrNotTCP: the connection is not over a TCP socket of the process:
	// its net.Conn is not a *net.TCPConn, or its file descriptor is not
	// one of the process's TCP sockets (closed, or a Unix socket).
	ErrNotTCP = errors.New("not a TLS connection over TCP")
)

// ConnState is what ReadConnState read of one TLS connection: TLS 1.3 with
// each direction's traffic secret, or TLS 1.2 with its master secret and
// hello randoms (from which RFC 5246 section 6.3 derives the key block).
type ConnState struct {
	// PID is the process read, Conn the crypto/tls.Conn's address in it.
	PID  int
	Conn uint64
	// Version is the TLS version (Conn.vers): tls.VersionTLS13 or
	// tls.VersionTLS12.
	Version uint16
	// CipherSuite is the suite's IANA id (Conn.cipherSuite): for TLS 1.3
	// one of tls.TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384 and
	// TLS_CHACHA20_POLY1305_SHA256; for TLS 1.2 one crypto/tls has
	// (tls.CipherSuites, tls.InsecureCipherSuites).
	CipherSuite uint16
	// IsClient says the process is the connection's client
	// (Conn.isClient); else its server.
	IsClient bool
	// In is the direction the process receives, Out the one it sends
	// (Conn.in, Conn.out).
	In, Out Direction
	// MasterSecret (48 bytes), ClientRandom and ServerRandom are a TLS
	// 1.2 connection's, from the closure Conn.ekm points to (tls12.go);
	// nil and zero for TLS 1.3. A key log line for it is "CLIENT_RANDOM
	// <ClientRandom> <MasterSecret>", in hex; the key block needs
	// ServerRandom as well, which only the ServerHello says.
	MasterSecret               []byte
	ClientRandom, ServerRandom [32]byte
	// FD is the socket's file descriptor in the process
	// (netFD.pfd.Sysfd), Inode the socket's inode (/proc/PID/fd/FD is
	// socket:[Inode]).
	FD    int
	Inode uint64
	// Local and Remote are the socket's addresses as the process sees
	// them (/proc/PID/net/tcp or tcp6): Local is the process's end.
	Local, Remote netip.AddrPort
	// TCPState is the socket's TCP state (procnet.StateEstablished, ...).
	TCPState int
	// TypeChecked says the net.Conn's dynamic type was compared with
	// *net.TCPConn's type descriptor (Layout.TCPConnType); else only its
	// socket was checked.
	TypeChecked bool
}

// Direction is one direction of a connection, as its halfConn holds it.
type Direction struct {
	// Seq is the sequence number of the next record in this direction
	// (halfConn.seq, 8 bytes big-endian): the number of records sent or
	// received under the current traffic secret (it starts at 0 with each
	// secret, RFC 8446 section 5.3). It moves on with each record, so it
	// is what it was when read.
	Seq uint64
	// Secret is the current traffic secret of TLS 1.3
	// (halfConn.trafficSecret): [sender]_application_traffic_secret_N of
	// RFC 8446 section 7.1, of the suite's hash length (32 bytes for
	// SHA-256 suites, 48 for SHA-384). N is 0 unless a KeyUpdate came.
	// nil for TLS 1.2, whose Seq counts from the Finished message (1 at
	// the end of the handshake).
	Secret []byte
}

// Client returns the direction the client sends: Out when the process is
// the client, else In. Its Secret is the key log's CLIENT_TRAFFIC_SECRET_0
// until a KeyUpdate.
func (s ConnState) Client() Direction {
	if s.IsClient {
		return s.Out
	}
	return s.In
}

// Server returns the direction the server sends (SERVER_TRAFFIC_SECRET_0).
func (s ConnState) Server() Direction {
	if s.IsClient {
		return s.In
	}
	return s.Out
}

// maxRead bounds every read of the process's memory, in bytes: the largest
// struct read is crypto/tls.Conn's prefix up to its out halfConn or its ekm
// (about 640 bytes in Go 1.26).
const maxRead = 4096

// maxSecretLen bounds a traffic secret's length: SHA-384's 48 bytes is the
// largest TLS 1.3 uses.
const maxSecretLen = 64

// hashLen13 is each TLS 1.3 cipher suite's hash length, in bytes: the
// length of its traffic secrets (RFC 8446 section 7.1, B.4).
var hashLen13 = map[uint16]int{
	tls.TLS_AES_128_GCM_SHA256:       32,
	tls.TLS_AES_256_GCM_SHA384:       48,
	tls.TLS_CHACHA20_POLY1305_SHA256: 32,
}

// suites12 is every TLS 1.2 cipher suite crypto/tls knows.
var suites12 = func() map[uint16]bool {
	m := map[uint16]bool{}
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		for _, v := range s.SupportedVersions {
			if v == tls.VersionTLS12 {
				m[s.ID] = true
			}
		}
	}
	return m
}()

// memory reads another process's memory.
type memory interface {
	// read fills b from addr, or fails: never partly.
	read(addr uint64, b []byte) error
}

// procMemory reads process pid's memory with process_vm_readv(2), which
// needs the permission ptrace(2)'s PTRACE_MODE_ATTACH_REALCREDS checks
// (root, or CAP_SYS_PTRACE, or the same user under Yama's scope 0) and
// neither stops nor signals the process.
type procMemory struct{ pid int }

func (m procMemory) read(addr uint64, b []byte) error {
	switch {
	case len(b) == 0:
		return nil
	case len(b) > maxRead:
		return fmt.Errorf("a read of %d bytes: more than the %d kwatch reads at once", len(b), maxRead)
	case addr == 0:
		return errors.New("a nil pointer")
	case addr+uint64(len(b)) < addr:
		return fmt.Errorf("%d bytes at %#x wrap around", len(b), addr)
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	n, err := unix.ProcessVMReadv(m.pid, local, remote, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("reading %d bytes at %#x: pid %d: no such process", len(b), addr, m.pid)
	case errors.Is(err, unix.EFAULT):
		return fmt.Errorf("reading %d bytes at %#x of pid %d: not mapped", len(b), addr, m.pid)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("reading the memory of pid %d: not permitted (root or CAP_SYS_PTRACE)", m.pid)
	case err != nil:
		return fmt.Errorf("reading %d bytes at %#x of pid %d: process_vm_readv: %v", len(b), addr, m.pid, err)
	case n != len(b):
		return fmt.Errorf("reading %d bytes at %#x of pid %d: only %d were mapped", len(b), addr, m.pid, n)
	}
	return nil
}

// ReadConnState reads the state of the crypto/tls.Conn at address conn in
// process pid, which runs the executable layout was made from (LayoutFor;
// checked through /proc/PID/exe), as it is at that moment: conn is a
// ConnUse.Conn the connections probe reported for pid. It reads with
// process_vm_readv(2) these fields only, each read bounded (at most 4 KiB):
// the Conn's prefix up to its out halfConn, and then for TLS 1.3 the two
// traffic secrets (at most 64 bytes each), for TLS 1.2 the closure
// Conn.ekm points to (at most 256 bytes) and the master secret and randoms
// it holds; the net.Conn's itab type word, the *net.TCPConn's netFD
// pointer and the netFD's first bytes (its poll.FD.Sysfd, family and
// sotype); then /proc/PID/fd/FD and /proc/PID/net/tcp{,6} (pkg/procnet)
// for the socket. Call it only for processes attached to: it is as much
// access as a debugger's.
//
// Every value is checked before it is used (see ErrBadState): the
// version, the suite, the lengths of secrets and randoms, for TLS 1.2 the
// closure's function; the dynamic type of the net.Conn is compared with
// *net.TCPConn's where the layout found it, and the socket must be a TCP
// socket of pid; the Conn's fixed fields are read again at the end and
// must not have changed. Sequence numbers cannot be checked here: the next
// record's authentication checks them. Errors are one line, wrapping
// ErrHandshakeIncomplete, ErrTLS12, ErrBadState or ErrNotTCP where one of
// those is the reason.
func ReadConnState(pid int, conn uint64, layout *Layout) (ConnState, error) {
	if layout == nil {
		return ConnState{}, errors.New("reading a connection's state: no layout")
	}
	if pid <= 0 {
		return ConnState{}, fmt.Errorf("reading a connection's state: pid %d", pid)
	}
	if err := sameExe(pid, layout); err != nil {
		return ConnState{}, err
	}
	s, err := readConnState(procMemory{pid}, pid, conn, layout)
	if err != nil {
		return ConnState{}, fmt.Errorf("pid %d, crypto/tls.Conn at %#x: %w", pid, conn, err)
	}
	return s, nil
}

// sameExe checks that process pid runs the executable layout was read from.
func sameExe(pid int, layout *Layout) error {
	exe := "/proc/" + strconv.Itoa(pid) + "/exe"
	fi, err := os.Stat(exe)
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Dev != layout.dev || st.Ino != layout.ino {
		return fmt.Errorf("pid %d does not run %s, whose layout this is", pid, layout.Path)
	}
	return nil
}

// fixed is what readConnState reads of a Conn that must not change while it
// reads: the handshake's results and where the secrets and socket are.
type fixed struct {
	complete, haveVers, isClient uint8
	vers, suite                  uint16
	itab, data                   uint64
	in, out                      sliceHeader
	ekm                          uint64
}

type sliceHeader struct{ ptr, len, cap uint64 }

// readFixed reads the Conn's prefix at conn and takes its fixed fields and
// sequence numbers from it.
func readFixed(m memory, conn uint64, o *offsets) (fixed, [2]uint64, error) {
	buf := make([]byte, max(o.out+o.halfSize, o.ekm+o.ptrSize))
	if err := m.read(conn, buf); err != nil {
		return fixed{}, [2]uint64{}, err
	}
	le := binary.LittleEndian
	slice := func(off uint64) sliceHeader {
		return sliceHeader{le.Uint64(buf[off:]), le.Uint64(buf[off+8:]), le.Uint64(buf[off+16:])}
	}
	f := fixed{
		complete: uint8(le.Uint32(buf[o.handshakeComplete:])),
		haveVers: buf[o.haveVers],
		isClient: buf[o.isClient],
		vers:     le.Uint16(buf[o.vers:]),
		suite:    le.Uint16(buf[o.cipherSuite:]),
		itab:     le.Uint64(buf[o.netConn:]),
		data:     le.Uint64(buf[o.netConn+8:]),
		in:       slice(o.in + o.trafficSecret),
		out:      slice(o.out + o.trafficSecret),
		ekm:      le.Uint64(buf[o.ekm:]),
	}
	if v := le.Uint32(buf[o.handshakeComplete:]); v > 1 {
		return fixed{}, [2]uint64{}, fmt.Errorf("%w: isHandshakeComplete holds %d, not a bool", ErrBadState, v)
	}
	for _, half := range []uint64{o.in, o.out} {
		if v := le.Uint16(buf[half+o.halfVersion:]); v != f.vers {
			return fixed{}, [2]uint64{}, fmt.Errorf("%w: a halfConn's version is %#04x, the Conn's %#04x", ErrBadState, v, f.vers)
		}
	}
	seqs := [2]uint64{binary.BigEndian.Uint64(buf[o.in+o.seq:]), binary.BigEndian.Uint64(buf[o.out+o.seq:])}
	return f, seqs, nil
}

// readConnState is ReadConnState on m.
func readConnState(m memory, pid int, conn uint64, l *Layout) (ConnState, error) {
	o := &l.off
	f, seqs, err := readFixed(m, conn, o)
	if err != nil {
		return ConnState{}, err
	}
	switch {
	case f.haveVers > 1 || f.isClient > 1:
		return ConnState{}, fmt.Errorf("%w: haveVers %d, isClient %d: not bools", ErrBadState, f.haveVers, f.isClient)
	case f.complete == 0 || f.haveVers == 0:
		return ConnState{}, ErrHandshakeIncomplete
	case f.vers != tls.VersionTLS13 && f.vers != tls.VersionTLS12:
		return ConnState{}, fmt.Errorf("%w: version %#04x, neither TLS 1.2 (0x0303) nor TLS 1.3 (0x0304)", ErrBadState, f.vers)
	case f.vers == tls.VersionTLS12 && !suites12[f.suite]:
		return ConnState{}, fmt.Errorf("%w: TLS 1.2 with cipher suite %#04x, which crypto/tls does not have", ErrBadState, f.suite)
	}
	s := ConnState{PID: pid, Conn: conn, Version: f.vers, CipherSuite: f.suite, IsClient: f.isClient == 1}
	s.In.Seq, s.Out.Seq = seqs[0], seqs[1]
	var err2 error
	if f.vers == tls.VersionTLS12 {
		err2 = readTLS12(m, pid, f.ekm, l, &s)
	} else {
		err2 = readSecrets13(m, f, &s)
	}
	if err2 != nil {
		return ConnState{}, err2
	}
	if err := readSocket(m, pid, f, l, &s); err != nil {
		return ConnState{}, err
	}
	// The fixed fields again: a Conn freed and reused, or a KeyUpdate,
	// meanwhile shows here.
	again, _, err := readFixed(m, conn, o)
	if err != nil {
		return ConnState{}, err
	}
	if again != f {
		return ConnState{}, fmt.Errorf("%w: the Conn changed while it was read (closed, or a KeyUpdate): read it at its next use", ErrBadState)
	}
	return s, nil
}

// readSecrets13 reads a TLS 1.3 connection's two traffic secrets into s.
func readSecrets13(m memory, f fixed, s *ConnState) error {
	hashLen, ok := hashLen13[f.suite]
	if !ok {
		return fmt.Errorf("%w: TLS 1.3 with cipher suite %#04x, not one of TLS 1.3's", ErrBadState, f.suite)
	}
	for i, h := range []sliceHeader{f.in, f.out} {
		d := &s.In
		name := "in"
		if i == 1 {
			d, name = &s.Out, "out"
		}
		if h.len != uint64(hashLen) || h.cap < h.len || h.cap > maxSecretLen || h.ptr == 0 {
			return fmt.Errorf("%w: %s's traffic secret is %d bytes (capacity %d, at %#x), not the %d of %s", ErrBadState, name, h.len, h.cap, h.ptr, hashLen, tls.CipherSuiteName(f.suite))
		}
		d.Secret = make([]byte, h.len)
		if err := m.read(h.ptr, d.Secret); err != nil {
			return fmt.Errorf("%s's traffic secret: %w", name, err)
		}
		if bytes.Count(d.Secret, []byte{0}) == len(d.Secret) {
			return fmt.Errorf("%w: %s's traffic secret is all zeros", ErrBadState, name)
		}
	}
	return nil
}

// Socket families and types (include/linux/socket.h, net.h).
const (
	afUnix     = 1
	afInet     = 2
	afInet6    = 10
	sockStream = 1
)

// readSocket follows the Conn's net.Conn to its socket and fills s's FD,
// Inode, addresses and TCPState.
func readSocket(m memory, pid int, f fixed, l *Layout, s *ConnState) error {
	o := &l.off
	if f.itab == 0 || f.data == 0 {
		return fmt.Errorf("%w: its net.Conn is nil", ErrNotTCP)
	}
	if l.TCPConnType != 0 {
		var it [16]byte // internal/abi.ITab: Inter, Type
		if err := m.read(f.itab, it[:]); err != nil {
			return fmt.Errorf("the net.Conn's itab: %w", err)
		}
		bias, err := loadBias(pid, l)
		if err != nil {
			return err
		}
		typ := binary.LittleEndian.Uint64(it[8:])
		if typ != l.TCPConnType+bias {
			return fmt.Errorf("%w: its net.Conn is a %s, not a *net.TCPConn", ErrNotTCP, nameOf(m, l, bias, typ))
		}
		s.TypeChecked = true
	}
	var p [8]byte
	if err := m.read(f.data+o.tcpFD, p[:]); err != nil {
		return fmt.Errorf("the net.TCPConn's fd: %w", err)
	}
	fdAddr := binary.LittleEndian.Uint64(p[:])
	if fdAddr == 0 {
		return fmt.Errorf("%w: its net.TCPConn has no netFD", ErrNotTCP)
	}
	nfd := make([]byte, max(o.sysfd, o.family, o.sotype)+8)
	if err := m.read(fdAddr, nfd); err != nil {
		return fmt.Errorf("the netFD: %w", err)
	}
	sysfd := int64(binary.LittleEndian.Uint64(nfd[o.sysfd:]))
	family := binary.LittleEndian.Uint64(nfd[o.family:])
	sotype := binary.LittleEndian.Uint64(nfd[o.sotype:])
	switch {
	case sysfd == -1:
		return fmt.Errorf("%w: its socket is closed (fd -1)", ErrNotTCP)
	case family == afUnix:
		return fmt.Errorf("%w: fd %d is a Unix socket", ErrNotTCP, sysfd)
	case family != afInet && family != afInet6 || sotype != sockStream:
		return fmt.Errorf("%w: fd %d: netFD family %d, type %d: not a TCP socket (the layout does not fit?)", ErrNotTCP, sysfd, family, sotype)
	case sysfd < 0 || sysfd >= 1<<30:
		return fmt.Errorf("%w: fd %d", ErrBadState, sysfd)
	}
	s.FD = int(sysfd)
	link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(s.FD))
	if err != nil {
		return fmt.Errorf("%w: fd %d: %v", ErrNotTCP, s.FD, err)
	}
	in, ok := strings.CutPrefix(link, "socket:[")
	if !ok || !strings.HasSuffix(in, "]") {
		return fmt.Errorf("%w: fd %d is %s, not a socket", ErrNotTCP, s.FD, link)
	}
	if s.Inode, err = strconv.ParseUint(strings.TrimSuffix(in, "]"), 10, 64); err != nil {
		return fmt.Errorf("%w: fd %d is %s", ErrNotTCP, s.FD, link)
	}
	socks, err := procnet.Sockets(pid)
	if err != nil {
		return fmt.Errorf("the sockets of pid %d: %w", pid, err)
	}
	for _, sk := range socks {
		if sk.Inode == s.Inode {
			s.Local, s.Remote, s.TCPState = sk.Local, sk.Remote, sk.State
			return nil
		}
	}
	return fmt.Errorf("%w: fd %d is %s, none of pid %d's TCP sockets", ErrNotTCP, s.FD, link, pid)
}

// nameOf names the type descriptor at typ (an address in the process),
// or gives its address when the layout cannot name it.
func nameOf(m memory, l *Layout, bias, typ uint64) string {
	read := func(addr, n uint64) ([]byte, bool) {
		if n > maxRead {
			return nil, false
		}
		b := make([]byte, n)
		return b, m.read(addr, b) == nil
	}
	if name, _, ok := typeName(read, l.types+bias, l.etypes+bias, typ); ok {
		return name
	}
	return fmt.Sprintf("type at %#x (*net.TCPConn's is at %#x)", typ, l.TCPConnType+bias)
}

// loadBias returns how far process pid's executable is loaded from the
// addresses it was linked at: 0 for a fixed-address executable; for a
// position-independent one, from the first mapping of the file in
// /proc/PID/maps (start address and file offset) and the PT_LOAD segment
// that holds that offset.
func loadBias(pid int, l *Layout) (uint64, error) {
	if !l.pie {
		return 0, nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ino := strconv.FormatUint(l.ino, 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode pathname (proc(5))
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[4] != ino {
			continue
		}
		start, _, _ := strings.Cut(fields[0], "-")
		a, err1 := strconv.ParseUint(start, 16, 64)
		off, err2 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		for _, seg := range l.loads {
			if seg.off&^0xfff <= off && off < seg.off+seg.filesz {
				return a - (seg.vaddr - seg.off + off), nil
			}
		}
	}
	return 0, fmt.Errorf("pid %d: %s is not mapped (/proc/%d/maps)", pid, l.Path, pid)
}
