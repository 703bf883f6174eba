package gotls

// What debug/elf would trust in an executable's headers, checked before it
// reads them, and the symbol tables read where they lie. The process
// kwatch attaches to may run a crafted executable: debug/elf bounds each
// read by the file's size, but it copies each name from a string table to
// its NUL, so many headers or symbols that name the same long string make
// it copy that string once each: 4 096 section headers naming a 256 KiB
// string in a 6 MB file had elf.NewFile allocate 1 GiB (twice: Find and
// debug/buildinfo each call it), and 7 495 symbols naming the inside of a
// 256 KiB string table, 1.4 GB for Find.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

const (
	// maxProgs is the most program headers Linux loads an executable
	// with: their 56 bytes each within 64 KiB (fs/binfmt_elf.c,
	// elf_read_phdrs; a Go program has about ten). Past it the file is
	// no program a process runs, and each address looked up would be
	// looked for in each of up to 65 535 headers.
	maxProgs = 65536 / 56
	// maxSectionNames bounds the bytes of section names elf.NewFile
	// copies (a Go program's forty sections have under 1 KiB of names).
	maxSectionNames = 1 << 20
	// Offsets in the ELF64 file and section headers (elf.h: Elf64_Ehdr,
	// Elf64_Shdr).
	ehPhoff, ehShoff, ehPhnum, ehShentsize, ehShnum, ehShstrndx = 0x20, 0x28, 0x38, 0x3a, 0x3c, 0x3e
	shType, shFlags, shOffset, shSize, shLink                   = 0x04, 0x08, 0x18, 0x20, 0x28
	ehSize, shEntSize, symSize                                  = 64, 64, 24 // Elf64_Ehdr, Elf64_Shdr, Elf64_Sym
)

// openELF reads the ELF headers of the file f (mapped), named path, after
// checkHeaders. Errors wrap ErrNotELF or ErrUnsupportedArch and name path.
func openELF(path string, f *mappedFile) (*elf.File, error) {
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, fmt.Errorf("%s: %w", path, ErrNotELF)
	}
	if err := checkHeaders(f.data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotELF, err)
	}
	if err := checkLoads(ef, uint64(len(f.data))); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrNotELF, err)
	}
	return ef, nil
}

// checkHeaders checks the ELF file b, whole, before debug/elf reads it: a
// file of another class or byte order than amd64's and arm64's (64-bit
// little-endian) is refused (ErrUnsupportedArch); in one of theirs, the
// count of program headers must be one Linux loads (maxProgs), and the
// names of the sections, as elf.NewFile would copy them, must add up to at
// most maxSectionNames bytes. What debug/elf refuses itself (a header past
// the file's end, a name table of another type) is left to it.
func checkHeaders(b []byte) error {
	if len(b) < ehSize {
		return nil
	}
	class, data := elf.Class(b[elf.EI_CLASS]), elf.Data(b[elf.EI_DATA])
	if (class == elf.ELFCLASS32 || class == elf.ELFCLASS64) && (data == elf.ELFDATA2LSB || data == elf.ELFDATA2MSB) && (class != elf.ELFCLASS64 || data != elf.ELFDATA2LSB) {
		var bo binary.ByteOrder = binary.LittleEndian
		if data == elf.ELFDATA2MSB {
			bo = binary.BigEndian
		}
		return fmt.Errorf("%w: %v %v (amd64 and arm64 are supported)", ErrUnsupportedArch, elf.Machine(bo.Uint16(b[0x12:])), class)
	}
	if class != elf.ELFCLASS64 || data != elf.ELFDATA2LSB {
		return nil // not ELF: debug/elf says so
	}
	le := binary.LittleEndian
	if n := le.Uint16(b[ehPhnum:]); n > maxProgs {
		return fmt.Errorf("%w: %d program headers, more than Linux loads a program with (%d)", ErrNotELF, n, maxProgs)
	}
	shoff, entsize := le.Uint64(b[ehShoff:]), uint64(le.Uint16(b[ehShentsize:]))
	shnum, shstrndx := uint64(le.Uint16(b[ehShnum:])), uint64(le.Uint16(b[ehShstrndx:]))
	size := uint64(len(b))
	if shoff == 0 || entsize < shEntSize || shoff > size || size-shoff < shEntSize {
		return nil
	}
	// Extended numbering (gABI, "Sections"): the count in section 0's
	// sh_size, the name table's index in its sh_link.
	if shnum == 0 {
		shnum = le.Uint64(b[shoff+shSize:])
	}
	if shstrndx == uint64(elf.SHN_XINDEX) {
		shstrndx = uint64(le.Uint32(b[shoff+shLink:]))
	}
	if shstrndx == 0 || shnum > (size-shoff)/entsize || shstrndx >= shnum {
		return nil
	}
	sh := b[shoff+shstrndx*entsize:]
	if elf.SectionType(le.Uint32(sh[shType:])) != elf.SHT_STRTAB {
		return nil
	}
	if elf.SectionFlag(le.Uint64(sh[shFlags:]))&elf.SHF_COMPRESSED != 0 {
		return fmt.Errorf("%w: its section names are compressed", ErrNotELF)
	}
	off, n := le.Uint64(sh[shOffset:]), le.Uint64(sh[shSize:])
	if off > size || n > size-off {
		return nil
	}
	names := b[off : off+n]
	copied := 0
	for i := range shnum {
		at := uint64(le.Uint32(b[shoff+i*entsize:]))
		if at >= n {
			continue
		}
		// Each name is read no further than what is left to copy, so
		// that the check reads no more than it allows.
		name := names[at:min(n, at+uint64(maxSectionNames-copied)+1)]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		if copied += len(name); copied > maxSectionNames {
			return fmt.Errorf("%w: its %d section headers name more than %d bytes of names (debug/elf copies each): not a file a linker made", ErrNotELF, shnum, maxSectionNames)
		}
	}
	return nil
}

// symbolsOf returns the values, by name, of the symbols of the file's
// symbol tables (.symtab, then .dynsym; the first symbol of a name is
// kept) whose names, of at most maxName bytes, keep accepts; with funcs,
// defined functions only (STT_FUNC, in a section, at an address other
// than 0). The tables are read where they lie (elf.h's Elf64_Sym, 24
// bytes: st_name, st_info, st_other, st_shndx, st_value, st_size), each
// name no further than maxName bytes: debug/elf's Symbols copies every
// name of every symbol to its NUL (see above).
func symbolsOf(img *image, maxName int, funcs bool, keep func(name []byte) bool) map[string]uint64 {
	out := map[string]uint64{}
	le := binary.LittleEndian
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		for _, s := range img.ef.Sections {
			if s.Type != typ || s.Link == 0 || int(s.Link) >= len(img.ef.Sections) {
				continue
			}
			syms, strs := img.sectionData(s), img.sectionData(img.ef.Sections[s.Link])
			for i := 0; i+symSize <= len(syms); i += symSize {
				sym := syms[i : i+symSize]
				at, info, shndx, value := uint64(le.Uint32(sym)), sym[4], elf.SectionIndex(le.Uint16(sym[6:])), le.Uint64(sym[8:])
				if funcs && (elf.ST_TYPE(info) != elf.STT_FUNC || shndx == elf.SHN_UNDEF || value == 0) || at >= uint64(len(strs)) {
					continue
				}
				name := strs[at:min(uint64(len(strs)), at+uint64(maxName)+1)]
				j := bytes.IndexByte(name, 0)
				if j < 0 || j > maxName || !keep(name[:j]) {
					continue
				}
				if _, ok := out[string(name[:j])]; !ok {
					out[string(name[:j])] = value
				}
			}
		}
	}
	return out
}
