package gotls

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
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

// FuzzFindPatched runs Find on a stripped program with data written over
// it at off (wrapped to the file's size): the fuzzer reaches the function
// table, the module data and the relocations, deep in a real file.
func FuzzFindPatched(f *testing.F) {
	b := fuzzSeeds(f)["pie-stripped"]
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{".gopclntab", ".go.module", ".rela.dyn", ".data.rel.ro"} {
		if s := ef.Section(name); s != nil {
			f.Add(uint64(s.Offset), []byte{0xff, 0xff, 0xff, 0x7f})
			f.Add(uint64(s.Offset+8), []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
			f.Add(uint64(s.Offset+64), []byte{0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f})
		}
	}
	f.Add(uint64(0x20), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // e_phoff
	f.Add(uint64(0x38), []byte{0xff, 0xff})                                     // e_phnum
	f.Fuzz(func(t *testing.T, off uint64, data []byte) {
		c := bytes.Clone(b)
		copy(c[off%uint64(len(c)):], data)
		findBounds(t, c)
	})
}

// FuzzLayoutPatched runs LayoutFor on stripped programs (go1.26's module
// data with its itablinks, go1.27's with its itabs laid end to end) with
// data written over them at off: the fuzzer reaches the module data and
// the type descriptors the layout is read from. LayoutFor must not panic,
// must end within 5 s and allocate within 40 times the file's size and
// 16 MiB, and a layout it returns must have passed makeOffsets's checks.
func FuzzLayoutPatched(f *testing.F) {
	seeds := map[uint8][]byte{}
	for i, name := range []string{"conns-stripped", "conns-go127-stripped"} {
		b, err := os.ReadFile(testProgram(f, name))
		if err != nil {
			f.Fatal(err)
		}
		seeds[uint8(i)] = b
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			f.Fatal(err)
		}
		for _, sec := range []string{".go.module", ".go.type", ".rodata", ".typelink", ".itablink"} {
			if s := ef.Section(sec); s != nil {
				f.Add(uint8(i), uint64(s.Offset+8*37), []byte{0xff, 0xff, 0xff, 0x7f})
				f.Add(uint8(i), uint64(s.Offset+8*40), []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
				f.Add(uint8(i), uint64(s.Offset+s.Size/2), []byte{0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f})
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, off uint64, data []byte) {
		c := bytes.Clone(seeds[which%2])
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
