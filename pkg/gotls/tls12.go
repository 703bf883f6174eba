package gotls

// TLS 1.2: a crypto/tls.Conn holds no traffic secret, and neither its
// master secret nor its key block as fields. What it still holds after the
// handshake, read in Go 1.26's crypto/tls:
//
//   - Conn.in and Conn.out: each halfConn's seq, and its cipher (an
//     AEAD: prefixNonceAEAD with the 4-byte fixed IV for AES-GCM,
//     xorNonceAEAD with the 12-byte IV for ChaCha20-Poly1305, around the
//     cipher's expanded key schedule; or a CBC cipher and its mac). The
//     key block could be rebuilt from those, but only through the
//     internals of crypto/internal/fips140's AES and GCM, which change
//     more often than crypto/tls.
//   - Conn.ekm, the closure ExportKeyingMaterial calls: handshake_client.go
//     and handshake_server.go set it, after every full or resumed TLS 1.2
//     handshake, to ekmFromMasterSecret(c.vers, hs.suite, hs.masterSecret,
//     clientRandom, serverRandom) (prf.go), whose closure captures the
//     master secret and both randoms by value: 48 + 32 + 32 bytes, with
//     which RFC 5246 section 6.3 gives the key block. (ConnectionState
//     hides ekm behind noEKMBecauseNoEMS without extended master secret;
//     the Conn's own field is set regardless.)
//
// So ReadConnState reads the closure: its function (the closure's first
// word) must be one of crypto/tls's ekmFromMasterSecret closures, and its
// captured slices must have the right lengths. Where the captured
// variables are in the closure is the compiler's choice: DWARF says it
// (DW_AT_go_closure_offset on the closure function's variables, Go 1.23
// on); for a stripped program, kwatch's table for its release says it
// (ekmClosures: Go 1.21 to 1.27, each checked against that release's
// source, DWARF and a running program), and the closures' functions are
// found by name in its function table, which stripping keeps; for a
// stripped program of kwatch's own release that the table does not know,
// kwatch finds it in its own crypto/tls by making a TLS 1.2 handshake with
// itself over net.Pipe and looking for the key log's master secret and
// client random in the closure (ownEKMClosure).

import (
	"bytes"
	"crypto/tls"
	"debug/dwarf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/kwatch/kwatch/internal/testcert"
)

// closureOffsets are the offsets, in bytes, of ekmFromMasterSecret's
// captured masterSecret, clientRandom and serverRandom ([]byte each) in its
// closure (after the function pointer at 0).
type closureOffsets struct{ master, client, server uint64 }

// maxClosure bounds the closure read: its function pointer and captured
// variables (version, suite and three slice headers: 96 bytes in Go 1.26).
const maxClosure = 256

// ownClosureSize bounds the search in kwatch's own closure: the function
// pointer and ekmFromMasterSecret's five parameters, the most it can
// capture, by value (a uint16 and a pointer, 8 bytes each, and three slice
// headers): 96 bytes. Past it lies another heap object, which may well be
// the other end's closure with the same secrets.
const ownClosureSize = 8 + 8 + 8 + 3*24

// Lengths of what a TLS 1.2 closure holds (RFC 5246 sections 7.4.1.2,
// 8.1).
const (
	masterSecretLen = 48
	helloRandomLen  = 32
)

// dwAtGoClosureOffset is Go's DWARF attribute for a captured variable's
// offset in its closure (cmd/internal/dwarf: DW_AT_go_closure_offset).
const dwAtGoClosureOffset = dwarf.Attr(0x2907)

// isEKMClosure reports whether name is one of crypto/tls's
// ekmFromMasterSecret closures: "crypto/tls.ekmFromMasterSecret.func1", or,
// where the function was inlined,
// "crypto/tls.(*clientHandshakeState).handshake.ekmFromMasterSecret.func1"
// and the server's.
func isEKMClosure(name string) bool {
	return strings.HasPrefix(name, "crypto/tls.") && strings.HasSuffix(name, ekmClosureSuffix)
}

// ekmClosureSuffix ends the name of every ekmFromMasterSecret closure.
const ekmClosureSuffix = "ekmFromMasterSecret.func1"

// maxEKMName bounds the name of an ekmFromMasterSecret closure looked for
// in a function table: the longest, where the compiler inlined the
// function into a handshake method, is 70 bytes in Go 1.21 to 1.27
// ("crypto/tls.(*clientHandshakeState).handshake.ekmFromMasterSecret.func1").
const maxEKMName = 256

// dwarfClosure is what DWARF says of one ekmFromMasterSecret closure.
type dwarfClosure struct {
	name  string
	entry uint64 // DW_AT_low_pc
	off   closureOffsets
	has   int // how many of the three offsets it gave
}

// add reads the variable v of the closure's function: the offset in the
// closure of a captured masterSecret, clientRandom or serverRandom.
func (c *dwarfClosure) add(v *dwarf.Entry) {
	var off uint64
	switch x := v.Val(dwAtGoClosureOffset).(type) {
	case int64:
		off = uint64(x)
	case uint64:
		off = x
	default:
		return
	}
	name, _ := v.Val(dwarf.AttrName).(string)
	switch name {
	case "masterSecret":
		c.off.master = off
	case "clientRandom":
		c.off.client = off
	case "serverRandom":
		c.off.server = off
	default:
		return
	}
	c.has++
}

// dwarfEKM returns the closure offsets and entries the DWARF gave, or why
// TLS 1.2 cannot be read.
func dwarfEKM(closures []dwarfClosure) (closureOffsets, []uint64, string) {
	if len(closures) == 0 {
		return closureOffsets{}, nil, "its DWARF has no ekmFromMasterSecret closure"
	}
	var entries []uint64
	for _, c := range closures {
		switch {
		case c.has != 3:
			return closureOffsets{}, nil, fmt.Sprintf("its DWARF gives no closure offsets for %s (DW_AT_go_closure_offset: Go 1.23 on)", c.name)
		case c.off != closures[0].off:
			return closureOffsets{}, nil, fmt.Sprintf("its DWARF gives %s other closure offsets than %s", c.name, closures[0].name)
		case c.entry == 0:
			return closureOffsets{}, nil, fmt.Sprintf("its DWARF gives no address for %s", c.name)
		}
		entries = append(entries, c.entry)
	}
	if err := checkClosure(closures[0].off); err != nil {
		return closureOffsets{}, nil, "its DWARF: " + err.Error()
	}
	return closures[0].off, entries, ""
}

// checkClosure checks that the three slices lie apart, after the
// function pointer, within maxClosure.
func checkClosure(o closureOffsets) error {
	offs := []uint64{o.master, o.client, o.server}
	slices.Sort(offs)
	if offs[0] < 8 || offs[1] < offs[0]+24 || offs[2] < offs[1]+24 || offs[2]+24 > maxClosure {
		return fmt.Errorf("closure offsets %d, %d, %d do not fit three slices", o.master, o.client, o.server)
	}
	return nil
}

// ekmClosures is where each release's ekmFromMasterSecret closure keeps
// the master secret and randoms: crypto/tls's prf.go of go1.21 to go1.27
// (the same function in each; its body changed in go1.24, where the PRF
// returns the key material instead of filling a slice, not what it
// captures) returns a closure that captures, by value, in the order its
// body first uses them, serverRandom, clientRandom, version, suite and
// masterSecret; the compiler lays the closure out as a struct of its
// function pointer and those (cmd/compile's closure type): serverRandom
// at 8, clientRandom at 32, version at 56, suite at 64, masterSecret at
// 72. Checked for each release: against its DWARF
// (DW_AT_go_closure_offset, go1.23 on) and, for go1.21 and go1.22, whose
// DWARF does not say, by a TLS 1.2 handshake of a program that release
// built, the closure found in its memory (TestEKMClosures).
var ekmClosures = map[string]closureOffsets{
	"go1.21": {master: 72, client: 32, server: 8},
	"go1.22": {master: 72, client: 32, server: 8},
	"go1.23": {master: 72, client: 32, server: 8},
	"go1.24": {master: 72, client: 32, server: 8},
	"go1.25": {master: 72, client: 32, server: 8},
	"go1.26": {master: 72, client: 32, server: 8},
	"go1.27": {master: 72, client: 32, server: 8},
}

// ekmLayout returns where a TLS 1.2 connection's master secret and randoms
// are in the closure Conn.ekm points to, and the entries of the functions
// such a closure runs, for the executable built by Go version version
// (kwatch's own release being own), or why that cannot be said. The
// offsets come from the DWARF's closures when it gives them, else from
// ekmClosures for the release, else, for a program of kwatch's own
// release, from kwatch's own closure (ownEKMClosure); the entries from
// the DWARF, else the symbol table, else the function table (their names
// survive stripping).
func ekmLayout(img *image, tab *pclntab, closures []dwarfClosure, version, own string, sameRelease bool) (closureOffsets, []uint64, string) {
	var offsets []closureOffsets
	var entries []uint64
	for _, c := range closures {
		if c.has == 3 {
			offsets = append(offsets, c.off)
		}
		if c.entry != 0 {
			entries = append(entries, c.entry)
		}
	}
	if len(offsets) > 0 {
		return dwarfEKM(closures)
	}
	rel := goMinor(version)
	o, known := ekmClosures[rel]
	switch {
	case known:
	case sameRelease:
		own, err := ownEKMClosure()
		if err != nil {
			return closureOffsets{}, nil, "kwatch's own TLS 1.2 closure: " + err.Error()
		}
		o = own.off
	default:
		return closureOffsets{}, nil, fmt.Sprintf("where a TLS 1.2 connection's master secret is kept (the closure of crypto/tls's ekmFromMasterSecret) is known for %s and from DWARF, and this program was built by %s with no DWARF closure offsets", releases(ekmClosures), version)
	}
	if len(entries) == 0 {
		var err error
		if entries, err = ekmEntries(img, tab); err != nil {
			return closureOffsets{}, nil, "its ekmFromMasterSecret closures: " + err.Error()
		}
	}
	if len(entries) == 0 {
		return closureOffsets{}, nil, "it has no crypto/tls ekmFromMasterSecret closure (no TLS 1.2 handshake in it)"
	}
	if err := checkClosure(o); err != nil {
		return closureOffsets{}, nil, err.Error()
	}
	return o, entries, ""
}

// ekmEntries returns the entries, as linked, of the executable's
// ekmFromMasterSecret closures (isEKMClosure: one for the client's
// handshake, one for the server's, where the compiler inlined
// ekmFromMasterSecret), from its symbol table, else from its function
// table t (nil: none found).
func ekmEntries(img *image, t *pclntab) ([]uint64, error) {
	var out []uint64
	for _, a := range symbolsOf(img, maxEKMName, true, func(name []byte) bool {
		return bytes.HasSuffix(name, []byte(ekmClosureSuffix)) && isEKMClosure(string(name))
	}) {
		out = append(out, a)
	}
	if len(out) == 0 && t != nil {
		funcs, err := pclnFuncs(img, t, maxEKMName, func(name []byte) bool {
			return bytes.HasSuffix(name, []byte(ekmClosureSuffix)) && isEKMClosure(string(name))
		})
		if err != nil {
			return nil, err
		}
		for _, a := range funcs {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ownClosure is where kwatch's own crypto/tls keeps the master secret and
// randoms in its ekmFromMasterSecret closures, and those closures' names.
type ownClosure struct {
	off   closureOffsets
	names []string
}

// ownEKMClosure finds the closure offsets of kwatch's own crypto/tls, once:
// a TLS 1.2 handshake between two crypto/tls.Conns of this process over
// net.Pipe, the client writing a key log (CLIENT_RANDOM: the client random
// and the master secret); then, for each end, the closure its ekm field
// points to is read (with process_vm_readv on this process, as another's
// would be) and its slices of 48 and 32 bytes compared with the key log's:
// the one that equals the master secret, the one that equals the client
// random, and the one other 32-byte slice, the server random. Both ends
// must agree.
var ownEKMClosure = sync.OnceValues(func() (ownClosure, error) {
	rs, err := ownStructs()
	if err != nil {
		return ownClosure{}, err
	}
	ekmOff, _, err := rs.field(tConn, "ekm")
	if err != nil {
		return ownClosure{}, err
	}
	client, server, keylog, err := handshake12()
	if err != nil {
		return ownClosure{}, fmt.Errorf("a TLS 1.2 handshake with itself: %w", err)
	}
	// Closed under the TLS layer: a close_notify alert would wait for
	// a reader on the pipe (tls.Conn.Close waits up to 5 s).
	defer client.NetConn().Close()
	defer server.NetConn().Close()
	random, master, err := clientRandomLine(keylog)
	if err != nil {
		return ownClosure{}, err
	}
	m := procMemory{pid: os.Getpid()}
	var out ownClosure
	for i, c := range []*tls.Conn{client, server} {
		off, name, err := findClosure(m, uint64(uintptr(unsafe.Pointer(c)))+ekmOff, random, master, ownFunc)
		if err != nil {
			return ownClosure{}, err
		}
		if i > 0 && off != out.off {
			return ownClosure{}, fmt.Errorf("the client's closure has offsets %+v, the server's %+v", out.off, off)
		}
		out.off = off
		if !slices.Contains(out.names, name) {
			out.names = append(out.names, name)
		}
	}
	runtime.KeepAlive(client)
	runtime.KeepAlive(server)
	return out, nil
})

// ownFunc names the function of this process at pc when it is one of
// crypto/tls's ekmFromMasterSecret closures.
func ownFunc(pc uint64) (string, bool) {
	fn := runtime.FuncForPC(uintptr(pc))
	if fn == nil || !isEKMClosure(fn.Name()) {
		return "", false
	}
	return fn.Name(), true
}

// findClosure reads the func value at ekm, whose function closure names
// (an ekmFromMasterSecret closure, or false), and finds the master secret
// and randoms in its closure, where they equal master and random or are
// the one other 32-byte slice.
func findClosure(m memory, ekm uint64, random, master []byte, closure func(pc uint64) (string, bool)) (closureOffsets, string, error) {
	var w [8]byte
	if err := m.read(ekm, w[:]); err != nil {
		return closureOffsets{}, "", fmt.Errorf("crypto/tls.Conn.ekm: %w", err)
	}
	clo := binary.LittleEndian.Uint64(w[:])
	if err := m.read(clo, w[:]); err != nil {
		return closureOffsets{}, "", fmt.Errorf("crypto/tls.Conn.ekm's closure: %w", err)
	}
	name, ok := closure(binary.LittleEndian.Uint64(w[:]))
	if !ok {
		return closureOffsets{}, "", fmt.Errorf("the func value at %#x (crypto/tls.Conn.ekm) runs %#x, not an ekmFromMasterSecret closure", ekm, binary.LittleEndian.Uint64(w[:]))
	}
	var o closureOffsets
	var masters, clients, servers []uint64
	for off := uint64(8); off+24 <= ownClosureSize; off += 8 {
		var h [24]byte
		if m.read(clo+off, h[:]) != nil {
			break
		}
		ptr, n, c := binary.LittleEndian.Uint64(h[:]), binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:])
		if ptr == 0 || c < n || (n != masterSecretLen && n != helloRandomLen) {
			continue
		}
		b := make([]byte, n)
		if m.read(ptr, b) != nil {
			continue
		}
		switch {
		case bytes.Equal(b, master):
			masters = append(masters, off)
		case bytes.Equal(b, random):
			clients = append(clients, off)
		case n == helloRandomLen:
			servers = append(servers, off)
		}
	}
	if len(masters) != 1 || len(clients) != 1 || len(servers) != 1 {
		return closureOffsets{}, "", fmt.Errorf("%s's closure: the master secret at %v, the client random at %v, other randoms at %v: not one each", name, masters, clients, servers)
	}
	o = closureOffsets{master: masters[0], client: clients[0], server: servers[0]}
	if err := checkClosure(o); err != nil {
		return closureOffsets{}, "", err
	}
	return o, name, nil
}

// handshake12 makes a TLS 1.2 connection between two crypto/tls.Conns of
// this process over net.Pipe, the client writing its key log, and returns
// both ends and the key log.
func handshake12() (client, server *tls.Conn, keylog string, err error) {
	cert, roots, err := testcert.NewTrusted("kwatch")
	if err != nil {
		return nil, nil, "", err
	}
	a, b := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	var kl bytes.Buffer
	client = tls.Client(a, &tls.Config{RootCAs: roots, ServerName: "kwatch", KeyLogWriter: &kl, MaxVersion: tls.VersionTLS12})
	server = tls.Server(b, &tls.Config{Certificates: []tls.Certificate{cert}, MaxVersion: tls.VersionTLS12, SessionTicketsDisabled: true})
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	err = client.Handshake()
	if serr := <-done; err == nil {
		err = serr
	}
	if err == nil && client.ConnectionState().Version != tls.VersionTLS12 {
		err = errors.New("not TLS 1.2")
	}
	if err != nil {
		a.Close()
		b.Close()
		return nil, nil, "", err
	}
	return client, server, kl.String(), nil
}

// clientRandomLine returns the client random and master secret of the key
// log's CLIENT_RANDOM line.
func clientRandomLine(keylog string) (random, master []byte, err error) {
	for line := range strings.Lines(keylog) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "CLIENT_RANDOM" {
			continue
		}
		random, err1 := hex.DecodeString(f[1])
		master, err2 := hex.DecodeString(f[2])
		if err1 != nil || err2 != nil || len(random) != helloRandomLen || len(master) != masterSecretLen {
			break
		}
		return random, master, nil
	}
	return nil, nil, errors.New("the key log of a TLS 1.2 handshake holds no CLIENT_RANDOM line")
}

// readTLS12 reads a TLS 1.2 connection's master secret and randoms from
// the closure at clo (Conn.ekm), in process pid, into s.
func readTLS12(m memory, pid int, clo uint64, l *Layout, s *ConnState) error {
	if l.tls12 != "" {
		return fmt.Errorf("%w (%s): %s: %s", ErrTLS12, tls.CipherSuiteName(s.CipherSuite), l.Path, l.tls12)
	}
	if clo == 0 {
		return fmt.Errorf("%w: TLS 1.2 with no ekm closure", ErrBadState)
	}
	o := l.closure
	buf := make([]byte, max(o.master, o.client, o.server)+24)
	if err := m.read(clo, buf); err != nil {
		return fmt.Errorf("the ekm closure: %w", err)
	}
	bias, err := loadBias(pid, l)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	if pc := le.Uint64(buf); !slices.Contains(l.ekmFuncs, pc-bias) {
		return fmt.Errorf("%w: Conn.ekm runs the code at %#x, not an ekmFromMasterSecret closure", ErrBadState, pc)
	}
	for _, c := range []struct {
		name string
		off  uint64
		n    uint64
		dst  []byte
	}{
		{"master secret", o.master, masterSecretLen, nil},
		{"client random", o.client, helloRandomLen, s.ClientRandom[:]},
		{"server random", o.server, helloRandomLen, s.ServerRandom[:]},
	} {
		ptr, n, cp := le.Uint64(buf[c.off:]), le.Uint64(buf[c.off+8:]), le.Uint64(buf[c.off+16:])
		// A random is a piece of its hello message: its capacity runs
		// to the message's end.
		if n != c.n || cp < n || c.dst == nil && cp > maxSecretLen || ptr == 0 {
			return fmt.Errorf("%w: the ekm closure's %s is %d bytes (capacity %d, at %#x), not %d", ErrBadState, c.name, n, cp, ptr, c.n)
		}
		b := make([]byte, n)
		if err := m.read(ptr, b); err != nil {
			return fmt.Errorf("the %s: %w", c.name, err)
		}
		if bytes.Count(b, []byte{0}) == len(b) {
			return fmt.Errorf("%w: the %s is all zeros", ErrBadState, c.name)
		}
		if c.dst == nil {
			s.MasterSecret = b
		} else {
			copy(c.dst, b)
		}
	}
	return nil
}
