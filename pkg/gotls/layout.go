package gotls

// Where the fields ReadConnState reads are in a program's structs:
// crypto/tls.Conn and its halfConns, and the chain from its net.Conn to
// the socket's file descriptor. From the program's DWARF when it has it;
// for a stripped program, from its own runtime type descriptors
// (rtypes.go) when kwatch reads its release's module data, else from this
// program's own crypto/tls and net (reflect) when both were built by the
// same Go release (major.minor), and for no other.

import (
	"bytes"
	"crypto/tls"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// ErrNoLayout is wrapped by LayoutFor's error when the executable has no
// DWARF, its type descriptors cannot be read (a release whose module data
// kwatch does not know, or data that does not check out) and it was built
// by another Go release than kwatch.
var ErrNoLayout = errors.New("no layout of crypto/tls.Conn known for this program")

// LayoutSource says where a Layout's offsets come from.
type LayoutSource int

const (
	// FromDWARF: the executable's own debugging information
	// (debug/dwarf: the struct types crypto/tls.Conn, crypto/tls.halfConn,
	// net.TCPConn, net.conn, net.netFD, internal/poll.FD and
	// sync/atomic.Bool, their members' DW_AT_data_member_location and
	// sizes).
	FromDWARF LayoutSource = iota + 1
	// FromReflect: kwatch's own crypto/tls and net, through reflect
	// (reflect.Type.FieldByName works on unexported fields), used for a
	// stripped executable built by the same Go release (major.minor) as
	// kwatch, whose structs are then the same.
	FromReflect
	// FromTypes: the executable's own runtime type descriptors
	// (internal/abi.StructType: every field's name, type and byte
	// offset), found through its module data (findModule) for the
	// releases kwatch knows that of (moduleWords: Go 1.21 to 1.27), used
	// for a stripped executable.
	FromTypes
)

// String returns "DWARF", "reflect" or "type descriptors".
func (s LayoutSource) String() string {
	switch s {
	case FromDWARF:
		return "DWARF"
	case FromReflect:
		return "reflect"
	case FromTypes:
		return "type descriptors"
	}
	return fmt.Sprintf("LayoutSource(%d)", int(s))
}

// Layout is where ReadConnState finds what it reads in the processes of one
// executable: field offsets in crypto/tls.Conn and halfConn (crypto/tls's
// conn.go), net.TCPConn, net.netFD and internal/poll.FD, each checked for
// the size its type must have, and the address of the runtime type
// descriptor of *net.TCPConn when it can be found. Make one with
// LayoutFor; it holds no memory of any process.
type Layout struct {
	// Path is the executable as given to LayoutFor.
	Path string
	// Source says where the offsets come from.
	Source LayoutSource
	// GoVersion is the Go release that built the executable
	// (debug/buildinfo), e.g. "go1.26.8".
	GoVersion string
	// TCPConnType is the address, as linked, of the runtime type
	// descriptor (internal/abi.Type) of *net.TCPConn in the executable,
	// found through the itab go:itab.*net.TCPConn,net.Conn (symbol table)
	// or the module data's itabs; 0 when not found, and
	// then the dynamic type of a Conn's net.Conn is not compared, only its
	// socket checked.
	TCPConnType uint64

	off    offsets
	dev    uint64 // the executable's device and inode
	ino    uint64
	pie    bool      // ET_DYN: loaded at an address of the loader's choice
	loads  []loadSeg // its PT_LOAD segments
	types  uint64    // moduledata.types as linked (names of type descriptors); 0 unknown
	etypes uint64    // moduledata.etypes as linked

	// TLS 1.2 (tls12.go): where the master secret and randoms are in the
	// closure Conn.ekm points to, and the entries (as linked) of the
	// functions such a closure runs; tls12 says why TLS 1.2 cannot be
	// read when it cannot ("" when it can).
	closure  closureOffsets
	ekmFuncs []uint64
	tls12    string
}

// String says where the layout comes from: "DWARF of go1.26.8".
func (l *Layout) String() string { return l.Source.String() + " of " + l.GoVersion }

// loadSeg is a PT_LOAD program header's addresses.
type loadSeg struct{ vaddr, off, filesz uint64 }

// offsets are the byte offsets ReadConnState uses, and the sizes that bound
// its reads.
type offsets struct {
	connSize           uint64 // crypto/tls.Conn
	netConn            uint64 // Conn.conn, a net.Conn (itab, data)
	isClient           uint64 // Conn.isClient, a bool
	handshakeComplete  uint64 // Conn.isHandshakeComplete.v, a uint32 (atomic.Bool)
	vers               uint64 // Conn.vers, a uint16
	haveVers           uint64 // Conn.haveVers, a bool
	cipherSuite        uint64 // Conn.cipherSuite, a uint16
	in, out            uint64 // Conn.in, Conn.out, halfConns
	ekm                uint64 // Conn.ekm, a func value (a pointer to its closure)
	halfSize           uint64 // crypto/tls.halfConn
	halfVersion        uint64 // halfConn.version, a uint16
	seq                uint64 // halfConn.seq, [8]byte
	trafficSecret      uint64 // halfConn.trafficSecret, a []byte
	tcpFD              uint64 // net.TCPConn.conn.fd, a *net.netFD
	netFDSize          uint64 // net.netFD
	sysfd              uint64 // netFD.pfd.Sysfd, an int
	family, sotype     uint64 // netFD.family, netFD.sotype, ints
	ptrSize, sliceSize uint64 // 8 and 24 on 64-bit
}

// structs gives the fields of the struct types a layout is made of, by
// type name as DWARF names them.
type structs interface {
	// field returns the offset and size of field name of struct typ.
	field(typ, name string) (off, size uint64, err error)
	// size returns the size of struct typ.
	size(typ string) (uint64, error)
}

// Struct type names, as Go's DWARF names them.
const (
	tConn     = "crypto/tls.Conn"
	tHalfConn = "crypto/tls.halfConn"
	tTCPConn  = "net.TCPConn"
	tNetConn  = "net.conn"
	tNetFD    = "net.netFD"
	tPollFD   = "internal/poll.FD"
	tBool     = "sync/atomic.Bool"
)

var structNames = []string{tConn, tHalfConn, tTCPConn, tNetConn, tNetFD, tPollFD, tBool}

// makeOffsets reads the offsets from s, checking each field's size: a
// field of an unexpected size is a layout that does not fit, refused.
func makeOffsets(s structs) (offsets, error) {
	const ptr, slice, iface = 8, 24, 16
	var errs []error
	f := func(typ, name string, want uint64) uint64 {
		off, size, err := s.field(typ, name)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		if size != want {
			errs = append(errs, fmt.Errorf("%s.%s is %d bytes, not %d", typ, name, size, want))
		}
		return off
	}
	sz := func(typ string) uint64 {
		n, err := s.size(typ)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	o := offsets{ptrSize: ptr, sliceSize: slice}
	o.connSize = sz(tConn)
	o.halfSize = sz(tHalfConn)
	o.netConn = f(tConn, "conn", iface)
	o.isClient = f(tConn, "isClient", 1)
	o.handshakeComplete = f(tConn, "isHandshakeComplete", 4) + f(tBool, "v", 4)
	o.vers = f(tConn, "vers", 2)
	o.haveVers = f(tConn, "haveVers", 1)
	o.cipherSuite = f(tConn, "cipherSuite", 2)
	o.in = f(tConn, "in", o.halfSize)
	o.out = f(tConn, "out", o.halfSize)
	o.ekm = f(tConn, "ekm", ptr)
	o.halfVersion = f(tHalfConn, "version", 2)
	o.seq = f(tHalfConn, "seq", 8)
	o.trafficSecret = f(tHalfConn, "trafficSecret", slice)
	o.tcpFD = f(tTCPConn, "conn", ptr) + f(tNetConn, "fd", ptr)
	o.netFDSize = sz(tNetFD)
	o.sysfd = f(tNetFD, "pfd", sz(tPollFD)) + f(tPollFD, "Sysfd", 8)
	o.family = f(tNetFD, "family", 8)
	o.sotype = f(tNetFD, "sotype", 8)
	if err := errors.Join(errs...); err != nil {
		return offsets{}, oneLine(err)
	}
	if max(o.out+o.halfSize, o.ekm+ptr) > o.connSize || o.connSize > maxRead || o.netFDSize > maxRead {
		return offsets{}, fmt.Errorf("crypto/tls.Conn of %d bytes with its out at %d, net.netFD of %d: not a layout to read", o.connSize, o.out, o.netFDSize)
	}
	return o, nil
}

// oneLine joins the lines of err's message with "; ".
func oneLine(err error) error {
	return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
}

// reflectStructs is structs from this program's own types.
type reflectStructs map[string]reflect.Type

// ownStructs returns this program's types of structNames, reached from
// crypto/tls.Conn and net.TCPConn through their fields' types (halfConn,
// net.conn, netFD and poll.FD are unexported).
var ownStructs = sync.OnceValues(func() (reflectStructs, error) {
	field := func(t reflect.Type, name string) (reflect.Type, error) {
		if t == nil {
			return nil, errors.New("no type")
		}
		f, ok := t.FieldByName(name)
		if !ok {
			return nil, fmt.Errorf("%s has no field %s", t, name)
		}
		return f.Type, nil
	}
	conn := reflect.TypeFor[tls.Conn]()
	tcp := reflect.TypeFor[net.TCPConn]()
	half, err1 := field(conn, "in")
	nc, err2 := field(tcp, "conn")
	fdp, err3 := field(nc, "fd")
	var fd reflect.Type
	if fdp != nil && fdp.Kind() == reflect.Pointer {
		fd = fdp.Elem()
	}
	pfd, err4 := field(fd, "pfd")
	b, err5 := field(conn, "isHandshakeComplete")
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, oneLine(err)
	}
	return reflectStructs{tConn: conn, tHalfConn: half, tTCPConn: tcp, tNetConn: nc, tNetFD: fd, tPollFD: pfd, tBool: b}, nil
})

func (r reflectStructs) field(typ, name string) (uint64, uint64, error) {
	t := r[typ]
	if t == nil || t.Kind() != reflect.Struct {
		return 0, 0, fmt.Errorf("no struct %s", typ)
	}
	f, ok := t.FieldByName(name)
	if !ok || len(f.Index) != 1 {
		return 0, 0, fmt.Errorf("%s has no field %s", typ, name)
	}
	return uint64(f.Offset), uint64(f.Type.Size()), nil
}

func (r reflectStructs) size(typ string) (uint64, error) {
	t := r[typ]
	if t == nil {
		return 0, fmt.Errorf("no struct %s", typ)
	}
	return uint64(t.Size()), nil
}

// goMinor returns a Go version's release, "go1.26" for "go1.26.8",
// "go1.26rc1", "go1.26.8 X:nocoverageredesign" or a development
// toolchain's "devel go1.26-abcdef"; "" if v is not one.
func goMinor(v string) string {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(v, "devel "), "go1.")
	if !ok {
		return ""
	}
	i := 0
	for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
		i++
	}
	if i == 0 {
		return ""
	}
	return "go1." + rest[:i]
}

// LayoutFor reads the layout of the executable at path (an ordinary file
// or /proc/PID/exe): from its DWARF when it has the struct types (an
// unstripped build), else from its type descriptors (FromTypes) when it was
// built by a release whose module data kwatch reads (moduleWords: Go 1.21
// to 1.27), found with or without section headers, PIE or not (findModule),
// else from kwatch's own types (FromReflect) when the executable was built
// by the same Go release as kwatch (the same major.minor:
// runtime.Version()), else not at all: an error wrapping ErrNoLayout that
// says which release built it and which ones kwatch knows.
// It also looks for *net.TCPConn's type descriptor (Layout.TCPConnType),
// and for where a TLS 1.2 connection's master secret is kept (tls12.go):
// a program it cannot say that of still gets a layout, for TLS 1.3.
// Errors are one line and name the path.
func LayoutFor(path string) (*Layout, error) {
	return layoutFor(path, runtime.Version(), runtime.GOARCH)
}

// layoutFor is LayoutFor for a kwatch built by Go release own for arch
// ownArch: what reflect's layout is of.
func layoutFor(path, own, ownArch string) (l *Layout, err error) {
	f, err := openMapped(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	err = readMapped(path, func() error {
		l, err = layoutIn(path, f, own, ownArch)
		return err
	})
	return l, err
}

// layoutIn is layoutFor on the file f, mapped.
func layoutIn(path string, f *mappedFile, own, ownArch string) (*Layout, error) {
	st, ok := f.fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("%s: no device and inode", path)
	}
	ef, err := openELF(path, f)
	if err != nil {
		return nil, err
	}
	arch := archOf(ef)
	if arch == "" {
		return nil, fmt.Errorf("%s: %w: %v %v (amd64 and arm64 are supported)", path, ErrUnsupportedArch, ef.Machine, ef.Class)
	}
	l := &Layout{Path: path, dev: st.Dev, ino: st.Ino, pie: ef.Type == elf.ET_DYN}
	img := mappedImage(ef, f)
	if l.GoVersion = goVersion(f, img); l.GoVersion == "" {
		return nil, fmt.Errorf("%s: %w (no Go build information)", path, ErrNotGo)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			l.loads = append(l.loads, loadSeg{vaddr: p.Vaddr, off: p.Off, filesz: p.Filesz})
		}
	}
	var s structs
	var closures []dwarfClosure
	d, infoSize, err := loadDWARF(img)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, dwarfError(err))
	}
	if d != nil {
		ds, cs, err := readDWARF(d, infoSize)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, dwarfError(err))
		}
		if _, ok := ds[tConn]; ok {
			s, l.Source, closures = ds, FromDWARF, cs
		}
	}
	own, rel := goMinor(own), goMinor(l.GoVersion)
	sameRelease := rel != "" && rel == own && arch == ownArch
	// The function table and the module data, read once: the type
	// descriptors of a stripped program's structs and *net.TCPConn's
	// (tcpConnType) are found through the module data, which is found
	// through the function table, which also names the TLS 1.2 closures.
	tab, modErr := findPclntab(img)
	if modErr == nil && tab == nil {
		modErr = errors.New("no Go function table (.gopclntab) found")
	}
	var m module
	if modErr == nil {
		var addr uint64
		if addr, modErr = img.module(tab); modErr == nil {
			m, modErr = readModule(img, addr, rel)
		}
	}
	if s == nil {
		terr := modErr
		var ts typeStructs
		if terr == nil {
			ts, terr = readTypeStructs(img, m)
		}
		switch {
		case terr == nil:
			s, l.Source = ts, FromTypes
		case sameRelease:
			rs, err := ownStructs()
			if err != nil {
				return nil, fmt.Errorf("%s: kwatch's own crypto/tls: %w", path, err)
			}
			s, l.Source = rs, FromReflect
		default:
			why := fmt.Sprintf("kwatch reads type descriptors of %s only", releases(moduleWords))
			if _, known := moduleWords[rel]; known {
				why = "its type descriptors: " + terr.Error()
			}
			return nil, fmt.Errorf("%s: %w: it has no DWARF (stripped) and was built by %s for %s; %s, and has the layout of its own release %s for %s (build the program without -ldflags=-w to keep its DWARF)", path, ErrNoLayout, l.GoVersion, arch, why, own, ownArch)
		}
	}
	if l.off, err = makeOffsets(s); err != nil {
		return nil, fmt.Errorf("%s: %s layout: %w", path, l.Source, err)
	}
	l.TCPConnType, l.types, l.etypes = tcpConnType(img, m, modErr == nil)
	l.closure, l.ekmFuncs, l.tls12 = ekmLayout(img, tab, closures, l.GoVersion, own, sameRelease)
	return l, nil
}

// Names of the itab of *net.TCPConn for net.Conn in the symbol table: Go
// 1.20 on, and before.
var tcpConnItabs = []string{"go:itab.*net.TCPConn,net.Conn", "go.itab.*net.TCPConn,net.Conn"}

// tcpConnType returns the address, as linked, of *net.TCPConn's type
// descriptor in img's executable, and of moduledata.types and .etypes (0
// for each not found): the second word of the itab named
// "go:itab.*net.TCPConn,net.Conn" (internal/abi.ITab: Inter, Type, ...)
// when the symbol table has it; else, when the module data m could be read
// (ok: a release in moduleWords), the itab in it whose interface is named
// net.Conn and whose type is the pointer type *net.TCPConn.
func tcpConnType(img *image, m module, ok bool) (typ, types, etypes uint64) {
	itabs := symbolsOf(img, len(tcpConnItabs[0]), false, func(name []byte) bool { return slices.Contains(tcpConnItabs, string(name)) })
	for _, name := range tcpConnItabs {
		if a, ok := itabs[name]; ok && typ == 0 {
			if t, ok := img.word(a + 8); ok {
				typ = t
			}
		}
	}
	if !ok {
		return typ, 0, 0
	}
	if typ != 0 {
		return typ, m.types, m.etypes
	}
	for _, ip := range m.itabs {
		if name, kind, ok := typeName(img.read, m.types, m.etypes, ip.typ); ok && name == "*net.TCPConn" && kind == kindPointer {
			if iname, _, ok := typeName(img.read, m.types, m.etypes, ip.inter); ok && iname == "net.Conn" {
				return ip.typ, m.types, m.etypes
			}
		}
	}
	return 0, m.types, m.etypes
}

// Kinds and flags of internal/abi.Type (internal/abi/type.go).
const (
	kindPointer    = 22
	kindMask       = 0x1f
	tflagExtraStar = 1 << 1
	abiTypeSize    = 48 // Size_, PtrBytes, Hash, TFlag, Align_, FieldAlign_, Kind_, Equal, GCData, Str, PtrToThis
	abiTypeTFlag   = 20
	abiTypeKind    = 23
	abiTypeStr     = 40
	maxTypeName    = 256
)

// typeName returns the name and kind of the type descriptor at t, reading
// with read between types and etypes (moduledata.types and .etypes, in the
// same address space as t): its Str is an offset from types to a name
// (internal/abi.Name: a flags byte, a varint length, the bytes), returned
// without the leading '*' that TFlagExtraStar marks.
func typeName(read func(addr, n uint64) ([]byte, bool), types, etypes, t uint64) (string, uint8, bool) {
	if types == 0 || t < types || t+abiTypeSize > etypes {
		return "", 0, false
	}
	b, ok := read(t, abiTypeSize)
	if !ok {
		return "", 0, false
	}
	str := int32(binary.LittleEndian.Uint32(b[abiTypeStr:]))
	if str <= 0 || types+uint64(str) >= etypes {
		return "", 0, false
	}
	addr := types + uint64(str)
	head, ok := read(addr, 1+binary.MaxVarintLen16)
	if !ok {
		return "", 0, false
	}
	n, w := binary.Uvarint(head[1:])
	if w <= 0 || n == 0 || n > maxTypeName {
		return "", 0, false
	}
	name, ok := read(addr+1+uint64(w), n)
	if !ok || bytes.IndexByte(name, 0) >= 0 {
		return "", 0, false
	}
	s := string(name)
	if b[abiTypeTFlag]&tflagExtraStar != 0 && len(s) > 1 {
		s = s[1:]
	}
	return s, b[abiTypeKind] & kindMask, true
}
