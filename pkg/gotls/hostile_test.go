package gotls

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeTable returns a Go 1.20 function table (runtime/symtab.go's
// pcHeader, functab and _func) of nfunc functions whose names all start
// at the same offset of a name table of names bytes, filled with fill
// (no NUL between names when fill is not 0).
func fakeTable(nfunc, names int, fill byte) *pclntab {
	const head = 8 + 8*8
	functab := head + names
	funcAt := functab + 4*(2*nfunc+1) // the one _func every entry names
	d := make([]byte, funcAt+8)
	le := binary.LittleEndian
	le.PutUint32(d, 0xfffffff1)
	d[6], d[7] = 1, 8
	for i, w := range []uint64{uint64(nfunc), 0, 0, head, uint64(functab), uint64(functab), uint64(functab), uint64(functab)} {
		le.PutUint64(d[8+8*i:], w)
	}
	for i := head; i < functab; i++ {
		d[i] = fill
	}
	for i := range nfunc {
		le.PutUint32(d[functab+8*i:], uint32(i))
		le.PutUint32(d[functab+8*i+4:], uint32(funcAt-functab))
	}
	return &pclntab{data: d, addr: 0x400000}
}

// TestWalkNamesWithoutNUL: a function table whose name table holds no
// NUL (65 536 functions whose names run 2 MiB to its end) is walked
// reading each name no further than the longest name looked for: the
// test ends (128 GiB were read looking for the names' ends, 15 s, before
// kwatch bounded a name to what it looks for), and finds no function.
func TestWalkNamesWithoutNUL(t *testing.T) {
	tab := fakeTable(1<<16, 2<<20, 'a')
	got := tab.funcs(0, len("runtime.main"), func(name []byte) bool { return string(name) == "runtime.main" })
	if len(got) != 0 {
		t.Errorf("found %v", got)
	}
}

// exe is a test program's bytes, as the hostile tests write over them,
// with what debug/elf reads of the original.
type exe struct {
	t  *testing.T
	b  []byte
	ef *elf.File
}

func readExe(t *testing.T, path string) *exe {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(bytes.Clone(b)))
	if err != nil {
		t.Fatal(err)
	}
	return &exe{t: t, b: b, ef: ef}
}

var le = binary.LittleEndian

// section returns the section named name.
func (x *exe) section(name string) *elf.Section {
	s := x.ef.Section(name)
	if s == nil {
		x.t.Fatalf("no section %s", name)
	}
	return s
}

// sectionHeader returns the bytes of the header of the section named name.
func (x *exe) sectionHeader(name string) []byte {
	for i, s := range x.ef.Sections {
		if s.Name == name {
			return x.b[le.Uint64(x.b[ehShoff:])+uint64(i)*shEntSize:][:shEntSize]
		}
	}
	x.t.Fatalf("no section %s", name)
	return nil
}

// data returns the contents of the section named name, uncompressed.
func (x *exe) data(name string) []byte {
	d, err := x.section(name).Data()
	if err != nil {
		x.t.Fatal(err)
	}
	return d
}

// off returns the file offset of the n bytes at the virtual address addr.
func (x *exe) off(addr, n uint64) uint64 {
	for _, p := range x.ef.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr <= addr && addr+n <= p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	x.t.Fatalf("%#x is in no segment", addr)
	return 0
}

// put writes the 8-byte word v at the virtual address addr.
func (x *exe) put(addr, v uint64) { le.PutUint64(x.b[x.off(addr, 8):], v) }

// word reads the 8-byte word at the virtual address addr.
func (x *exe) word(addr uint64) uint64 { return le.Uint64(x.b[x.off(addr, 8):]) }

// replace puts contents, uncompressed, in place of the section named
// name's: at the file's end, its header pointing there.
func (x *exe) replace(name string, contents []byte) {
	h := x.sectionHeader(name)
	for len(x.b)%8 != 0 {
		x.b = append(x.b, 0)
	}
	le.PutUint64(h[shOffset:], uint64(len(x.b)))
	le.PutUint64(h[shSize:], uint64(len(contents)))
	le.PutUint64(h[shFlags:], le.Uint64(h[shFlags:])&^uint64(elf.SHF_COMPRESSED))
	x.b = append(x.b, contents...)
}

// noSections removes the section headers.
func (x *exe) noSections() {
	clear(x.b[ehShoff : ehShoff+8])
	clear(x.b[ehShnum : ehShnum+4])
}

// loads returns the PT_LOAD program headers, in the file.
func (x *exe) loads() [][]byte {
	var out [][]byte
	phoff := le.Uint64(x.b[ehPhoff:])
	for i := range uint64(le.Uint16(x.b[ehPhnum:])) {
		ph := x.b[phoff+56*i:][:56]
		if elf.ProgType(le.Uint32(ph)) == elf.PT_LOAD {
			out = append(out, ph)
		}
	}
	return out
}

// pcln returns the offset in the file of the function table and the
// offset from it of its functab, and its function count.
func (x *exe) pcln() (tab, functab, nfunc uint64) {
	s := x.section(".gopclntab")
	return s.Offset, le.Uint64(x.b[s.Offset+8+8*7:]), le.Uint64(x.b[s.Offset+8:])
}

// tlsConnTypes returns the addresses of the type descriptors of *tls.Conn
// and tls.Conn, and of the module data, of a program built by kwatch's
// own release, found as LayoutFor finds them.
func (x *exe) tlsConnTypes() (ptr, conn, mod uint64) {
	img := newImage(x.ef, &readBudget{left: 1 << 40})
	tab, err := findPclntab(img)
	if err != nil || tab == nil {
		x.t.Fatalf("function table: %v", err)
	}
	if mod, err = img.module(tab); err != nil {
		x.t.Fatal(err)
	}
	m, err := readModule(img, mod, ownRelease)
	if err != nil {
		x.t.Fatal(err)
	}
	d := descriptors{img: img, m: m}
	ptr, ok := d.find("*tls.Conn")
	if !ok {
		x.t.Fatal("no *tls.Conn")
	}
	if conn, err = d.elem(ptr); err != nil {
		x.t.Fatal(err)
	}
	return ptr, conn, mod
}

// dwarfUnit returns a DWARF 4 unit of abbreviation table 0 whose entries
// are body.
func dwarfUnit(body []byte) []byte {
	u := le.AppendUint32(nil, uint32(2+4+1+len(body)))
	u = le.AppendUint16(u, 4) // version
	u = le.AppendUint32(u, 0) // debug_abbrev_offset
	u = append(u, 8)          // address_size
	return append(u, body...)
}

// Attributes and forms of the crafted DWARF (DWARF 5 §7.5).
const (
	dwTagVariable     = 0x34
	dwTagLexicalBlock = 0x0b
	dwAtExternal      = 0x3f
	dwFormFlagPresent = 0x19
)

// abbrevOf returns an abbreviation table of one abbreviation, code 1, of
// tag, with children or not, and attrs attributes DW_AT_external of
// DW_FORM_flag_present (no byte in an entry).
func abbrevOf(tag byte, children bool, attrs int) []byte {
	a := []byte{1, tag, 0}
	if children {
		a[2] = 1
	}
	for range attrs {
		a = append(a, dwAtExternal, dwFormFlagPresent)
	}
	return append(a, 0, 0, 0)
}

// hostileCase is one way of writing over a real program at one of the
// structures Find and LayoutFor read, and what they must say of it.
type hostileCase struct {
	name  string
	build string // the program written over (variants)
	edit  func(x *exe)
	// layout: LayoutFor, as a kwatch of another release would read it
	// (no layout from kwatch's own types to fall back on); else Find.
	layout bool
	want   string // in the error, which names the path, in one line; "" for none
	is     error  // the error wraps it (when set)
	check  func(t *testing.T, loc Location, l *Layout)
}

// TestHostileExecutables: real programs with one structure written over
// (counts, offsets, names, strings, a loop in the type descriptors,
// DWARF's abbreviations, entries and strings): Find and LayoutFor end,
// and refuse each with one line that names the file and says what is
// wrong, or, where what was written over is not needed, read the program
// from what is left. The test ending is what shows the work and memory
// bounded: several of these took seconds to minutes or gigabytes before
// kwatch bounded them, and entries nested deep enough (15 million)
// outgrew the goroutine stack limit in debug/dwarf's recursion, a fatal
// error.
func TestHostileExecutables(t *testing.T) {
	byPclntab := func(t *testing.T, loc Location, _ *Layout) {
		if loc.Method != ByPclntab || loc.Offset == 0 {
			t.Errorf("found %+v", loc)
		}
	}
	source := func(want LayoutSource) func(*testing.T, Location, *Layout) {
		return func(t *testing.T, _ Location, l *Layout) {
			if l.Source != want {
				t.Errorf("layout from %v, want %v", l.Source, want)
			}
		}
	}
	cases := []hostileCase{
		// ELF headers.
		{name: "program header count", build: "stripped", edit: func(x *exe) {
			le.PutUint16(x.b[ehPhnum:], 0xffff)
		}, want: "65535 program headers, more than Linux loads a program with (1170)", is: ErrNotELF},
		{name: "section names", build: "stripped", edit: func(x *exe) {
			// 4 096 section headers, all named by one 256 KiB string.
			const n, size = 4096, 256 << 10
			names := uint64(len(x.b))
			x.b = append(append(x.b, bytes.Repeat([]byte{'a'}, size-1)...), 0)
			shoff := uint64(len(x.b))
			x.b = append(x.b, make([]byte, n*shEntSize)...)
			last := x.b[shoff+(n-1)*shEntSize:]
			le.PutUint32(last[shType:], uint32(elf.SHT_STRTAB))
			le.PutUint64(last[shOffset:], names)
			le.PutUint64(last[shSize:], size)
			le.PutUint64(x.b[ehShoff:], shoff)
			le.PutUint16(x.b[ehShnum:], n)
			le.PutUint16(x.b[ehShstrndx:], n-1)
		}, want: "4096 section headers name more than 1048576 bytes of names", is: ErrNotELF},
		{name: "section names compressed", build: "stripped", edit: func(x *exe) {
			h := x.sectionHeader(".shstrtab")
			le.PutUint64(h[shFlags:], uint64(elf.SHF_COMPRESSED))
		}, want: "its section names are compressed", is: ErrNotELF},
		{name: "32-bit", build: "stripped", edit: func(x *exe) {
			x.b[elf.EI_CLASS] = byte(elf.ELFCLASS32)
		}, want: "EM_X86_64 ELFCLASS32 (amd64 and arm64 are supported)", is: ErrUnsupportedArch},
		{name: "segments out of order", build: "stripped", edit: func(x *exe) {
			l := x.loads()
			copy(l[1][16:24], l[0][16:24]) // p_vaddr
		}, want: "are not in ascending order of address", is: ErrNotELF},
		{name: "segment past the file's end", build: "stripped", edit: func(x *exe) {
			le.PutUint64(x.loads()[1][32:], 1<<40) // p_filesz
		}, want: "lies past the file's end", is: ErrNotELF},

		// Symbol tables: the names found in the function table instead.
		{name: "symbol names without NUL", build: "plain", edit: func(x *exe) {
			s := x.section(".strtab")
			copy(x.b[s.Offset:], bytes.Repeat([]byte{'a'}, int(s.Size)))
		}, check: byPclntab},
		{name: "symbols naming one long string", build: "plain", edit: func(x *exe) {
			st, sy := x.section(".strtab"), x.section(".symtab")
			copy(x.b[st.Offset:], bytes.Repeat([]byte{'a'}, int(st.Size)-1))
			n := sy.Size / symSize
			for i := range n {
				le.PutUint32(x.b[sy.Offset+symSize*i:], uint32(i*(st.Size/2)/n))
			}
		}, check: byPclntab},

		// The function table.
		{name: "function count", build: "stripped", edit: func(x *exe) {
			tab, _, _ := x.pcln()
			le.PutUint64(x.b[tab+8:], 1<<40)
		}, want: "the Go function table's header does not check out"},
		{name: "function table empty", build: "stripped", edit: func(x *exe) {
			le.PutUint64(x.sectionHeader(".gopclntab")[shSize:], 0)
		}, want: "the Go function table's header does not check out (of 0 bytes"},
		{name: "function table empty, the layout", build: "conns-stripped", layout: true, edit: func(x *exe) {
			le.PutUint64(x.sectionHeader(".gopclntab")[shSize:], 0)
		}, check: func(t *testing.T, _ Location, l *Layout) {
			// The type descriptors still give the layout; the TLS 1.2
			// closures, named in the function table only, are not found.
			if l.Source != FromTypes || !strings.Contains(l.tls12, "the Go function table's header does not check out") {
				t.Errorf("layout from %v, TLS 1.2: %q", l.Source, l.tls12)
			}
		}},
		{name: "function table offset", build: "stripped", edit: func(x *exe) {
			tab, _, _ := x.pcln()
			le.PutUint64(x.b[tab+8+8*7:], 1<<40)
		}, want: "the Go function table's header does not check out"},
		{name: "function name offsets", build: "stripped", edit: func(x *exe) {
			tab, functab, nfunc := x.pcln()
			for i := range nfunc {
				f := tab + functab + uint64(le.Uint32(x.b[tab+functab+8*i+4:]))
				le.PutUint32(x.b[f+4:], 0x7ffffff0)
			}
		}, want: "it has no crypto/tls.(*Config).writeKeyLog", is: ErrNoCryptoTLS},
		{name: "function names without NUL", build: "stripped", edit: func(x *exe) {
			tab, _, _ := x.pcln()
			names, end := le.Uint64(x.b[tab+8+8*3:]), le.Uint64(x.b[tab+8+8*4:])
			copy(x.b[tab+names:], bytes.Repeat([]byte{'a'}, int(end-names)))
		}, want: "it has no crypto/tls.(*Config).writeKeyLog", is: ErrNoCryptoTLS},
		{name: "function table headers over and over", build: "stripped", edit: func(x *exe) {
			// With no section headers the table is looked for by its
			// magic: 1 000 sane headers before it, each claiming the rest
			// of its segment as its functions.
			s := x.section(".gopclntab")
			var seg *elf.Prog
			for _, p := range x.ef.Progs {
				if p.Type == elf.PT_LOAD && p.Off <= s.Offset && s.Offset < p.Off+p.Filesz {
					seg = p
				}
			}
			const n, head = 1000, 80
			start := seg.Off + 4096
			if start+n*head > s.Offset {
				x.t.Fatalf("no room for %d headers before the function table", n)
			}
			for i := range uint64(n) {
				h := x.b[start+i*head:]
				rest := seg.Off + seg.Filesz - (start + i*head)
				le.PutUint32(h, 0xfffffff1)
				h[4], h[5], h[6], h[7] = 0, 0, 1, 8
				le.PutUint64(h[8:], ((rest-head)/4-1)/2) // nfunc
				for w := 1; w < 8; w++ {
					le.PutUint64(h[8+8*w:], 8)
				}
				le.PutUint64(h[8+8*7:], head) // functab
			}
			x.noSections()
		}, want: "one Go function table header after another in its segments"},

		// The module data.
		{name: "words pointing at the function table", build: "stripped", edit: func(x *exe) {
			// No section headers: the module data is looked for by its
			// pointer to the function table; .noptrdata is filled with it.
			s, tab := x.section(".noptrdata"), x.section(".gopclntab")
			for o := s.Offset; o+8 <= s.Offset+s.Size; o += 8 {
				le.PutUint64(x.b[o:], tab.Addr)
			}
			x.noSections()
		}, want: "more than 64 words of its writable segments point at the function table"},
		{name: "module data text", build: "stripped", edit: func(x *exe) {
			mod := x.section(".go.module").Addr
			x.put(mod+8*moduledataText, x.word(mod+8*moduledataEText)+1)
		}, want: "are not in order"},

		{name: "relocation table size", build: "pie-stripped", edit: func(x *exe) {
			// The module data's words left to relocations, and no section
			// headers: the relocations are found through the dynamic
			// segment, whose DT_RELASZ claims a terabyte.
			mod := x.section(".go.module")
			clear(x.b[mod.Offset+8*moduledataPCHeader:][:8])
			clear(x.b[mod.Offset+8*moduledataText:][:8])
			for _, p := range x.ef.Progs {
				if p.Type != elf.PT_DYNAMIC {
					continue
				}
				for o := p.Off; o+dynSize <= p.Off+p.Filesz; o += dynSize {
					if le.Uint64(x.b[o:]) == dtRelaSz {
						le.PutUint64(x.b[o+8:], 1<<40)
					}
				}
			}
			x.noSections()
		}, want: "found no runtime.text: no module data (runtime.moduledata) found: no word of a writable segment points at the function table"},
		{name: "build information", build: "conns-stripped", layout: true, edit: func(x *exe) {
			s := x.section(".go.buildinfo")
			copy(x.b[s.Offset+32:], bytes.Repeat([]byte{0xff}, 10)) // the version's length
		}, want: "not a Go program (no Go build information)", is: ErrNotGo},

		// Type descriptors, through the module data.
		{name: "a loop in the type descriptors", build: "conns-stripped", layout: true, edit: func(x *exe) {
			ptr, _, _ := x.tlsConnTypes()
			x.put(ptr+abiPtrElem, ptr) // *tls.Conn's element: itself
		}, want: `is "*tls.Conn" (kind 22), not the struct tls.Conn`, is: ErrNoLayout},
		{name: "struct field count", build: "conns-stripped", layout: true, edit: func(x *exe) {
			_, conn, _ := x.tlsConnTypes()
			x.put(conn+abiStructField+8, 1<<40)
		}, want: "tls.Conn's descriptor has no field list", is: ErrNoLayout},
		{name: "type name offset", build: "conns-stripped", layout: true, edit: func(x *exe) {
			_, conn, _ := x.tlsConnTypes()
			le.PutUint32(x.b[x.off(conn+abiTypeStr, 4):], 0x7fffffff)
		}, want: `is "" (kind 0), not the struct tls.Conn`, is: ErrNoLayout},
		{name: "struct field offset", build: "conns-stripped", layout: true, edit: func(x *exe) {
			_, conn, _ := x.tlsConnTypes()
			x.put(x.word(conn+abiStructField)+16, 1<<40) // field 0's Offset
		}, want: `tls.Conn's field 0 ("conn") does not check out`, is: ErrNoLayout},
		{name: "itab count", build: "conns-stripped", layout: true, edit: func(x *exe) {
			_, _, mod := x.tlsConnTypes()
			x.put(mod+8*uint64(moduleWords[ownRelease].itablinks+1), 1<<40)
		}, want: "its itablinks", is: ErrNoLayout},

		// DWARF.
		{name: "DWARF sizes", build: "conns", layout: true, edit: func(x *exe) {
			s := x.section(".debug_info")
			if s.Flags&elf.SHF_COMPRESSED == 0 {
				x.t.Fatal(".debug_info is not compressed")
			}
			le.PutUint64(x.b[s.Offset+8:], 1<<40) // Elf64_Chdr's ch_size
		}, want: "its DWARF: its sections hold 1099511"},
		{name: "DWARF abbreviation attributes", build: "conns", layout: true, edit: func(x *exe) {
			x.replace(".debug_abbrev", abbrevOf(dwTagVariable, false, 300))
		}, want: "its DWARF: abbreviations at 0x0: an abbreviation with more than 256 attributes"},
		{name: "DWARF abbreviation tables overlapping", build: "conns", layout: true, edit: func(x *exe) {
			info := bytes.Clone(x.data(".debug_info"))
			second := 4 + uint64(le.Uint32(info)) // DWARF 5: unit_length, version, unit_type, address_size, debug_abbrev_offset
			le.PutUint32(info[second+8:], 1)
			x.replace(".debug_info", info)
		}, want: "its DWARF: abbreviation tables at 0x0 and 0x1 overlap"},
		{name: "DWARF entries of attributes of no bytes", build: "conns", layout: true, edit: func(x *exe) {
			x.replace(".debug_abbrev", abbrevOf(dwTagVariable, false, 255))
			x.replace(".debug_info", dwarfUnit(bytes.Repeat([]byte{1}, 1<<20)))
		}, want: "its DWARF: its entries decode into more fields and string bytes than its size allows"},
		{name: "DWARF entries nested a million deep", build: "conns", layout: true, edit: func(x *exe) {
			// No struct in it: the layout comes from the type descriptors.
			x.replace(".debug_abbrev", abbrevOf(dwTagLexicalBlock, true, 0))
			x.replace(".debug_info", dwarfUnit(bytes.Repeat([]byte{1}, 1<<20)))
		}, check: source(FromTypes)},
		{name: "DWARF strings without NUL", build: "external", layout: true, edit: func(x *exe) {
			x.replace(".debug_str", append(bytes.Repeat([]byte{'a'}, 1<<20), 0))
		}, check: source(FromDWARF)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := readExe(t, testProgram(t, c.build))
			c.edit(x)
			path := filepath.Join(t.TempDir(), "exe")
			if err := os.WriteFile(path, x.b, 0o755); err != nil {
				t.Fatal(err)
			}
			var loc Location
			var l *Layout
			var err error
			if c.layout {
				l, err = layoutFor(path, "go1.99.0", runtime.GOARCH)
			} else {
				loc, err = Find(path)
			}
			t.Logf("err %v", err)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("err %v", err)
			case c.want == "":
				c.check(t, loc, l)
			case err == nil:
				t.Fatalf("no error, want one saying %q", c.want)
			case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), path+": ") || strings.Contains(err.Error(), "\n"):
				t.Errorf("error %q: want one line naming the file and saying %q", err, c.want)
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("error %q does not wrap %v", err, c.is)
			}
		})
	}
}

// TestCutStrings: strings longer than the bound are cut where they
// exceed it, NULs written in kwatch's copy; others keep their bytes and
// offsets.
func TestCutStrings(t *testing.T) {
	in := []byte("short\x00abcdefghij\x00\x00xyz")
	got := cutStrings(in, 5)
	if want := "short\x00abcde\x00ghij\x00\x00xyz"; string(got) != want {
		t.Errorf("%q, want %q", got, want)
	}
	if string(in) != "short\x00abcdefghij\x00\x00xyz" {
		t.Error("the input was written over")
	}
}
