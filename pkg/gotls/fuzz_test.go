package gotls

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// findBounds runs Find on the bytes b as a file and fails if it panicked
// (the test does), took more than 5 s, or allocated more than 40 times the
// file's size and 16 MiB (a real Go program's function table, the symbol
// tables and the segments it scans, all proportional to the file).
func findBounds(t *testing.T, b []byte) {
	path := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, _ = Find(path)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if took > 5*time.Second {
		t.Errorf("Find took %v on a file of %d bytes", took, len(b))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 40*uint64(len(b))+16<<20 {
		t.Errorf("Find allocated %d bytes on a file of %d bytes", n, len(b))
	}
}

// fuzzSeeds are the test programs' bytes: real ELF files, unstripped and
// stripped, PIE and not.
func fuzzSeeds(f *testing.F) map[string][]byte {
	out := map[string][]byte{}
	for _, name := range []string{"plain", "stripped", "pie-stripped", "notls-stripped"} {
		b, err := os.ReadFile(testProgram(f, name))
		if err != nil {
			f.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// FuzzFind runs Find on any bytes as a file: the prefixes of real programs
// (their headers), and a small file made of a stripped program's ELF and
// program headers with its function table's first bytes after them.
func FuzzFind(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		for _, n := range []int{64, 512, 4096, 64 << 10} {
			f.Add(b[:n])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { findBounds(t, data) })
}

// patchBase is a real program the patched fuzz tests write over: its
// bytes, with its section headers removed when noSections says so.
type patchBase struct {
	build      string
	noSections bool
}

// patchBases reads the programs, and adds to the corpus a few patches of
// each (which: its index) at the places the readers look: its sections of
// names (found in the original's section headers), its module data's
// words (words) and its dynamic segment.
func patchBases(f *testing.F, bases []patchBase, names []string, words []int) [][]byte {
	var out [][]byte
	for i, base := range bases {
		b, err := os.ReadFile(testProgram(f, base.build))
		if err != nil {
			f.Fatal(err)
		}
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			f.Fatal(err)
		}
		var offs []uint64
		for _, name := range names {
			if s := ef.Section(name); s != nil {
				offs = append(offs, s.Offset, s.Offset+8, s.Offset+64, s.Offset+s.Size/2)
			}
		}
		img := newImage(ef, &readBudget{left: 1 << 40})
		if t, err := findPclntab(img); err == nil && t != nil {
			if mod, err := img.module(t); err == nil {
				for _, p := range ef.Progs {
					if p.Type == elf.PT_LOAD && p.Vaddr <= mod && mod < p.Vaddr+p.Filesz {
						for _, w := range words {
							offs = append(offs, mod-p.Vaddr+p.Off+8*uint64(w))
						}
					}
				}
			}
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_DYNAMIC {
				offs = append(offs, p.Off, p.Off+16, p.Off+8*16)
			}
		}
		if base.noSections {
			clear(b[0x28:0x30]) // e_shoff
			clear(b[0x3c:0x40]) // e_shnum, e_shstrndx
		}
		for _, off := range offs {
			f.Add(uint8(i), off, []byte{0xff, 0xff, 0xff, 0x7f})
			f.Add(uint8(i), off, []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
			f.Add(uint8(i), off, []byte{0, 0, 0, 0, 0, 0, 0, 0})
		}
		out = append(out, b)
	}
	return out
}

// addSectionSizes adds to the corpus of a patched fuzz test, for the base
// of index i (bytes b), each section header's size made 0, and 1 TiB.
func addSectionSizes(f *testing.F, i int, b []byte) {
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return // a base with no section headers
	}
	shoff := binary.LittleEndian.Uint64(b[ehShoff:])
	for j := range ef.Sections {
		at := shoff + uint64(j)*shEntSize + shSize
		f.Add(uint8(i), at, make([]byte, 8))
		f.Add(uint8(i), at, []byte{0, 0, 0, 0, 0, 1, 0, 0})
	}
}

// FuzzFindPatched runs Find on stripped programs with data written over
// them at off (wrapped to the file's size): the fuzzer reaches the
// function table, the module data and the relocations, deep in a real
// file: a PIE of kwatch's release with its section headers, and one of
// go1.22 with none (its function table found by its magic, its module data
// by its pointer to it, its relocations through its dynamic segment).
func FuzzFindPatched(f *testing.F) {
	bases := patchBases(f, []patchBase{{"pie-stripped", false}, {"conns-go1.22-pie-stripped", true}},
		[]string{".gopclntab", ".go.module", ".rela.dyn", ".data.rel.ro", ".noptrdata"}, []int{moduledataPCHeader, moduledataFuncnametab, moduledataText, moduledataMaxPC})
	for i, b := range bases {
		addSectionSizes(f, i, b) // an empty .gopclntab had Find index past its end
	}
	f.Add(uint8(0), uint64(0x20), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // e_phoff
	f.Add(uint8(0), uint64(0x38), []byte{0xff, 0xff})                                     // e_phnum
	f.Fuzz(func(t *testing.T, which uint8, off uint64, data []byte) {
		c := bytes.Clone(bases[int(which)%len(bases)])
		copy(c[off%uint64(len(c)):], data)
		findBounds(t, c)
	})
}

// FuzzLayoutPatched runs LayoutFor on stripped programs with data written
// over them at off: go1.26's module data with its itablinks (in
// .go.module), go1.27's with its itabs laid end to end, go1.22's (in
// .noptrdata, found by its pointer to the function table), and a go1.22
// PIE with no section headers; the fuzzer reaches the module data, the
// relocations and the type descriptors the layout is read from, and the
// function table the TLS 1.2 closures are found in. LayoutFor must not
// panic, must end within 5 s and allocate within 40 times the file's size
// and 16 MiB, and a layout it returns must have passed makeOffsets's
// checks.
func FuzzLayoutPatched(f *testing.F) {
	w := moduleWords["go1.22"]
	bases := patchBases(f, []patchBase{{"conns-stripped", false}, {"conns-go1.27-stripped", false}, {"conns-go1.22-stripped", false}, {"conns-go1.22-pie-stripped", true}},
		[]string{".go.module", ".go.type", ".rodata", ".typelink", ".itablink", ".noptrdata"}, []int{moduledataPCHeader, moduledataText, w.types, w.etypes, w.itablinks, w.itablinks + 1, 40, 41})
	for i, b := range bases {
		addSectionSizes(f, i, b)
	}
	f.Fuzz(func(t *testing.T, which uint8, off uint64, data []byte) {
		c := bytes.Clone(bases[int(which)%len(bases)])
		copy(c[off%uint64(len(c)):], data)
		path := filepath.Join(t.TempDir(), "exe")
		if err := os.WriteFile(path, c, 0o755); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		l, err := LayoutFor(path)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if took > 5*time.Second {
			t.Errorf("LayoutFor took %v", took)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 40*uint64(len(c))+16<<20 {
			t.Errorf("LayoutFor allocated %d bytes on a file of %d bytes", n, len(c))
		}
		if err == nil && (l.off.connSize == 0 || l.off.connSize > maxRead) {
			t.Errorf("a layout with a crypto/tls.Conn of %d bytes", l.off.connSize)
		}
	})
}

// FuzzReadPatched runs Find and LayoutFor on programs with their symbol
// tables and DWARF, left uncompressed so that what the fuzzer writes is
// read as written, with data written over them at off (wrapped to the
// file's size): one linked by Go's linker (its DWARF's strings inline),
// one by the system's (gcc's units beside Go's, their names in
// .debug_str, an abbreviation table each). Seeded at the section and
// program headers, the symbol tables and the DWARF sections entries are
// decoded from. Neither may panic, and they may allocate no more than 40
// times the file's size and 16 MiB; the fuzzer's rate of executions shows
// the time each takes.
func FuzzReadPatched(f *testing.F) {
	bases := patchBases(f, []patchBase{{"conns-rawdwarf", false}, {"external-rawdwarf", false}},
		[]string{".debug_abbrev", ".debug_info", ".debug_str", ".debug_line_str", ".debug_str_offsets", ".debug_addr", ".symtab", ".strtab", ".shstrtab"}, nil)
	for i, b := range bases {
		addSectionSizes(f, i, b)
		f.Add(uint8(i), uint64(ehPhnum), []byte{0xff, 0x7f})
		f.Add(uint8(i), uint64(ehShnum), []byte{0, 0})
	}
	f.Fuzz(func(t *testing.T, which uint8, off uint64, data []byte) {
		c := bytes.Clone(bases[int(which)%len(bases)])
		copy(c[off%uint64(len(c)):], data)
		path := filepath.Join(t.TempDir(), "exe")
		if err := os.WriteFile(path, c, 0o755); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, ferr := Find(path)
		l, lerr := LayoutFor(path)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 40*uint64(len(c))+16<<20 {
			t.Errorf("Find and LayoutFor allocated %d bytes on a file of %d bytes", n, len(c))
		}
		for _, err := range []error{ferr, lerr} {
			if err != nil && (strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), path)) {
				t.Errorf("error %q: not one line naming the file", err)
			}
		}
		if lerr == nil && (l.off.connSize == 0 || l.off.connSize > maxRead) {
			t.Errorf("a layout with a crypto/tls.Conn of %d bytes", l.off.connSize)
		}
	})
}
