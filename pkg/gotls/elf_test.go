package gotls

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestFind: each unstripped build is found in its symbol table at the
// address go tool nm gives, at the file offset its .text section header
// implies; its stripped twin is found in .gopclntab at the same address and
// offset, where the same code is.
func TestFind(t *testing.T) {
	for _, c := range []struct{ unstripped, stripped, arch string }{
		{"plain", "stripped", "amd64"},
		{"pie", "pie-stripped", "amd64"},
		{"external", "external-stripped", "amd64"},
		{"arm64", "arm64-stripped", "arm64"},
	} {
		t.Run(c.stripped, func(t *testing.T) {
			t.Parallel()
			u, s := testProgram(t, c.unstripped), testProgram(t, c.stripped)
			want := Location{Path: u, Address: nmAddress(t, u), Method: BySymbolTable, Arch: c.arch, GoVersion: runtime.Version()}
			want.Offset = textOffset(t, u, want.Address)
			got, err := Find(u)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Find(%s) = %+v, want %+v", c.unstripped, got, want)
			}
			want.Path, want.Method = s, ByPclntab
			if got, err = Find(s); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Find(%s) = %+v, want %+v", c.stripped, got, want)
			}
			if a, b := codeAt(t, u, got.Offset), codeAt(t, s, got.Offset); !bytes.Equal(a, b) {
				t.Errorf("code at %#x: %x in %s, %x in %s", got.Offset, a, c.unstripped, b, c.stripped)
			}
		})
	}
}

// textOffset converts addr to a file offset through the .text section header
// (not the program headers Find uses).
func textOffset(t *testing.T, path string, addr uint64) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil || addr < s.Addr || addr >= s.Addr+s.Size {
		t.Fatalf("%s: %#x is not in .text", path, addr)
	}
	return addr - s.Addr + s.Offset
}

// codeAt returns 32 bytes of the file at off.
func codeAt(t *testing.T, path string, off uint64) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[off : off+32]
}

// TestFindHarder: stripped builds made harder to read still give the same
// offset, and a wrong module data gives an error, not a guess.
func TestFindHarder(t *testing.T) {
	for _, name := range []string{"stripped", "pie-stripped"} {
		t.Run(name, func(t *testing.T) {
			path := testProgram(t, name)
			want, err := Find(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			mod := f.Section(".go.module")
			f.Close()
			if mod == nil {
				t.Fatal("no .go.module")
			}

			// No section headers at all: the function table is found by
			// its magic, the module data by its pointer to it.
			noSections := patched(t, path, func(b []byte) {
				clear(b[0x28:0x30]) // e_shoff
				clear(b[0x3c:0x40]) // e_shnum, e_shstrndx
			})
			// The module data's words left to relocations, as lld leaves
			// them (only a PIE has relocations for them).
			zeroed := patched(t, path, func(b []byte) {
				clear(b[mod.Offset+8*moduledataPCHeader:][:8])
				clear(b[mod.Offset+8*moduledataText:][:8])
			})
			// Both: the module data found by a relocation's addend, the
			// relocations by the dynamic segment.
			zeroedNoSections := patched(t, zeroed, func(b []byte) {
				clear(b[0x28:0x30])
				clear(b[0x3c:0x40])
			})
			for _, p := range []string{noSections, zeroed, zeroedNoSections} {
				if p != noSections && name != "pie-stripped" {
					continue
				}
				got, err := Find(p)
				if err != nil {
					t.Fatalf("%s: %v", filepath.Base(p), err)
				}
				// debug/buildinfo looks for the build information in the
				// first writable segment when there are no sections: in
				// a PIE that is another, and kwatch looks in all.
				if got.Offset != want.Offset || got.Method != ByPclntab || got.GoVersion != want.GoVersion {
					t.Errorf("%s: %+v, want offset %#x", filepath.Base(p), got, want.Offset)
				}
			}

			wrongHeader := patched(t, path, func(b []byte) {
				binary.LittleEndian.PutUint64(b[mod.Offset+8*moduledataPCHeader:], 0x1234)
			})
			if _, err := Find(wrongHeader); err == nil || !strings.Contains(err.Error(), "pcHeader") {
				t.Errorf("module data whose pcHeader is not the function table: err %v", err)
			}
		})
	}
}

// TestFindErrors: each kind of file Find refuses, with its error.
func TestFindErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	badELF := filepath.Join(dir, "bad.elf")
	if err := os.WriteFile(badELF, []byte("\x7fELF\x09\x09\x09"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A named pipe with no writer: opening it for reading would wait.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	riscv := patched(t, testProgram(t, "stripped"), func(b []byte) {
		binary.LittleEndian.PutUint16(b[0x12:], uint16(elf.EM_RISCV)) // e_machine
	})
	for _, c := range []struct {
		name, path string
		want       error
		says       string
	}{
		{"text file", text, ErrNotELF, "not an ELF file"},
		{"empty file", empty, ErrNotELF, "not an ELF file"},
		{"broken ELF header", badELF, ErrNotELF, "not an ELF file"},
		{"missing file", filepath.Join(dir, "missing"), os.ErrNotExist, "no such file"},
		{"directory", dir, ErrNotELF, "a directory, not a regular file"},
		{"named pipe", fifo, ErrNotELF, "a named pipe, not a regular file"},
		{"device", "/dev/zero", ErrNotELF, "a character device, not a regular file"},
		{"C program", "/bin/true", ErrNotGo, "SSLKEYLOGFILE"},
		{"Go without crypto/tls", testProgram(t, "notls"), ErrNoCryptoTLS, "SSLKEYLOGFILE"},
		{"stripped Go without crypto/tls", testProgram(t, "notls-stripped"), ErrNoCryptoTLS, "SSLKEYLOGFILE"},
		{"RISC-V", riscv, ErrUnsupportedArch, "amd64 and arm64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil && c.want != os.ErrNotExist {
				t.Skip(err)
			}
			_, err := Find(c.path)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if msg := err.Error(); !strings.Contains(msg, c.path) || !strings.Contains(msg, c.says) || strings.Contains(msg, "\n") {
				t.Errorf("message %q: want one line naming %s and saying %q", msg, c.path, c.says)
			}
		})
	}
}

func TestMethodString(t *testing.T) {
	for m, want := range map[Method]string{BySymbolTable: "symbol table", ByPclntab: ".gopclntab", 0: "Method(0)"} {
		if got := m.String(); got != want {
			t.Errorf("%d: %q, want %q", int(m), got, want)
		}
	}
}

// TestFindManySegments: a file whose 65 535 program headers each load the
// whole file (and no section headers, so that the function table would be
// looked for in the segments) is refused at once for having more program
// headers than Linux loads a program with, where Find read it once a
// header.
func TestFindManySegments(t *testing.T) {
	path := testProgram(t, "stripped")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 0xffff
	phoff := len(b)
	size := uint64(phoff + n*56)
	for i := 0; i < n; i++ {
		var ph [56]byte
		binary.LittleEndian.PutUint32(ph[0:], uint32(elf.PT_LOAD))
		binary.LittleEndian.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_W))
		binary.LittleEndian.PutUint64(ph[16:], 0x400000) // p_vaddr
		binary.LittleEndian.PutUint64(ph[32:], size)     // p_filesz
		binary.LittleEndian.PutUint64(ph[40:], size)     // p_memsz
		b = append(b, ph[:]...)
	}
	binary.LittleEndian.PutUint64(b[0x20:], uint64(phoff)) // e_phoff
	binary.LittleEndian.PutUint16(b[0x38:], n)             // e_phnum
	clear(b[0x28:0x30])                                    // e_shoff
	clear(b[0x3c:0x40])                                    // e_shnum, e_shstrndx
	out := filepath.Join(t.TempDir(), "many")
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, read := range []func(string) error{
		func(p string) error { _, err := Find(p); return err },
		func(p string) error { _, err := LayoutFor(p); return err },
	} {
		err := read(out)
		if !errors.Is(err, ErrNotELF) || !strings.Contains(err.Error(), "65535 program headers, more than Linux loads") {
			t.Errorf("err %v", err)
		}
	}
}

// pclnTable returns a function table of the format magic names (Go 1.20
// and 1.18: 0xfffffff1, 0xfffffff0; Go 1.16: 0xfffffffa; Go 1.2:
// 0xfffffffb) whose functions are names, at entries 0x40 apart from
// text+0x1000 (as offsets from text from Go 1.18 on), laid out as each
// release's linker lays it out (cmd/link/internal/ld/pcln.go) and
// debug/gosym reads it: the header, the names, the function table and its
// end's entry, then one _func of ten fields per function.
func pclnTable(magic uint32, text uint64, names []string) []byte {
	le := binary.LittleEndian
	const funcSize = 8 + 9*4 // _func: entry, nameOff and eight more 4-byte fields
	rel := magic == 0xfffffff1 || magic == 0xfffffff0
	field := uint64(8)
	head := uint64(8 + 7*8) // magic; nfunc, nfiles, then five offsets (Go 1.16)
	switch magic {
	case 0xfffffff1, 0xfffffff0:
		field, head = 4, 8+8*8 // and textStart
	case 0xfffffffb:
		head = 16 // nfunc, then the function table
	}
	var nameTab []byte
	nameOffs := make([]uint64, len(names))
	for i, n := range names {
		nameOffs[i] = uint64(len(nameTab))
		nameTab = append(append(nameTab, n...), 0)
	}
	namesAt := head
	if magic == 0xfffffffb {
		namesAt = head + (2*uint64(len(names))+1)*field + 8 // after the function table and filetab's offset
	}
	functab := head + uint64(len(nameTab))
	if magic == 0xfffffffb {
		functab = head
	}
	nf := uint64(len(names))
	funcs := functab + (2*nf+1)*field + 8 // the table, its end, and (Go 1.2) the file table's offset
	if magic == 0xfffffffb {
		funcs = namesAt + uint64(len(nameTab))
	}
	d := make([]byte, funcs+nf*funcSize+8)
	le.PutUint32(d, magic)
	d[6], d[7] = 1, 8
	put := func(at, v uint64) {
		if field == 4 {
			le.PutUint32(d[at:], uint32(v))
		} else {
			le.PutUint64(d[at:], v)
		}
	}
	le.PutUint64(d[8:], nf)
	funcBase := functab // _func offsets are from the function table (Go 1.16 on) or the table's start (Go 1.2)
	switch magic {
	case 0xfffffff1, 0xfffffff0:
		for i, w := range []uint64{text, namesAt, functab, functab, functab, functab} {
			le.PutUint64(d[24+8*i:], w)
		}
	case 0xfffffffa:
		for i, w := range []uint64{namesAt, functab, functab, functab, functab} {
			le.PutUint64(d[24+8*i:], w)
		}
	case 0xfffffffb:
		funcBase = 0
		le.PutUint32(d[functab+(2*nf+1)*field:], uint32(len(d)-8)) // filetab: a count of 0
	}
	copy(d[namesAt:], nameTab)
	for i := range nf {
		entry := 0x1000 + 0x40*i
		if !rel {
			entry += text
		}
		f := funcs + i*funcSize
		put(functab+2*field*i, entry)
		put(functab+2*field*i+field, f-funcBase)
		entryField := uint64(8)
		if rel {
			entryField = 4
		}
		if rel {
			le.PutUint32(d[f:], uint32(entry))
		} else {
			le.PutUint64(d[f:], entry)
		}
		nameOff := nameOffs[i]
		if magic == 0xfffffffb {
			nameOff += namesAt
		}
		le.PutUint32(d[f+entryField:], uint32(nameOff))
	}
	end := 0x1000 + 0x40*nf
	if !rel {
		end += text
	}
	put(functab+2*field*nf, end)
	return d
}

// gosymFuncs returns the functions debug/gosym finds in the table d, by
// name, with their entries.
func gosymFuncs(t *testing.T, d []byte, text uint64) map[string]uint64 {
	t.Helper()
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(d, text))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range tab.Funcs {
		out[f.Name] = f.Entry
	}
	return out
}

// TestFuncsAsGosym: the function table walk (pclntab.funcs) finds every
// function debug/gosym finds, at the same entries, in tables of each
// format (made as the linker of each release lays them out), in the Go
// 1.15 program debug/gosym's own tests read, and in a program built now;
// a name longer than maxName is not one it finds.
func TestFuncsAsGosym(t *testing.T) {
	const text = 0x401000
	names := []string{"runtime.main", "main.main", FuncName, "crypto/tls.(*clientHandshakeState).handshake.ekmFromMasterSecret.func1"}
	all := func(tab *pclntab, text uint64) map[string]uint64 {
		return tab.funcs(text, 1<<16, func([]byte) bool { return true })
	}
	for _, magic := range pclnMagics {
		t.Run(fmt.Sprintf("%#x", magic), func(t *testing.T) {
			d := pclnTable(magic, text, names)
			want := gosymFuncs(t, d, text)
			if len(want) != len(names) {
				t.Fatalf("debug/gosym finds %v", want)
			}
			tab := &pclntab{data: d}
			if got := all(tab, text); !maps.Equal(got, want) {
				t.Errorf("funcs %v, debug/gosym %v", got, want)
			}
			if ok, err := tab.valid(&readBudget{left: 1 << 20}); !ok || err != nil {
				t.Errorf("valid: %v, %v", ok, err)
			}
			if got := tab.funcs(text, len(FuncName)-1, func([]byte) bool { return true }); len(got) != 2 {
				t.Errorf("names of at most %d bytes: %v", len(FuncName)-1, got)
			}
		})
	}
	t.Run("go1.15", func(t *testing.T) {
		// The function table of debug/gosym's Go 1.15 test program
		// (linux/amd64): a Go 1.2 table.
		goroot, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatal(err)
		}
		z, err := os.Open(filepath.Join(strings.TrimSpace(string(goroot)), "src/debug/gosym/testdata/pcln115.gz"))
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		r, err := gzip.NewReader(z)
		if err != nil {
			t.Fatal(err)
		}
		d, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		want := gosymFuncs(t, d, 0)
		if got := all(&pclntab{data: d}, 0); len(want) < 1000 || !maps.Equal(got, want) {
			t.Errorf("funcs found %d functions, debug/gosym %d", len(got), len(want))
		}
	})
	t.Run("stripped", func(t *testing.T) {
		ef, err := elf.Open(testProgram(t, "stripped"))
		if err != nil {
			t.Fatal(err)
		}
		defer ef.Close()
		s := ef.Section(".gopclntab")
		d, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		img := newImage(ef, &readBudget{left: 1 << 40})
		text, err := pclnText(img, &pclntab{data: d, addr: s.Addr})
		if err != nil {
			t.Fatal(err)
		}
		want := gosymFuncs(t, d, text)
		if got := all(&pclntab{data: d, addr: s.Addr}, text); len(want) < 1000 || !maps.Equal(got, want) {
			t.Errorf("funcs found %d functions, debug/gosym %d", len(got), len(want))
		}
	})
}
