package gotls

// An executable's bytes by virtual address, as linked, and its module data
// (runtime.moduledata): the one struct through which the runtime finds its
// function table, the start of its text and its type descriptors. Go 1.26
// gives it a section of its own (.go.module); before, it is the variable
// runtime.firstmoduledata in .noptrdata, and release pipelines often leave
// a program with few section headers or none. So it is found the way Go
// reverse-engineering tools find it: the word in a writable segment that
// points at the function table's header (pcHeader, moduledata's first
// field in every release since Go 1.16), each candidate checked against
// the table and the segments before it is used.

import (
	"bytes"
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Words of runtime.moduledata that are where they are in every release
// kwatch reads (runtime/symtab.go of go1.21 through go1.27: pcHeader, then
// six slices of three words, findfunctab, minpc, maxpc, text, etext;
// TestModuleWordsSource computes each from the source of each release).
const (
	moduledataPCHeader    = 0
	moduledataFuncnametab = 1
	moduledataMinPC       = 20
	moduledataMaxPC       = 21
	moduledataText        = 22
	moduledataEText       = 23
	moduledataWords       = 24 // read at once when a candidate is checked
)

// image reads an ELF executable's bytes by virtual address, as linked,
// from its PT_LOAD segments. The whole-segment reads (scans) and the
// relocation table count against budget.
type image struct {
	ef     *elf.File
	budget *readBudget
	// file is the executable mapped (openMapped): segments and sections
	// are read where they lie; nil: read from ef and copied.
	file   *mappedFile
	segs   map[*elf.Prog][]byte    // segments read whole, once
	secs   map[*elf.Section][]byte // sections read whole, once
	loads  []*elf.Prog             // its PT_LOAD segments holding bytes, by address
	rela   map[uint64]uint64       // R_*_RELATIVE targets and their addends, read once
	relaOK bool

	modDone bool // findModule's answer, found once
	mod     uint64
	modErr  error
}

// module returns findModule's answer for the function table t, found once.
func (m *image) module(t *pclntab) (uint64, error) {
	if !m.modDone {
		m.modDone = true
		m.mod, m.modErr = findModule(m, t)
	}
	return m.mod, m.modErr
}

func newImage(ef *elf.File, budget *readBudget) *image {
	return &image{ef: ef, budget: budget, segs: map[*elf.Prog][]byte{}, secs: map[*elf.Section][]byte{}}
}

// newBudget returns the read budget for the file f: readsPerByte times
// its size, and 1 MiB.
func newBudget(f *os.File) *readBudget {
	if fi, err := f.Stat(); err == nil {
		return budgetFor(fi.Size())
	}
	return &readBudget{}
}

// budgetFor returns the read budget for a file of size bytes.
func budgetFor(size int64) *readBudget {
	b := &readBudget{}
	if size > 0 {
		b.left = uint64(size)*readsPerByte + 1<<20
	}
	return b
}

// mappedImage returns the image of the mapped executable mf, read by ef.
func mappedImage(ef *elf.File, mf *mappedFile) *image {
	img := newImage(ef, budgetFor(mf.fi.Size()))
	img.file = mf
	return img
}

// prog returns the PT_LOAD segment that holds the n bytes at addr, in the
// file (within its p_filesz): the last one that starts at addr or before,
// found by halving, as they are in ascending order of address and apart
// (checkLoads).
func (m *image) prog(addr, n uint64) *elf.Prog {
	if m.loads == nil {
		for _, p := range m.ef.Progs {
			if p.Type == elf.PT_LOAD && p.Filesz > 0 {
				m.loads = append(m.loads, p)
			}
		}
		slices.SortStableFunc(m.loads, func(a, b *elf.Prog) int { return cmp.Compare(a.Vaddr, b.Vaddr) })
	}
	i, _ := slices.BinarySearchFunc(m.loads, addr, func(p *elf.Prog, a uint64) int {
		if p.Vaddr <= a {
			return -1
		}
		return 1
	})
	if i == 0 {
		return nil
	}
	if p := m.loads[i-1]; addr+n <= p.Vaddr+p.Filesz && addr+n >= addr {
		return p
	}
	return nil
}

// checkLoads checks that the PT_LOAD segments of ef lie in ascending order
// of address, apart, as the gABI has them ("Program Header": "Loadable
// segment entries in the program header table appear in ascending order,
// sorted on the p_vaddr member"), and that the file holds each.
func checkLoads(ef *elf.File, size uint64) error {
	var last *elf.Prog
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		if p.Off > size || p.Filesz > size-p.Off || p.Vaddr+p.Filesz < p.Vaddr {
			return fmt.Errorf("a PT_LOAD segment of %d bytes at offset %#x lies past the file's end (%d bytes)", p.Filesz, p.Off, size)
		}
		if last != nil && p.Vaddr < last.Vaddr+last.Filesz {
			return fmt.Errorf("its PT_LOAD segments at %#x and %#x are not in ascending order of address, apart: not a program a linker made", last.Vaddr, p.Vaddr)
		}
		last = p
	}
	return nil
}

// read returns n bytes at addr from the PT_LOAD segment that holds them.
func (m *image) read(addr, n uint64) ([]byte, bool) {
	p := m.prog(addr, n)
	if p == nil {
		return nil, false
	}
	if d, ok := m.segs[p]; ok {
		return d[addr-p.Vaddr : addr-p.Vaddr+n], true
	}
	if m.file != nil {
		if b, ok := m.file.slice(p.Off+addr-p.Vaddr, n); ok {
			return b, true
		}
	}
	b := make([]byte, n)
	if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
		return nil, false
	}
	return b, true
}

// segment returns the bytes of the PT_LOAD segment p, read once; nil when
// the budget is spent or it cannot be read.
func (m *image) segment(p *elf.Prog) []byte {
	if d, ok := m.segs[p]; ok {
		return d
	}
	if !m.budget.take(p.Filesz) {
		return nil
	}
	if m.file != nil {
		if d, ok := m.file.slice(p.Off, p.Filesz); ok {
			m.segs[p] = d
			return d
		}
	}
	d, err := io.ReadAll(p.Open())
	if err != nil || uint64(len(d)) != p.Filesz {
		return nil
	}
	m.segs[p] = d
	return d
}

// sectionData returns the bytes of section s, read once: where they lie
// in the mapped file, else read (a compressed section, or a file not
// mapped); nil when it has none in the file, they cannot be read or the
// budget is spent (its size, uncompressed, counts against it).
func (m *image) sectionData(s *elf.Section) []byte {
	if d, ok := m.secs[s]; ok {
		return d
	}
	var d []byte
	if s.Type != elf.SHT_NOBITS && m.budget.take(s.Size) {
		if m.file != nil && s.Flags&elf.SHF_COMPRESSED == 0 {
			d, _ = m.file.slice(s.Offset, s.Size)
		} else if b, err := s.Data(); err == nil {
			d = b
		}
	}
	m.secs[s] = d
	return d
}

// word returns the 8-byte word at addr, or, when the file holds 0 there,
// the addend of a relative dynamic relocation of it: linkers that leave
// the targets of R_*_RELATIVE relocations 0 in the file (lld does) put
// the value there.
func (m *image) word(addr uint64) (uint64, bool) {
	b, ok := m.read(addr, 8)
	if !ok {
		return 0, false
	}
	if v := binary.LittleEndian.Uint64(b); v != 0 {
		return v, true
	}
	return m.relocs()[addr], true
}

// Dynamic section tags (elf.h) for the relocation table.
const (
	dtNull    = 0
	dtRela    = 7
	dtRelaSz  = 8
	dtRelaEnt = 9
	relaSize  = 24 // Elf64_Rela: r_offset, r_info, r_addend
	dynSize   = 16 // Elf64_Dyn: d_tag, d_val
)

// relocs returns the targets of the executable's R_*_RELATIVE relocations
// with their addends (read once): from its SHT_RELA sections, or, when it
// has no section headers, from the table its dynamic segment (PT_DYNAMIC)
// names with DT_RELA and DT_RELASZ, as the dynamic loader finds it. Empty
// for an executable that is not position-independent, or when the budget
// is spent.
func (m *image) relocs() map[uint64]uint64 {
	if m.relaOK {
		return m.rela
	}
	m.relaOK, m.rela = true, map[uint64]uint64{}
	var relative uint32
	switch m.ef.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return m.rela
	}
	add := func(data []byte) {
		for i := 0; i+relaSize <= len(data); i += relaSize {
			if uint32(binary.LittleEndian.Uint64(data[i+8:])) == relative {
				m.rela[binary.LittleEndian.Uint64(data[i:])] = binary.LittleEndian.Uint64(data[i+16:])
			}
		}
	}
	sections := false
	for _, s := range m.ef.Sections {
		if s.Type != elf.SHT_RELA {
			continue
		}
		sections = true
		add(m.sectionData(s))
	}
	if sections {
		return m.rela
	}
	for _, p := range m.ef.Progs {
		if p.Type != elf.PT_DYNAMIC || p.Filesz > 1<<20 || !m.budget.take(p.Filesz) {
			continue
		}
		dyn := make([]byte, p.Filesz)
		if _, err := p.ReadAt(dyn, 0); err != nil {
			continue
		}
		var addr, size, ent uint64
		for i := 0; i+dynSize <= len(dyn); i += dynSize {
			tag, val := binary.LittleEndian.Uint64(dyn[i:]), binary.LittleEndian.Uint64(dyn[i+8:])
			switch tag {
			case dtNull:
				i = len(dyn)
			case dtRela:
				addr = val
			case dtRelaSz:
				size = val
			case dtRelaEnt:
				ent = val
			}
		}
		if addr == 0 || size == 0 || ent != 0 && ent != relaSize || !m.budget.take(size) {
			continue
		}
		if data, ok := m.read(addr, size); ok {
			add(data)
		}
	}
	return m.rela
}

// maxModuleCandidates bounds the words findModule checks as the module
// data: a program holds one word that points at its function table
// (moduledata.pcHeader; with its relocation, in a PIE), a crafted
// segment as many as it has words.
const maxModuleCandidates = 64

// errNoModule wraps findModule's reasons.
var errNoModule = errors.New("no module data (runtime.moduledata) found")

// findModule returns the address, as linked, of the module data of the
// executable whose function table is t: the .go.module section when there
// is one (its pcHeader must be t's address), else the first 8-byte word
// of a writable segment that holds t's address (in the file, or as a
// relative relocation's addend for a PIE whose linker left it 0) and
// whose module data checks out (checkModule). The error says why none
// does.
func findModule(m *image, t *pclntab) (uint64, error) {
	if s := m.ef.Section(".go.module"); s != nil && s.Type != elf.SHT_NOBITS {
		h, ok := m.word(s.Addr + 8*moduledataPCHeader)
		switch {
		case !ok:
			return 0, fmt.Errorf("%w: .go.module at %#x is in no segment", errNoModule, s.Addr)
		case h != t.addr:
			return 0, fmt.Errorf(".go.module's pcHeader is %#x, not the function table's address %#x", h, t.addr)
		}
		if err := checkModule(m, s.Addr, t); err != nil {
			return 0, fmt.Errorf(".go.module at %#x: %w", s.Addr, err)
		}
		return s.Addr, nil
	}
	var want [8]byte
	binary.LittleEndian.PutUint64(want[:], t.addr)
	var candidates []uint64
	for _, p := range m.ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 || p.Filesz == 0 {
			continue
		}
		data := m.segment(p)
		if data == nil {
			return 0, fmt.Errorf("%w: %w", errNoModule, errTooMuch)
		}
		// Segments start page-aligned: an 8-byte word of the segment is
		// 8-byte aligned in its addresses too.
		for i := 0; i+8 <= len(data) && len(candidates) <= maxModuleCandidates; {
			j := bytes.Index(data[i:], want[:])
			if j < 0 {
				break
			}
			if a := p.Vaddr + uint64(i+j); a%8 == 0 {
				candidates = append(candidates, a)
			}
			i += j + 1
		}
	}
	for a, v := range m.relocs() {
		if len(candidates) > maxModuleCandidates {
			break
		}
		if p := m.prog(a, 8*moduledataWords); v == t.addr && p != nil && p.Flags&elf.PF_W != 0 {
			candidates = append(candidates, a)
		}
	}
	slices.Sort(candidates) // the relocations come from a map
	candidates = slices.Compact(candidates)
	if len(candidates) > maxModuleCandidates {
		return 0, fmt.Errorf("%w: more than %d words of its writable segments point at the function table (%#x), where a program has one: not a program the linker made", errNoModule, maxModuleCandidates, t.addr)
	}
	var why []string
	for _, a := range candidates {
		err := checkModule(m, a, t)
		if err == nil {
			return a, nil
		}
		if len(why) < 3 {
			why = append(why, fmt.Sprintf("at %#x: %v", a, err))
		}
	}
	if len(candidates) == 0 {
		return 0, fmt.Errorf("%w: no word of a writable segment points at the function table (%#x)", errNoModule, t.addr)
	}
	return 0, fmt.Errorf("%w: %d words point at the function table (%#x), none checks out (%s)", errNoModule, len(candidates), t.addr, strings.Join(why, "; "))
}

// checkModule checks the words of a module data at addr that every release
// has where kwatch looks: its funcnametab starts where the function
// table's header says (pcHeader + funcnameOffset), and text ≤ minpc <
// maxpc ≤ etext lie in one executable segment.
func checkModule(m *image, addr uint64, t *pclntab) error {
	b, ok := m.read(addr, 8*moduledataWords)
	if !ok {
		return errors.New("not within a segment")
	}
	word := func(i int) uint64 {
		if v := binary.LittleEndian.Uint64(b[8*i:]); v != 0 {
			return v
		}
		v, _ := m.word(addr + 8*uint64(i))
		return v
	}
	if off, ok := t.funcnameOffset(); ok && word(moduledataFuncnametab) != t.addr+off {
		return fmt.Errorf("its funcnametab is at %#x, not the function table's names at %#x", word(moduledataFuncnametab), t.addr+off)
	}
	text, etext := word(moduledataText), word(moduledataEText)
	minpc, maxpc := word(moduledataMinPC), word(moduledataMaxPC)
	if text > minpc || minpc >= maxpc || maxpc > etext {
		return fmt.Errorf("text %#x, minpc %#x, maxpc %#x, etext %#x are not in order", text, minpc, maxpc, etext)
	}
	if p := m.prog(text, etext-text); p == nil || p.Flags&elf.PF_X == 0 {
		return fmt.Errorf("its text %#x-%#x is not in one executable segment", text, etext)
	}
	return nil
}

// funcnameOffset returns the offset of the function names from the
// table's header (pcHeader.funcnameOffset, runtime/symtab.go: the fourth
// word after the magic's 8 bytes since Go 1.18, which added textStart; the
// third in Go 1.16 and 1.17); false for an older table.
func (t *pclntab) funcnameOffset() (uint64, bool) {
	if len(t.data) < 4 {
		return 0, false
	}
	var i int
	switch binary.LittleEndian.Uint32(t.data) {
	case 0xfffffff1, 0xfffffff0:
		i = 3
	case 0xfffffffa:
		i = 2
	default:
		return 0, false
	}
	if len(t.data) < 8+8*(i+1) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(t.data[8+8*i:]), true
}

// buildInfoMagic starts Go's build information (.go.buildinfo; 16-byte
// aligned: debug/buildinfo).
const buildInfoMagic = "\xff Go buildinf:"

// goVersion returns the Go release that built the executable, from its
// build information: debug/buildinfo's, or, where that finds none (it
// looks in the .go.buildinfo section, or without section headers in the
// first writable segment only, which in a PIE is another), the build
// information found in any writable segment by its magic. "" when there is
// none or it is not of the form Go 1.18 on writes (the version inline, as a
// length-prefixed string after the 32-byte header).
func goVersion(f io.ReaderAt, m *image) string {
	if bi, err := buildinfo.Read(f); err == nil {
		return bi.GoVersion
	}
	for _, p := range m.ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 || p.Filesz == 0 {
			continue
		}
		data := m.segment(p)
		for i := 0; i < len(data); {
			j := bytes.Index(data[i:], []byte(buildInfoMagic))
			if j < 0 {
				break
			}
			i += j
			const head = 32 // magic, pointer size, flags, padding
			if (p.Vaddr+uint64(i))%16 == 0 && i+head < len(data) && data[i+15]&2 != 0 {
				n, w := binary.Uvarint(data[i+head:])
				if w > 0 && n > 0 && n <= 128 && uint64(i+head+w)+n <= uint64(len(data)) {
					v := string(data[i+head+w : i+head+w+int(n)])
					if strings.HasPrefix(v, "go") || strings.HasPrefix(v, "devel ") {
						return v
					}
				}
			}
			i++
		}
	}
	return ""
}
