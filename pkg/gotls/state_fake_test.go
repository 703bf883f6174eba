package gotls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
)

// fakeMemory is a process's memory made in the test: regions at addresses.
// change, when set, is applied before the read it counts (1 the first).
type fakeMemory struct {
	regions map[uint64][]byte
	reads   int
	change  func(m *fakeMemory, read int)
}

func (m *fakeMemory) read(addr uint64, b []byte) error {
	m.reads++
	if m.change != nil {
		m.change(m, m.reads)
	}
	for a, r := range m.regions {
		if a <= addr && addr+uint64(len(b)) <= a+uint64(len(r)) {
			copy(b, r[addr-a:])
			return nil
		}
	}
	return fmt.Errorf("reading %d bytes at %#x: not mapped", len(b), addr)
}

// Where the fake Conn and what it points to are.
const (
	fakeConn   = 0x10000
	fakeIn     = 0x20000
	fakeOut    = 0x20040
	fakeItab   = 0x30000
	fakeTCP    = 0x31000
	fakeNetFD  = 0x32000
	fakeSecret = 0xaa
	fakeEKM    = 0x40000 // the TLS 1.2 closure
	fakeEKMPC  = 0x401000
	fakeMaster = 0x41000
	fakeCR     = 0x42000
	fakeSR     = 0x43000
)

// fakeConnMemory lays out a TLS 1.3 client Conn by l's offsets, over the
// socket fd of this process.
func fakeConnMemory(l *Layout, fd int) *fakeMemory {
	o := l.off
	le := binary.LittleEndian
	c := make([]byte, o.out+o.halfSize)
	le.PutUint32(c[o.handshakeComplete:], 1)
	c[o.haveVers], c[o.isClient] = 1, 1
	le.PutUint16(c[o.vers:], 0x0304)
	le.PutUint16(c[o.cipherSuite:], 0x1301)
	le.PutUint64(c[o.netConn:], fakeItab)
	le.PutUint64(c[o.netConn+8:], fakeTCP)
	for half, secret := range map[uint64]uint64{o.in: fakeIn, o.out: fakeOut} {
		le.PutUint16(c[half+o.halfVersion:], 0x0304)
		binary.BigEndian.PutUint64(c[half+o.seq:], 7)
		le.PutUint64(c[half+o.trafficSecret:], secret)
		le.PutUint64(c[half+o.trafficSecret+8:], 32)
		le.PutUint64(c[half+o.trafficSecret+16:], 32)
	}
	tcp := make([]byte, o.tcpFD+8)
	le.PutUint64(tcp[o.tcpFD:], fakeNetFD)
	nfd := make([]byte, o.netFDSize)
	le.PutUint64(nfd[o.sysfd:], uint64(fd))
	le.PutUint64(nfd[o.family:], afInet)
	le.PutUint64(nfd[o.sotype:], sockStream)
	secret := make([]byte, 64)
	for i := range secret {
		secret[i] = fakeSecret
	}
	le.PutUint64(c[o.ekm:], fakeEKM)
	ekm := make([]byte, maxClosure)
	le.PutUint64(ekm, fakeEKMPC)
	for off, a := range map[uint64]uint64{l.closure.master: fakeMaster, l.closure.client: fakeCR, l.closure.server: fakeSR} {
		le.PutUint64(ekm[off:], a)
		n := uint64(32)
		if a == fakeMaster {
			n = 48
		}
		le.PutUint64(ekm[off+8:], n)
		le.PutUint64(ekm[off+16:], n)
	}
	return &fakeMemory{regions: map[uint64][]byte{
		fakeConn: c, fakeIn: secret[:32], fakeOut: secret[32:], fakeItab: make([]byte, 32), fakeTCP: tcp, fakeNetFD: nfd,
		fakeEKM: ekm, fakeMaster: secret[:48], fakeCR: secret[:32], fakeSR: secret[32:],
	}}
}

// toTLS12 makes the fake Conn a TLS 1.2 one.
func toTLS12(m *fakeMemory, o offsets) {
	c := m.regions[fakeConn]
	for _, off := range []uint64{o.vers, o.in + o.halfVersion, o.out + o.halfVersion} {
		binary.LittleEndian.PutUint16(c[off:], 0x0303)
	}
	binary.LittleEndian.PutUint16(c[o.cipherSuite:], 0xc02b)
}

// TestConnStateRefused: values that do not check out are refused, each with
// its reason in one line, on a Conn laid out in memory made by the test over
// a real socket of this process.
func TestConnStateRefused(t *testing.T) {
	rs, err := ownStructs()
	if err != nil {
		t.Fatal(err)
	}
	own, err := ownEKMClosure()
	if err != nil {
		t.Fatal(err)
	}
	l := &Layout{Path: "self", Source: FromReflect, closure: own.off, ekmFuncs: []uint64{fakeEKMPC}}
	if l.off, err = makeOffsets(rs); err != nil {
		t.Fatal(err)
	}
	o := l.off
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var fd int
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(s uintptr) { fd = int(s) })
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	pid := os.Getpid()

	m := fakeConnMemory(l, fd)
	s, err := readConnState(m, pid, fakeConn, l)
	if err != nil {
		t.Fatal(err)
	}
	if s.Local.String() != ln.Addr().String() || s.FD != fd || s.TypeChecked || s.In.Seq != 7 || len(s.Out.Secret) != 32 || s.Out.Secret[0] != fakeSecret {
		t.Errorf("%+v", s)
	}

	// A SHA-384 suite: 48-byte secrets.
	m = fakeConnMemory(l, fd)
	binary.LittleEndian.PutUint16(m.regions[fakeConn][o.cipherSuite:], 0x1302)
	for half, at := range map[uint64]uint64{o.in: fakeIn, o.out: fakeOut} {
		binary.LittleEndian.PutUint64(m.regions[fakeConn][half+o.trafficSecret+8:], 48)
		binary.LittleEndian.PutUint64(m.regions[fakeConn][half+o.trafficSecret+16:], 48)
		m.regions[at] = m.regions[fakeMaster]
	}
	if s, err = readConnState(m, pid, fakeConn, l); err != nil || len(s.In.Secret) != 48 || len(s.Out.Secret) != 48 {
		t.Errorf("TLS_AES_256_GCM_SHA384: %+v, %v", s, err)
	}

	m = fakeConnMemory(l, fd)
	toTLS12(m, o)
	if s, err = readConnState(m, pid, fakeConn, l); err != nil {
		t.Fatal(err)
	}
	if s.Version != 0x0303 || len(s.MasterSecret) != 48 || s.ClientRandom[0] != fakeSecret || s.In.Secret != nil {
		t.Errorf("TLS 1.2: %+v", s)
	}

	le := binary.LittleEndian
	conn := func(m *fakeMemory) []byte { return m.regions[fakeConn] }
	ekm := func(m *fakeMemory) []byte { toTLS12(m, o); return m.regions[fakeEKM] }
	for _, c := range []struct {
		name string
		edit func(m *fakeMemory)
		want error
		says string
	}{
		{"handshake not complete", func(m *fakeMemory) { le.PutUint32(conn(m)[o.handshakeComplete:], 0) }, ErrHandshakeIncomplete, "not complete"},
		{"no version yet", func(m *fakeMemory) { conn(m)[o.haveVers] = 0 }, ErrHandshakeIncomplete, "not complete"},
		{"isHandshakeComplete not a bool", func(m *fakeMemory) { le.PutUint32(conn(m)[o.handshakeComplete:], 2) }, ErrBadState, "isHandshakeComplete holds 2"},
		{"isClient not a bool", func(m *fakeMemory) { conn(m)[o.isClient] = 3 }, ErrBadState, "isClient 3"},
		{"TLS 1.1", func(m *fakeMemory) {
			le.PutUint16(conn(m)[o.vers:], 0x0302)
			le.PutUint16(conn(m)[o.in+o.halfVersion:], 0x0302)
			le.PutUint16(conn(m)[o.out+o.halfVersion:], 0x0302)
		}, ErrBadState, "version 0x0302, neither TLS 1.2 (0x0303) nor TLS 1.3 (0x0304)"},
		{"halfConn version", func(m *fakeMemory) { le.PutUint16(conn(m)[o.out+o.halfVersion:], 0x0303) }, ErrBadState, "a halfConn's version is 0x0303, the Conn's 0x0304"},
		{"a suite of TLS 1.3 Go lacks", func(m *fakeMemory) { le.PutUint16(conn(m)[o.cipherSuite:], 0x1304) }, ErrBadState, "cipher suite 0x1304, not one of TLS 1.3's"},
		{"a TLS 1.2 suite in TLS 1.3", func(m *fakeMemory) { le.PutUint16(conn(m)[o.cipherSuite:], 0xc02b) }, ErrBadState, "cipher suite 0xc02b"},
		{"a secret of the wrong length", func(m *fakeMemory) { le.PutUint64(conn(m)[o.in+o.trafficSecret+8:], 48) }, ErrBadState, "in's traffic secret is 48 bytes (capacity 32, at 0x20000), not the 32 of TLS_AES_128_GCM_SHA256"},
		{"a SHA-384 suite with a 32-byte secret", func(m *fakeMemory) { le.PutUint16(conn(m)[o.cipherSuite:], 0x1302) }, ErrBadState, "not the 48 of TLS_AES_256_GCM_SHA384"},
		{"a huge capacity", func(m *fakeMemory) { le.PutUint64(conn(m)[o.out+o.trafficSecret+16:], 1<<40) }, ErrBadState, "out's traffic secret is 32 bytes (capacity 1099511627776"},
		{"a secret of zeros", func(m *fakeMemory) { clear(m.regions[fakeOut]) }, ErrBadState, "all zeros"},
		{"a secret unmapped", func(m *fakeMemory) { le.PutUint64(conn(m)[o.in+o.trafficSecret:], 0x99000) }, nil, "in's traffic secret: reading 32 bytes at 0x99000: not mapped"},
		{"no net.Conn", func(m *fakeMemory) { le.PutUint64(conn(m)[o.netConn:], 0) }, ErrNotTCP, "its net.Conn is nil"},
		{"closed", func(m *fakeMemory) { le.PutUint64(m.regions[fakeNetFD][o.sysfd:], ^uint64(0)) }, ErrNotTCP, "closed (fd -1)"},
		{"a Unix socket", func(m *fakeMemory) { le.PutUint64(m.regions[fakeNetFD][o.family:], afUnix) }, ErrNotTCP, "is a Unix socket"},
		{"a datagram socket", func(m *fakeMemory) { le.PutUint64(m.regions[fakeNetFD][o.sotype:], 2) }, ErrNotTCP, "family 2, type 2: not a TCP socket"},
		{"not a socket", func(m *fakeMemory) { le.PutUint64(m.regions[fakeNetFD][o.sysfd:], uint64(devNull.Fd())) }, ErrNotTCP, "is /dev/null, not a socket"},
		{"no such fd", func(m *fakeMemory) { le.PutUint64(m.regions[fakeNetFD][o.sysfd:], 1<<20) }, ErrNotTCP, "fd 1048576"},
		{"TLS 1.2, a suite Go lacks", func(m *fakeMemory) {
			le.PutUint16(conn(m)[o.vers:], 0x0303)
			le.PutUint16(conn(m)[o.in+o.halfVersion:], 0x0303)
			le.PutUint16(conn(m)[o.out+o.halfVersion:], 0x0303)
			le.PutUint16(conn(m)[o.cipherSuite:], 0x1301)
		}, ErrBadState, "TLS 1.2 with cipher suite 0x1301"},
		{"TLS 1.2 in a program without its closure", func(m *fakeMemory) { toTLS12(m, o); l.tls12 = "it has none of crypto/tls.x.func1" }, ErrTLS12, "(TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256): self: it has none of crypto/tls.x.func1"},
		{"TLS 1.2 without ekm", func(m *fakeMemory) { toTLS12(m, o); le.PutUint64(conn(m)[o.ekm:], 0) }, ErrBadState, "TLS 1.2 with no ekm closure"},
		{"TLS 1.2, another closure", func(m *fakeMemory) { le.PutUint64(ekm(m), fakeEKMPC+16) }, ErrBadState, "Conn.ekm runs the code at 0x401010, not an ekmFromMasterSecret closure"},
		{"TLS 1.2, a short master secret", func(m *fakeMemory) { le.PutUint64(ekm(m)[l.closure.master+8:], 32) }, ErrBadState, "the ekm closure's master secret is 32 bytes (capacity 48, at 0x41000), not 48"},
		{"TLS 1.2, a long random", func(m *fakeMemory) { le.PutUint64(ekm(m)[l.closure.server+8:], 48) }, ErrBadState, "the ekm closure's server random is 48 bytes (capacity 32"},
		{"TLS 1.2, a random of zeros", func(m *fakeMemory) { ekm(m); m.regions[fakeCR] = make([]byte, 32) }, ErrBadState, "the client random is all zeros"},
		{"changed meanwhile", func(m *fakeMemory) {
			m.change = func(m *fakeMemory, read int) {
				if read > 1 {
					le.PutUint64(conn(m)[o.out+o.trafficSecret:], fakeIn)
				}
			}
		}, ErrBadState, "changed while it was read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fakeConnMemory(l, fd)
			c.edit(m)
			_, err := readConnState(m, pid, fakeConn, l)
			l.tls12 = ""
			if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v; want one line wrapping %v, saying %q", err, c.want, c.says)
			}
		})
	}
}

// TestFindClosure: the search for the master secret and randoms in kwatch's
// own closure stays within the closure, though the next heap object is the
// other end's closure with the same secrets, and refuses a closure in which
// a secret is found twice or not at all.
func TestFindClosure(t *testing.T) {
	client, server, keylog, err := handshake12()
	if err != nil {
		t.Fatal(err)
	}
	defer client.NetConn().Close()
	defer server.NetConn().Close()
	random, master := keyLogRandom(t, keylog)
	rs, err := ownStructs()
	if err != nil {
		t.Fatal(err)
	}
	ekmOff, _, err := rs.field(tConn, "ekm")
	if err != nil {
		t.Fatal(err)
	}
	self := procMemory{pid: os.Getpid()}
	var w [8]byte
	if err := self.read(addrOf(client)+ekmOff, w[:]); err != nil {
		t.Fatal(err)
	}
	clo := make([]byte, ownClosureSize)
	if err := self.read(binary.LittleEndian.Uint64(w[:]), clo); err != nil {
		t.Fatal(err)
	}
	want, _, err := findClosure(self, addrOf(client)+ekmOff, random, master, ownFunc)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	const ekmAt, cloAt, bytesAt = 0x1000, 0x2000, 0x3000
	fake := func(edit func(c []byte)) *fakeMemory {
		c := append([]byte(nil), clo...)
		for i, off := range []uint64{want.master, want.client, want.server} {
			le.PutUint64(c[off:], bytesAt+uint64(64*i))
		}
		edit(c)
		secrets := make([]byte, 3*64)
		copy(secrets, master)
		copy(secrets[64:], random)
		copy(secrets[128:], "a server random of thirty-two by")
		ekm := make([]byte, 8)
		le.PutUint64(ekm, cloAt)
		// The closure, and after it the same again.
		return &fakeMemory{regions: map[uint64][]byte{ekmAt: ekm, cloAt: append(c, c...), bytesAt: secrets}}
	}
	got, _, err := findClosure(fake(func([]byte) {}), ekmAt, random, master, ownFunc)
	if err != nil || got != want {
		t.Errorf("%+v, %v; want %+v", got, err, want)
	}
	for _, c := range []struct {
		name string
		edit func(c []byte)
		says string
	}{
		{"the master secret twice", func(c []byte) { copy(c[want.server:want.server+24], c[want.master:]) }, "the master secret at"},
		{"no client random", func(c []byte) { le.PutUint64(c[want.client+8:], 31) }, "the client random at []"},
		{"not a closure of ekmFromMasterSecret", func(c []byte) { le.PutUint64(c, uint64(reflect.ValueOf(TestFindClosure).Pointer())) }, "not an ekmFromMasterSecret closure"},
	} {
		if _, _, err := findClosure(fake(c.edit), ekmAt, random, master, ownFunc); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.says)
		}
	}
}
