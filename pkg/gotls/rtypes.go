package gotls

// The layout of a stripped executable from its own runtime type
// descriptors. Go keeps a descriptor (internal/abi.Type) of every type
// that is converted to an interface or reached from one, and a struct
// type's descriptor (internal/abi.StructType) lists each field — exported
// or not — by name with its type and byte offset: what reflect reads at
// run time. -s -w strips the symbol table and DWARF but not these. They
// are reached from the module data (runtime.moduledata: findModule, in
// module.go), whose fields move between releases: kwatch reads the module
// data of the releases in moduleWords (Go 1.21 to 1.27), each checked
// against that release's runtime/symtab.go and programs it built
// (TestModuleWordsSource, TestReleaseLayouts).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// moduleData is where one Go release keeps, in runtime.moduledata, what
// the type descriptors are found by: the 8-byte word index of types and
// etypes, and of the itabs, as a slice of pointers (itablinks, up to Go
// 1.26) or as an offset from types and a size in bytes of itabs laid end
// to end (Go 1.27: itaboffset, itabsize).
type moduleData struct {
	types, etypes         int
	itablinks             int // 0: none
	itabOffset, itabBytes int // 0: none
}

// moduleWords is moduleData by release, each from that release's
// runtime/symtab.go (type moduledata; TestModuleWordsSource computes them
// from each release's source, TestModuleWordsDWARF from the DWARF of a
// program each built). Go 1.21-1.25: after pcHeader, six slices,
// findfunctab, minpc, maxpc and the 15 words text to gcbss come types 37,
// etypes 38, rodata, gofunc, then three slices (textsectmap, typelinks,
// itablinks: 47). Go 1.26 adds epclntab after gofunc (itablinks 48). Go
// 1.27 adds typedesclen between types and etypes (39), itaboffset and
// itabsize (40, 41), and drops typelinks and itablinks.
var moduleWords = map[string]moduleData{
	"go1.21": {types: 37, etypes: 38, itablinks: 47},
	"go1.22": {types: 37, etypes: 38, itablinks: 47},
	"go1.23": {types: 37, etypes: 38, itablinks: 47},
	"go1.24": {types: 37, etypes: 38, itablinks: 47},
	"go1.25": {types: 37, etypes: 38, itablinks: 47},
	"go1.26": {types: 37, etypes: 38, itablinks: 48},
	"go1.27": {types: 37, etypes: 39, itabOffset: 40, itabBytes: 41},
}

// releases names the releases a table is kept for (its keys, "go1.N"),
// as a range when they follow each other: "go1.21 to go1.27".
func releases[V any](table map[string]V) string {
	var minors []int
	for r := range table {
		var n int
		if _, err := fmt.Sscanf(r, "go1.%d", &n); err == nil {
			minors = append(minors, n)
		}
	}
	slices.Sort(minors)
	switch {
	case len(minors) == 0:
		return "no release"
	case len(minors) > 2 && minors[len(minors)-1]-minors[0] == len(minors)-1:
		return fmt.Sprintf("go1.%d to go1.%d", minors[0], minors[len(minors)-1])
	}
	rs := make([]string, len(minors))
	for i, n := range minors {
		rs[i] = fmt.Sprintf("go1.%d", n)
	}
	if len(rs) == 1 {
		return rs[0]
	}
	return strings.Join(rs[:len(rs)-1], ", ") + " and " + rs[len(rs)-1]
}

// Bounds on what is read from a descriptor, against a hostile or foreign
// executable.
const (
	maxItabs       = 1 << 16 // itabs in one module (kube-apiserver 1.37 has 6 540)
	maxItabMethods = 1 << 12 // methods of one interface
	maxFields      = 1 << 10 // fields of one struct
)

// Shapes of internal/abi's type descriptors that kwatch reads, the same in
// every release from go1.21 to go1.27 (internal/abi/type.go of each;
// TestABIShapes compares them with the DWARF of a program each release
// built): Type is 48 bytes (Size_, PtrBytes, Hash, TFlag at 20, Align_,
// FieldAlign_, Kind_ at 23, Equal, GCData, Str at 40, PtrToThis);
// PtrType is a Type and Elem; StructType a Type, PkgPath (a Name) and
// Fields (a slice of StructField: Name, Typ, Offset, 24 bytes);
// InterfaceType a Type, PkgPath and Methods. The itab (runtime.itab in
// go1.21 and go1.22's runtime/runtime2.go, internal/abi.ITab from go1.23
// on): Inter, Type, Hash and 4 bytes, then Fun, one word per method.
const (
	kindStruct     = 25 // internal/abi.Struct
	abiPtrElem     = 48 // internal/abi.PtrType.Elem
	abiStructPkg   = 48 // internal/abi.StructType.PkgPath
	abiStructField = 56 // internal/abi.StructType.Fields
	abiIfaceMeths  = 56 // internal/abi.InterfaceType.Methods
	abiFieldSize   = 24 // internal/abi.StructField: Name, Typ, Offset
	abiItabFun     = 24 // internal/abi.ITab.Fun
)

// itabPair is one itab's interface and type descriptors, as linked.
type itabPair struct{ inter, typ uint64 }

// module is the part of an executable's module data kwatch reads.
type module struct {
	types, etypes uint64
	itabs         []itabPair
}

// readModule reads the module data at addr (findModule) as release lays
// it out (moduleWords). It checks that types lies before etypes in one
// segment, that the itabs lie in a segment (itablinks: its pointers, as
// many as a bounded count says; Go 1.27: between types and etypes), and
// says what does not.
func readModule(img *image, addr uint64, release string) (module, error) {
	w, known := moduleWords[release]
	if !known {
		return module{}, fmt.Errorf("kwatch reads the module data of %s only", releases(moduleWords))
	}
	word := func(i int) (uint64, bool) { return img.word(addr + 8*uint64(i)) }
	types, ok1 := word(w.types)
	etypes, ok2 := word(w.etypes)
	if !ok1 || !ok2 || types == 0 || types >= etypes || img.prog(types, etypes-types) == nil {
		return module{}, fmt.Errorf("its types %#x to etypes %#x (words %d and %d of %s's module data) are not a range of one segment", types, etypes, w.types, w.etypes, release)
	}
	m := module{types: types, etypes: etypes}
	pair := func(itab uint64) (itabPair, bool) {
		inter, ok1 := img.word(itab)
		typ, ok2 := img.word(itab + 8)
		return itabPair{inter, typ}, ok1 && ok2
	}
	switch {
	case w.itablinks != 0:
		p, ok1 := word(w.itablinks)
		n, ok2 := word(w.itablinks + 1)
		c, ok3 := word(w.itablinks + 2)
		if !ok1 || !ok2 || !ok3 || n > c || n > maxItabs || img.prog(p, 8*n) == nil {
			return module{}, fmt.Errorf("its itablinks (words %d-%d of %s's module data: %d itabs at %#x) are not a slice within a segment", w.itablinks, w.itablinks+2, release, n, p)
		}
		links, ok := img.read(p, 8*n)
		if !ok {
			return module{}, fmt.Errorf("its itablinks (%d at %#x) cannot be read", n, p)
		}
		for i := range n {
			itab := binary.LittleEndian.Uint64(links[8*i:])
			if itab == 0 {
				itab, _ = img.word(p + 8*i)
			}
			if ip, ok := pair(itab); ok {
				m.itabs = append(m.itabs, ip)
			}
		}
	case w.itabOffset != 0:
		off, ok1 := word(w.itabOffset)
		size, ok2 := word(w.itabBytes)
		if !ok1 || !ok2 || off > etypes-types || size > etypes-types-off {
			return module{}, fmt.Errorf("its itabs (%d bytes at types+%d, words %d and %d of %s's module data) are not between types and etypes", size, off, w.itabOffset, w.itabBytes, release)
		}
		// internal/abi.ITab: Inter, Type, Hash (4 bytes and 4 of
		// padding), Fun: one word for each of Inter's methods, at least
		// one; Fun[0] == 0 (not implemented) keeps one (ITab.Size).
		for p, end := types+off, types+off+size; p+32 <= end && len(m.itabs) < maxItabs; {
			ip, ok := pair(p)
			fun0, ok2 := img.word(p + abiItabFun)
			n, ok3 := img.word(ip.inter + abiIfaceMeths + 8)
			if !ok || !ok2 || !ok3 || n > maxItabMethods {
				break
			}
			m.itabs = append(m.itabs, ip)
			size := uint64(32)
			if fun0 != 0 && n > 1 {
				size += 8 * (n - 1)
			}
			p += size
		}
	}
	return m, nil
}

// typeField is one field of a struct type descriptor.
type typeField struct{ off, size, typ uint64 }

// typeStruct is a struct type descriptor: its size and fields by name.
type typeStruct struct {
	size   uint64
	fields map[string]typeField
}

// typeStructs is structs from an executable's type descriptors.
type typeStructs map[string]typeStruct

func (s typeStructs) field(typ, name string) (uint64, uint64, error) {
	st, ok := s[typ]
	if !ok {
		return 0, 0, fmt.Errorf("no struct %s among the type descriptors", typ)
	}
	f, ok := st.fields[name]
	if !ok {
		return 0, 0, fmt.Errorf("%s has no field %s in its type descriptor", typ, name)
	}
	return f.off, f.size, nil
}

func (s typeStructs) size(typ string) (uint64, error) {
	st, ok := s[typ]
	if !ok {
		return 0, fmt.Errorf("no struct %s among the type descriptors", typ)
	}
	return st.size, nil
}

// descriptors reads type descriptors from an image between a module's
// types and etypes.
type descriptors struct {
	img *image
	m   module
}

// name reads an internal/abi.Name at addr: a flags byte, a varint length,
// the bytes.
func (d descriptors) name(addr uint64) (string, bool) {
	head, ok := d.img.read(addr, 1+binary.MaxVarintLen16)
	if !ok {
		return "", false
	}
	n, w := binary.Uvarint(head[1:])
	if w <= 0 || n > maxTypeName {
		return "", false
	}
	b, ok := d.img.read(addr+1+uint64(w), n)
	return string(b), ok
}

// find returns the descriptor of the pointer type named name ("*tls.Conn")
// among the module's itabs' types.
func (d descriptors) find(name string) (uint64, bool) {
	for _, ip := range d.m.itabs {
		if n, kind, ok := typeName(d.img.read, d.m.types, d.m.etypes, ip.typ); ok && n == name && kind == kindPointer {
			return ip.typ, true
		}
	}
	return 0, false
}

// elem returns the element type of the pointer type at t.
func (d descriptors) elem(t uint64) (uint64, error) {
	if _, kind, ok := typeName(d.img.read, d.m.types, d.m.etypes, t); !ok || kind != kindPointer {
		return 0, fmt.Errorf("the type at %#x is not a pointer", t)
	}
	e, ok := d.img.word(t + abiPtrElem)
	if !ok || e < d.m.types || e >= d.m.etypes {
		return 0, fmt.Errorf("the pointer type at %#x has no element type", t)
	}
	return e, nil
}

// structAt reads the struct type at t, which must be named name (as type
// descriptors name it: "tls.Conn") with fields of package pkg.
func (d descriptors) structAt(t uint64, name, pkg string) (typeStruct, error) {
	n, kind, ok := typeName(d.img.read, d.m.types, d.m.etypes, t)
	if !ok || n != name || kind != kindStruct {
		return typeStruct{}, fmt.Errorf("the type at %#x is %q (kind %d), not the struct %s", t, n, kind, name)
	}
	b, ok := d.img.read(t, abiTypeSize)
	if !ok {
		return typeStruct{}, fmt.Errorf("%s's descriptor cannot be read", name)
	}
	st := typeStruct{size: binary.LittleEndian.Uint64(b), fields: map[string]typeField{}}
	pkgName, ok1 := d.img.word(t + abiStructPkg)
	fields, ok2 := d.img.word(t + abiStructField)
	count, ok3 := d.img.word(t + abiStructField + 8)
	if !ok1 || !ok2 || !ok3 || count > maxFields {
		return typeStruct{}, fmt.Errorf("%s's descriptor has no field list", name)
	}
	if p, ok := d.name(pkgName); !ok || p != pkg {
		return typeStruct{}, fmt.Errorf("%s's fields are of package %q, not %s", name, p, pkg)
	}
	for i := range count {
		f, ok := d.img.read(fields+abiFieldSize*i, abiFieldSize)
		if !ok {
			return typeStruct{}, fmt.Errorf("%s's field %d cannot be read", name, i)
		}
		fname, ok1 := d.name(d.wordIn(f, fields+abiFieldSize*i, 0))
		typ := d.wordIn(f, fields+abiFieldSize*i, 8)
		off := binary.LittleEndian.Uint64(f[16:])
		size, ok2 := d.img.word(typ)
		if !ok1 || !ok2 || typ < d.m.types || typ >= d.m.etypes || off > st.size || size > st.size-off {
			return typeStruct{}, fmt.Errorf("%s's field %d (%q) does not check out", name, i, fname)
		}
		st.fields[fname] = typeField{off: off, size: size, typ: typ}
	}
	return st, nil
}

// wordIn returns the word at i of b, read at addr, or its relocation's
// addend when the file holds 0 there (image.word).
func (d descriptors) wordIn(b []byte, addr, i uint64) uint64 {
	if v := binary.LittleEndian.Uint64(b[i:]); v != 0 {
		return v
	}
	v, _ := d.img.word(addr + i)
	return v
}

// readTypeStructs reads the struct types of structNames from the type
// descriptors of img's executable, through its module data m (readModule):
// crypto/tls.Conn from
// the pointer type *tls.Conn of an itab (every program that keeps a
// *tls.Conn as an interface, as net/http does, has one), halfConn and
// atomic.Bool from its fields' types; net.TCPConn from *net.TCPConn's,
// net.conn, netFD and poll.FD from its fields'. Each is checked for its
// name, its fields' package and fields that fit in it.
func readTypeStructs(img *image, m module) (typeStructs, error) {
	d := descriptors{img: img, m: m}
	out := typeStructs{}
	var errs []error
	// A struct not read (t 0, said already) has no fields to follow.
	get := func(t uint64, key, name, pkg string) typeStruct {
		if t == 0 {
			return typeStruct{}
		}
		st, err := d.structAt(t, name, pkg)
		if err != nil {
			errs = append(errs, err)
			return typeStruct{}
		}
		out[key] = st
		return st
	}
	ptrElem := func(ptrName string) uint64 {
		p, ok := d.find(ptrName)
		if !ok {
			errs = append(errs, fmt.Errorf("no itab of %s", ptrName))
			return 0
		}
		e, err := d.elem(p)
		if err != nil {
			errs = append(errs, err)
		}
		return e
	}
	fieldType := func(st typeStruct, owner, name string) uint64 {
		if st.fields == nil {
			return 0
		}
		f, ok := st.fields[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s has no field %s in its type descriptor", owner, name))
		}
		return f.typ
	}
	if t := ptrElem("*tls.Conn"); t != 0 {
		conn := get(t, tConn, "tls.Conn", "crypto/tls")
		get(fieldType(conn, "tls.Conn", "in"), tHalfConn, "tls.halfConn", "crypto/tls")
		get(fieldType(conn, "tls.Conn", "isHandshakeComplete"), tBool, "atomic.Bool", "sync/atomic")
	}
	if t := ptrElem("*net.TCPConn"); t != 0 {
		tcp := get(t, tTCPConn, "net.TCPConn", "net")
		nc := get(fieldType(tcp, "net.TCPConn", "conn"), tNetConn, "net.conn", "net")
		if p := fieldType(nc, "net.conn", "fd"); p != 0 {
			if fd, err := d.elem(p); err != nil {
				errs = append(errs, err)
			} else {
				netFD := get(fd, tNetFD, "net.netFD", "net")
				get(fieldType(netFD, "net.netFD", "pfd"), tPollFD, "poll.FD", "internal/poll")
			}
		}
	}
	if len(errs) > 0 {
		return nil, oneLine(errors.Join(errs...))
	}
	return out, nil
}
