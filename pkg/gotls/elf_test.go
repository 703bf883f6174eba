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
	"time"
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
// whole file (and no section headers, so that the function table is
// looked for in the segments) is read in bounded time, not once a header.
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
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := Find(out); done <- err }()
	select {
	case err := <-done:
		t.Logf("Find: %v after %v", err, time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatalf("Find still reading after 20 s")
	}
}
