package gotls

// Finding crypto/tls.(*Config).writeKeyLog in an ELF executable: in its
// symbol tables when it has them, else in the function table every Go
// program carries (.gopclntab), which stripping (-ldflags "-s -w") keeps.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// FuncName is the function the probe is placed on: crypto/tls's
// (*Config).writeKeyLog(label string, clientRandom, secret []byte) error,
// which Go's crypto/tls calls for every secret of every handshake, client
// and server side, whether or not Config.KeyLogWriter is set (the nil check
// is inside it: crypto/tls/common.go).
const FuncName = "crypto/tls.(*Config).writeKeyLog"

// Errors of Find (and of Probe.Attach, which calls it). Each is returned
// wrapped with the path: test for them with errors.Is.
var (
	// ErrNotELF: the file is not an ELF file (or not one debug/elf can read).
	ErrNotELF = errors.New("not an ELF file")
	// ErrNotGo: an ELF file with neither Go build information nor a Go
	// function table (.gopclntab): not a Go program.
	ErrNotGo = errors.New("not a Go program")
	// ErrNoCryptoTLS: a Go program in which crypto/tls.(*Config).writeKeyLog
	// is absent: it does not link crypto/tls, or the linker dropped the
	// function because nothing in it makes a TLS handshake.
	ErrNoCryptoTLS = errors.New("a Go program without crypto/tls")
	// ErrUnsupportedArch: an ELF file for an architecture other than amd64
	// (x86-64) and arm64 (AArch64), the two whose registers the probe
	// knows; or, from Probe.Attach, an executable for an architecture other
	// than the running kernel's.
	ErrUnsupportedArch = errors.New("unsupported architecture")
)

// Method says how Find found the function.
type Method int

const (
	// BySymbolTable: in the ELF symbol table (.symtab, or .dynsym).
	BySymbolTable Method = iota + 1
	// ByPclntab: in Go's function table (.gopclntab, or the bytes that
	// hold it when the section headers are gone), walked as the runtime
	// does (Go 1.2 on).
	ByPclntab
)

// String returns "symbol table" or ".gopclntab".
func (m Method) String() string {
	switch m {
	case BySymbolTable:
		return "symbol table"
	case ByPclntab:
		return ".gopclntab"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// Location is where FuncName is in one executable.
type Location struct {
	// Path is the executable as given to Find.
	Path string
	// Address is the function's entry as linked (a virtual address; for a
	// position-independent executable, before the loader moves it).
	Address uint64
	// Offset is the entry's offset in the file, in bytes: Address minus the
	// virtual address of the PT_LOAD segment that holds it plus that
	// segment's file offset. This is what a uprobe is placed at.
	Offset uint64
	// Method says how the function was found.
	Method Method
	// Arch is the executable's architecture, as GOARCH names it: "amd64"
	// or "arm64".
	Arch string
	// GoVersion is the Go toolchain that built it (debug/buildinfo, e.g.
	// "go1.26.8"); "" when the file does not say.
	GoVersion string
}

// Find returns where FuncName is in the ELF executable at path (an ordinary
// file or /proc/PID/exe). It looks in the symbol tables first (.symtab, then
// .dynsym); a stripped program has neither, so it then reads Go's function
// table (.gopclntab), walked as the runtime does, taking the start of the text
// (runtime.text), against which that table's entries are stored, from the
// module data (findModule: the .go.module section, or the word that points
// at the function table; see pclnText). Position-independent and
// fixed-address executables, amd64 and arm64, with section headers or
// none, are read the same way.
//
// Errors wrap ErrNotELF, ErrNotGo, ErrUnsupportedArch or ErrNoCryptoTLS, and
// name the path; errors opening or reading the file are returned as they
// come (wrapped), so os.ErrNotExist and os.ErrPermission can be tested for.
func Find(path string) (Location, error) {
	locs, err := findFuncs(path, FuncName)
	if err != nil {
		return Location{}, err
	}
	return locs[0], nil
}

// findFuncs is Find for each of names, functions of crypto/tls, in that
// order: the file is read once. A name that is not there is reported as
// ErrNoCryptoTLS.
func findFuncs(path string, names ...string) (locs []Location, err error) {
	f, err := openMapped(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	err = readMapped(path, func() error {
		locs, err = findFuncsIn(path, f, names)
		return err
	})
	return locs, err
}

// findFuncsIn is findFuncs on the file f, mapped.
func findFuncsIn(path string, f *mappedFile, names []string) ([]Location, error) {
	ef, err := openELF(path, f)
	if err != nil {
		return nil, err
	}
	loc := Location{Path: path}
	img := mappedImage(ef, f)
	loc.GoVersion = goVersion(f, img)
	const main = "runtime.main"
	want := map[string]bool{main: true}
	longest := len(main)
	for _, n := range names {
		want[n] = true
		longest = max(longest, len(n))
	}
	keep := func(name []byte) bool { return want[string(name)] }
	syms := symbolsOf(img, longest, true, keep)
	found := true
	for _, name := range names {
		_, ok := syms[name]
		found = found && ok
	}
	_, hasMain := syms[main]
	var tab *pclntab
	var tabErr error
	if !found {
		tab, tabErr = findPclntab(img)
	}
	if !found && loc.GoVersion == "" && !hasMain && tab == nil {
		return nil, fmt.Errorf("%s: %w (for OpenSSL clients such as curl and Python, set SSLKEYLOGFILE)", path, ErrNotGo)
	}
	loc.Arch = archOf(ef)
	if loc.Arch == "" {
		return nil, fmt.Errorf("%s: %w: %v %v (amd64 and arm64 are supported)", path, ErrUnsupportedArch, ef.Machine, ef.Class)
	}
	var funcs map[string]uint64
	switch {
	case found:
	case tabErr != nil:
		return nil, fmt.Errorf("%s: %w", path, tabErr)
	case tab == nil:
		// A Go program (build information, runtime.main) whose function
		// table cannot be found: without it nothing can be looked up.
		return nil, fmt.Errorf("%s: no Go function table (.gopclntab) found, and no %s in a symbol table", path, names[0])
	default:
		if funcs, err = pclnFuncs(img, tab, longest, keep); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var locs []Location
	for _, name := range names {
		l := loc
		if found {
			l.Address, l.Method = syms[name], BySymbolTable
		} else if a, ok := funcs[name]; ok {
			l.Address, l.Method = a, ByPclntab
		}
		if l.Address == 0 {
			return nil, noCryptoTLS(path, name)
		}
		off, err := fileOffset(ef, l.Address)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		l.Offset = off
		locs = append(locs, l)
	}
	return locs, nil
}

func noCryptoTLS(path, name string) error {
	return fmt.Errorf("%s: %w: it has no %s (for OpenSSL clients such as curl and Python, set SSLKEYLOGFILE)", path, ErrNoCryptoTLS, name)
}

// archOf names the architecture of a 64-bit little-endian ELF file as GOARCH
// does; "" for any other.
func archOf(ef *elf.File) string {
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		return ""
	}
	switch ef.Machine {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	}
	return ""
}

// fileOffset converts a virtual address as linked into its offset in the
// file, through the executable PT_LOAD segment that holds it.
func fileOffset(ef *elf.File, addr uint64) (uint64, error) {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no executable PT_LOAD segment", addr)
}

// readsPerByte bounds the bytes of segments and relocation sections Find
// reads, as a multiple of the file's size (plus 1 MiB): a real program's
// segments and sections do not overlap, so each is read a few times at
// most (the segments once for the function table and once for the module
// data, the relocations once a word), where a crafted file whose 65 535
// program headers each load the whole file had Find read it 65 535 times.
const readsPerByte = 8

// readBudget is what is left of the bytes Find may still read.
type readBudget struct{ left uint64 }

// take reports whether n more bytes may be read, and counts them.
func (b *readBudget) take(n uint64) bool {
	if n > b.left {
		b.left = 0
		return false
	}
	b.left -= n
	return true
}

// errTooMuch is findPclntab's error when the budget runs out.
var errTooMuch = errors.New("its segments and sections overlap over and over (more bytes than the file's size many times over): not a program the linker made")

// errTooManyTables is findPclntab's error when the function tables it
// walks looking for the one that names runtime.main spend the budget.
var errTooManyTables = errors.New("one Go function table header after another in its segments, each claiming the rest of its segment (more functions to walk than the file's size many times over): not a program the linker made")

// pclntab is a Go function table found in a file: its bytes from its header
// on and its virtual address.
type pclntab struct {
	data []byte
	addr uint64
}

// Magic numbers of the pclntab header, by the Go release that introduced
// them (internal/abi/symtab.go; go1.16's and go1.2's in
// debug/gosym/pclntab.go), little-endian.
var pclnMagics = []uint32{0xfffffff1 /* 1.20 */, 0xfffffff0 /* 1.18 */, 0xfffffffa /* 1.16 */, 0xfffffffb /* 1.2 */}

// findPclntab returns the file's Go function table: the .gopclntab section,
// or, when there is none (no section headers, or a linker that put the
// table inside another section), the first place in a PT_LOAD segment that
// starts with a pclntab header that layout accepts, of a table that names
// runtime.main. nil if there is none.
func findPclntab(img *image) (*pclntab, error) {
	if s := img.ef.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		if !img.budget.take(s.Size) {
			return nil, errTooMuch
		}
		if img.file != nil && s.Flags&elf.SHF_COMPRESSED == 0 {
			if data, ok := img.file.slice(s.Offset, s.Size); ok {
				return &pclntab{data: data, addr: s.Addr}, nil
			}
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("reading .gopclntab: %w", err)
		}
		return &pclntab{data: data, addr: s.Addr}, nil
	}
	for _, p := range img.ef.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		data := img.segment(p)
		if data == nil {
			return nil, errTooMuch
		}
		for _, magic := range pclnMagics {
			var head [6]byte
			binary.LittleEndian.PutUint32(head[:], magic)
			for i := 0; ; {
				j := bytes.Index(data[i:], head[:])
				if j < 0 {
					break
				}
				i += j
				t := &pclntab{data: data[i:], addr: p.Vaddr + uint64(i)}
				if ok, err := t.valid(img.budget); err != nil {
					return nil, err
				} else if ok {
					return t, nil
				}
				i++
			}
		}
	}
	return nil, nil
}

// valid reports whether t reads as a Go function table that holds
// runtime.main (whatever the text start: valid only looks at names). The
// walk counts against budget, as a crafted segment may hold a sane header
// every few bytes, each naming the rest of the segment its functions
// (errTooManyTables when it is spent).
func (t *pclntab) valid(budget *readBudget) (bool, error) {
	l, ok := t.layout()
	if !ok {
		return false, nil
	}
	if !budget.take(l.nfunc * (2*l.field + l.nameField + 4)) {
		return false, errTooManyTables
	}
	const main = "runtime.main"
	_, ok = t.funcs(0, len(main), func(name []byte) bool { return string(name) == main })[main]
	return ok, nil
}

// pclnLayout is where a function table keeps what funcs reads, as offsets
// in its data: its functab (nfunc pairs of fields of field bytes, an
// entry and the offset of the function's _func from funcdata, then the
// end's entry), the offset of _func.nameOff (an int32 from names), the
// name table, and whether entries are offsets from runtime.text.
type pclnLayout struct {
	nfunc, functab, field, funcdata, nameField, names, namesEnd uint64
	relative                                                    bool
}

// layout returns where t keeps its functions, when its header is that of
// a 64-bit little-endian Go 1.2-1.27 table (pclnMagics) whose function
// table, as its count and offset say, and name table lie within the data
// (runtime/symtab.go's pcHeader, functab and _func of go1.18 on;
// cmd/link/internal/ld/pcln.go of go1.16 and go1.2, as debug/gosym reads
// them).
func (t *pclntab) layout() (pclnLayout, bool) {
	d := t.data
	if len(d) < 8+8*8 || d[4] != 0 || d[5] != 0 || (d[6] != 1 && d[6] != 2 && d[6] != 4) || d[7] != 8 {
		return pclnLayout{}, false
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(d[8+8*i:]) }
	n := uint64(len(d))
	var l pclnLayout
	var offsets []int
	switch binary.LittleEndian.Uint32(d) {
	case 0xfffffff1, 0xfffffff0: // Go 1.20, 1.18: nfunc, nfiles, textStart, then the offsets of funcname, cu, file, pc and func tables
		l = pclnLayout{nfunc: word(0), functab: word(7), field: 4, funcdata: word(7), nameField: 4, names: word(3), namesEnd: word(4), relative: true}
		offsets = []int{3, 4, 5, 6, 7}
	case 0xfffffffa: // Go 1.16: nfunc, nfiles, then the offsets
		l = pclnLayout{nfunc: word(0), functab: word(6), field: 8, funcdata: word(6), nameField: 8, names: word(2), namesEnd: word(3)}
		offsets = []int{2, 3, 4, 5, 6}
	case 0xfffffffb: // Go 1.2: nfunc, then the function table; offsets from the table's start
		l = pclnLayout{nfunc: word(0), functab: 16, field: 8, nameField: 8, namesEnd: n}
	default:
		return pclnLayout{}, false
	}
	for _, i := range offsets {
		if word(i) > n {
			return pclnLayout{}, false
		}
	}
	if l.namesEnd < l.names {
		l.namesEnd = n // tables in another order: names run to the end at most
	}
	// The function table holds 2*nfunc+1 fields.
	if l.functab > n || (n-l.functab)/l.field < 1 || l.nfunc > ((n-l.functab)/l.field-1)/2 {
		return pclnLayout{}, false
	}
	return l, true
}

// funcs returns the entries, by name, of the functions of t whose names
// keep accepts, computed from text (runtime.text) where entries are
// offsets from it (Go 1.18 on); none when t's header is not one layout
// accepts. keep is asked only of names of at most maxName bytes: a
// longer name is none kwatch looks for, and is not read to its end (a
// name table with no NUL in it had each of a hundred thousand names read
// to the table's end, minutes for a patched kubectl). It walks the
// function table as the runtime does (runtime/symtab.go: pcHeader,
// functab, _func.nameOff), each read checked against the data, which is
// a mapped file a rewrite in place may change as it is read. debug/gosym
// would build a Func and a Sym of every function first (about 50 MB for
// kube-apiserver's hundred thousand, each time, where kwatch wants a
// handful), trusts the count it is given, and copies each name to its
// NUL, once for each function that names it.
func (t *pclntab) funcs(text uint64, maxName int, keep func(name []byte) bool) map[string]uint64 {
	out := map[string]uint64{}
	l, ok := t.layout()
	if !ok {
		return out
	}
	d, n := t.data, uint64(len(t.data))
	le := binary.LittleEndian
	field := func(at uint64) uint64 {
		if l.field == 4 {
			return uint64(le.Uint32(d[at:]))
		}
		return le.Uint64(d[at:])
	}
	for i := range l.nfunc {
		e := l.functab + 2*l.field*i // layout checked that it lies in d
		entry, funcOff := field(e), field(e+l.field)
		if funcOff > n-l.funcdata || n-l.funcdata-funcOff < l.nameField+4 {
			continue
		}
		f := l.funcdata + funcOff
		nameOff := int64(int32(le.Uint32(d[f+l.nameField:])))
		if nameOff < 0 || uint64(nameOff) >= l.namesEnd-l.names {
			continue
		}
		start := l.names + uint64(nameOff)
		name := d[start:min(l.namesEnd, start+uint64(maxName)+1)]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		if len(name) <= maxName && keep(name) {
			if l.relative {
				entry += text
			}
			out[string(name)] = entry
		}
	}
	return out
}

// pclnText returns runtime.text, the address the function table's entries
// are offsets from (Go 1.18 on), from the module data (findModule: the
// .go.module section, or the module data found by its pointer to the
// table). Go 1.18-1.25 also stored it in the table's header (Go 1.26
// leaves that field 0: runtime/symtab.go), which is used when no module
// data is found. Words the linker left 0 in the file for a dynamic
// relocation are read from the relocation's addend (image.word).
//
// The .text section's address is never used: with external linking it is
// not runtime.text (0x100 bytes before it, measured), and a uprobe placed
// mid-instruction would break the program.
func pclnText(img *image, t *pclntab) (uint64, error) {
	if len(t.data) > 0 && (t.data[0] == 0xfb || t.data[0] == 0xfa) { // Go 1.2-1.17: entries are addresses
		return 0, nil
	}
	mod, err := img.module(t)
	if err == nil {
		text, _ := img.word(mod + 8*moduledataText)
		return text, nil
	}
	if !errors.Is(err, errNoModule) {
		return 0, err
	}
	const textStart = 8 + 2*8 // magic, pads, quantum, ptrsize; nfunc, nfiles
	if text, ok := img.word(t.addr + textStart); ok && text != 0 {
		return text, nil
	}
	return 0, fmt.Errorf("found no runtime.text: %v, and the function table's header holds no text start", err)
}

// pclnFuncs returns the entries, by name, of the functions of t whose names
// (of at most maxName bytes) keep accepts, computed from runtime.text
// (pclnText): one walk of the table for all of them.
func pclnFuncs(img *image, t *pclntab, maxName int, keep func(name []byte) bool) (map[string]uint64, error) {
	if _, ok := t.layout(); !ok {
		return nil, fmt.Errorf("the Go function table's header does not check out (of %d bytes, or a count or offset past its data)", len(t.data))
	}
	text, err := pclnText(img, t)
	if err != nil {
		return nil, err
	}
	return t.funcs(text, maxName, keep), nil
}
