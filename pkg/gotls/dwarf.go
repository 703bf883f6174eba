package gotls

// An executable's DWARF, read within bounds. debug/dwarf decodes entries
// as it is told to, and a crafted file can tell it to do a great deal:
// elf.File.DWARF decompresses every debug section to the size its header
// claims, which zlib makes up to a thousand times the bytes it takes (a
// 7.5 MB file whose DWARF claimed 768 MB: 2.1 GB allocated, 10 s),
// dwarf.New parses an abbreviation table once for each distinct offset
// units name (tables that overlap are parsed again and again), an
// abbreviation may list any number of attributes that take no byte of
// an entry (DW_FORM_flag_present, DW_FORM_implicit_const) so that each
// one-byte entry decodes into as many fields, each reference to
// .debug_str copies its string to its NUL whatever the string's length,
// and dwarf.Data.Type and Reader.SkipChildren recurse as deep as the
// types and entries nest, where a goroutine's stack that outgrows 1 GB
// ends the program (not a panic that can be recovered). So kwatch loads
// the few sections an entry is decoded from itself (their sizes,
// uncompressed, bounded by the file's), checks the units' abbreviation
// tables (apart, a bounded count of attributes each), cuts .debug_str's
// strings at maxDWARFString bytes, reads entries in one pass counting
// the fields and string bytes they decode into against a budget
// proportional to .debug_info, and reads a struct's members and their
// types' sizes itself, without recursion.

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

const (
	// maxDWARFString bounds a string read from .debug_str and
	// .debug_line_str: longer ones are cut (a NUL written into kwatch's
	// copy every maxDWARFString bytes of a string), as no name kwatch
	// looks for is nearly as long.
	maxDWARFString = 4096
	// maxDWARFAttrs bounds the attributes of one abbreviation (a Go or C
	// compiler's have at most about twenty).
	maxDWARFAttrs = 256
	// dwarfWorkPerByte bounds the fields and string bytes decoded from
	// all entries read, as a multiple of .debug_info's size (and 1 MiB):
	// a Go program's entries decode into about one field and one string
	// byte per byte of it.
	dwarfWorkPerByte = 16
	// dwarfPerFileByte bounds the bytes of the DWARF sections loaded
	// (dwarfSections, uncompressed), as a multiple of the file's size:
	// uncompressed, they are about a quarter of a Go program's file (1.9
	// MB of a 7.5 MB test program, .debug_info two and a half times its
	// compressed size), where zlib inflates up to a thousand times.
	dwarfPerFileByte = 4
	// maxTypeHops bounds the typedefs and qualifiers followed to a
	// member's type's size.
	maxTypeHops = 16
)

// dwarfSections are the sections entries are decoded from (DWARF 2-5:
// abbreviations, entries, strings, and DWARF 5's string offsets and
// addresses); .debug_line, .debug_frame, location and range lists are
// not read.
var dwarfSections = []string{"info", "abbrev", "str", "line_str", "str_offsets", "addr"}

// errDWARFWork is dwarfReader's error when its budget is spent.
var errDWARFWork = errors.New("its entries decode into more fields and string bytes than its size allows many times over: not what a compiler writes")

// loadDWARF returns the DWARF of img's executable, nil when it has none
// (no .debug_info, or .zdebug_info): its sections read as dwarfSections
// says, their sizes (uncompressed) at most dwarfPerFileByte times the
// file's and within img's budget, its strings cut
// at maxDWARFString bytes, its units' abbreviation tables checked
// (checkAbbrevs), and the size of its .debug_info, which bounds the work
// of reading it (dwarfReader).
func loadDWARF(img *image) (*dwarf.Data, int, error) {
	secs := map[string]*elf.Section{}
	var total uint64
	for _, name := range dwarfSections {
		s := img.ef.Section(".debug_" + name)
		if s == nil {
			s = img.ef.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		secs[name] = s
		if total += s.Size; total < s.Size {
			total = 1<<64 - 1
		}
	}
	if secs["info"] == nil {
		return nil, 0, nil
	}
	limit := img.budget.left
	if img.file != nil {
		limit = min(limit, dwarfPerFileByte*uint64(len(img.file.data)))
	}
	if total > limit {
		return nil, 0, fmt.Errorf("its sections hold %d bytes (uncompressed), more than %d times the file's size", total, dwarfPerFileByte)
	}
	data := map[string][]byte{}
	for name, s := range secs {
		b := img.sectionData(s)
		if b == nil && s.Size > 0 {
			return nil, 0, fmt.Errorf("section %s cannot be read", s.Name)
		}
		if name == "str" || name == "line_str" {
			b = cutStrings(b, maxDWARFString)
		}
		data[name] = b
	}
	info := data["info"]
	if err := checkAbbrevs(info, data["abbrev"]); err != nil {
		return nil, 0, err
	}
	d, err := dwarf.New(data["abbrev"], nil, nil, info, nil, nil, nil, data["str"])
	if err != nil {
		return nil, 0, err
	}
	for _, name := range []string{"line_str", "str_offsets", "addr"} {
		if b, ok := data[name]; ok {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, 0, err
			}
		}
	}
	return d, len(info), nil
}

// cutStrings returns a copy of the string section b in which no string is
// longer than max bytes: a NUL is written after each max bytes of one.
// Strings keep their offsets.
func cutStrings(b []byte, max int) []byte {
	b = bytes.Clone(b)
	run := 0
	for i, c := range b {
		switch {
		case c == 0:
			run = 0
		case run == max:
			b[i], run = 0, 0
		default:
			run++
		}
	}
	return b
}

// checkAbbrevs checks the abbreviation tables the units of info name
// (DWARF 2-5 unit headers: unit_length, version, then debug_abbrev_offset
// and address_size, in DWARF 5 after unit_type): each is parsed once,
// they must not overlap (dwarf.New parses a table once for each offset
// named, to its end), and no abbreviation may have more than
// maxDWARFAttrs attributes. What dwarf.New refuses itself (a unit past
// the section's end) ends the check.
func checkAbbrevs(info, abbrev []byte) error {
	le := binary.LittleEndian
	offsets := map[uint64]bool{}
	for off := uint64(0); uint64(len(info))-off >= 4; {
		n, head, size := uint64(le.Uint32(info[off:])), uint64(4), uint64(4)
		if n == 0xffffffff && uint64(len(info))-off >= 12 { // 64-bit DWARF
			n, head, size = le.Uint64(info[off+4:]), 12, 8
		}
		if n >= 0xfffffff0 && head == 4 || n > uint64(len(info))-off-head || n < 2+size+1 {
			break // reserved, or past the end: dwarf.New refuses it
		}
		u := info[off+head : off+head+n]
		at := uint64(2) // version
		if le.Uint16(u) >= 5 {
			at += 2 // unit_type, address_size
		}
		if at+size > n {
			break
		}
		if size == 4 {
			offsets[uint64(le.Uint32(u[at:]))] = true
		} else {
			offsets[le.Uint64(u[at:])] = true
		}
		off += head + n
	}
	sorted := slices.Sorted(maps.Keys(offsets))
	for i, o := range sorted {
		end, err := abbrevTableEnd(abbrev, o)
		if err != nil {
			return fmt.Errorf("abbreviations at %#x: %w", o, err)
		}
		if i+1 < len(sorted) && end > sorted[i+1] {
			return fmt.Errorf("abbreviation tables at %#x and %#x overlap: not what a compiler writes", o, sorted[i+1])
		}
	}
	return nil
}

// abbrevTableEnd returns where the abbreviation table at off in abbrev
// ends (DWARF 5 §7.5.3: code, tag, children, then attribute and form
// pairs ending with two zeros, DW_FORM_implicit_const's with a value;
// a code of 0 ends the table); the section's end when it runs to it.
func abbrevTableEnd(abbrev []byte, off uint64) (uint64, error) {
	if off > uint64(len(abbrev)) {
		return off, nil
	}
	b := abbrev[off:]
	uleb := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 { // too long or cut: read it as dwarf would, to its end
			for n = 0; n < len(b) && b[n]&0x80 != 0; n++ {
			}
			n = min(n+1, len(b))
		}
		b = b[n:]
		return v
	}
	const formImplicitConst = 0x21
	for len(b) > 0 {
		if uleb() == 0 { // code
			break
		}
		uleb() // tag
		if len(b) > 0 {
			b = b[1:] // children
		}
		for attrs := 0; len(b) > 0; attrs++ {
			attr, form := uleb(), uleb()
			if form == formImplicitConst {
				uleb() // its value (signed: the same bytes)
			}
			if attr == 0 && form == 0 {
				break
			}
			if attrs == maxDWARFAttrs {
				return 0, fmt.Errorf("an abbreviation with more than %d attributes: not what a compiler writes", maxDWARFAttrs)
			}
		}
	}
	return uint64(len(abbrev) - len(b)), nil
}

// dwarfReader reads entries one at a time, counting the fields and string
// bytes they decode into against what is left (errDWARFWork when none
// is).
type dwarfReader struct {
	r    *dwarf.Reader
	left *int
}

// newDWARFReader returns a reader of d whose entries may decode into
// dwarfWorkPerByte times infoSize fields and string bytes, and 1 MiB.
func newDWARFReader(d *dwarf.Data, infoSize int) dwarfReader {
	left := dwarfWorkPerByte*infoSize + 1<<20
	return dwarfReader{r: d.Reader(), left: &left}
}

// reader returns another reader of d sharing r's budget.
func (r dwarfReader) reader(d *dwarf.Data) dwarfReader {
	return dwarfReader{r: d.Reader(), left: r.left}
}

// next returns the next entry (nil at the end).
func (r dwarfReader) next() (*dwarf.Entry, error) {
	if *r.left <= 0 {
		return nil, errDWARFWork
	}
	e, err := r.r.Next()
	if err != nil || e == nil {
		return e, err
	}
	*r.left -= 1 + len(e.Field)
	for _, f := range e.Field {
		if s, ok := f.Val.(string); ok {
			*r.left -= len(s)
		}
	}
	return e, nil
}

// at returns the entry at off.
func (r dwarfReader) at(off dwarf.Offset) (*dwarf.Entry, error) {
	r.r.Seek(off)
	e, err := r.next()
	if err == nil && e == nil {
		err = fmt.Errorf("no entry at %#x", off)
	}
	return e, err
}

// isUnit reports whether tag is that of a unit's first entry.
func isUnit(tag dwarf.Tag) bool {
	return tag == dwarf.TagCompileUnit || tag == dwarf.TagPartialUnit || tag == dwarf.TagTypeUnit || tag == dwarf.TagSkeletonUnit
}

// readDWARF finds the struct types of structNames in d (missing ones are
// missing from the map) and the closures of ekmFromMasterSecret
// (isEKMClosure), among the children of its units, as Go's compiler
// places both, reading each entry once, in order, keeping count of how
// deep it is (no recursion); then each struct's members.
func readDWARF(d *dwarf.Data, infoSize int) (dwarfStructs, []dwarfClosure, error) {
	want := map[string]bool{}
	for _, n := range structNames {
		want[n] = true
	}
	at := map[string]dwarf.Offset{}
	var closures []dwarfClosure
	var clo *dwarfClosure // the closure whose variables are being read
	r := newDWARFReader(d, infoSize)
	depth := 0
	for {
		e, err := r.next()
		if err != nil {
			return nil, nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 { // the end of a list of children
			depth = max(depth-1, 0)
			if clo != nil && depth < 2 {
				closures = append(closures, *clo)
				clo = nil
			}
			continue
		}
		if isUnit(e.Tag) {
			depth = 0
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		switch {
		case depth == 1 && e.Tag == dwarf.TagStructType && want[name]:
			if _, ok := at[name]; !ok {
				at[name] = e.Offset
			}
		case depth == 1 && e.Tag == dwarf.TagSubprogram && e.Children && isEKMClosure(name):
			clo = &dwarfClosure{name: name}
			clo.entry, _ = e.Val(dwarf.AttrLowpc).(uint64)
		case depth == 2 && clo != nil && e.Tag == dwarf.TagVariable:
			clo.add(e)
		}
		if e.Children {
			depth++
		}
	}
	if clo != nil {
		closures = append(closures, *clo)
	}
	out := dwarfStructs{}
	for name, off := range at {
		st, err := readStruct(r.reader(d), off)
		if err != nil {
			return nil, nil, fmt.Errorf("type %s: %w", name, err)
		}
		out[name] = st
	}
	return out, closures, nil
}

// dwarfStruct is a struct type as DWARF gives it: its size and its
// members' offsets and sizes, in bytes.
type dwarfStruct struct {
	size   int64
	fields map[string]dwarfField
}

type dwarfField struct{ off, size int64 }

// readStruct reads the struct type at off: its byte size, and its members
// (direct children: DW_TAG_member, at most maxFields), each with its
// DW_AT_data_member_location and its type's size (typeSize).
func readStruct(r dwarfReader, off dwarf.Offset) (dwarfStruct, error) {
	e, err := r.at(off)
	if err != nil {
		return dwarfStruct{}, err
	}
	size, ok := e.Val(dwarf.AttrByteSize).(int64)
	if !ok || size < 0 {
		return dwarfStruct{}, errors.New("no byte size")
	}
	st := dwarfStruct{size: size, fields: map[string]dwarfField{}}
	type member struct {
		name string
		off  int64
		typ  dwarf.Offset
	}
	var members []member
	for depth := 1; e.Children && depth > 0; {
		m, err := r.next()
		if err != nil {
			return dwarfStruct{}, err
		}
		switch {
		case m == nil:
			depth = 0
		case m.Tag == 0:
			depth--
		case depth == 1 && m.Tag == dwarf.TagMember:
			if len(members) == maxFields {
				return dwarfStruct{}, fmt.Errorf("more than %d members", maxFields)
			}
			name, _ := m.Val(dwarf.AttrName).(string)
			typ, _ := m.Val(dwarf.AttrType).(dwarf.Offset)
			members = append(members, member{name, memberOffset(m.Val(dwarf.AttrDataMemberLoc)), typ})
		}
		if m != nil && m.Tag != 0 && m.Children {
			depth++
		}
	}
	for _, m := range members {
		size, err := typeSize(r, m.typ)
		if m.off < 0 || err != nil {
			continue // no offset or size: the field has none (field says so)
		}
		if _, ok := st.fields[m.name]; !ok {
			st.fields[m.name] = dwarfField{off: m.off, size: size}
		}
	}
	return st, nil
}

// memberOffset returns a member's offset from its DW_AT_data_member_location:
// a constant, or (DWARF 2) an expression DW_OP_plus_uconst N; -1 for
// anything else.
func memberOffset(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		if int64(x) >= 0 {
			return int64(x)
		}
	case []byte:
		const opPlusUconst = 0x23
		if len(x) > 1 && x[0] == opPlusUconst {
			if n, w := binary.Uvarint(x[1:]); w == len(x)-1 && int64(n) >= 0 {
				return int64(n)
			}
		}
	}
	return -1
}

// typeSize returns the byte size of the type at off: its DW_AT_byte_size,
// or a pointer's the unit's address size, following typedefs and
// qualifiers to the type they name (at most maxTypeHops).
func typeSize(r dwarfReader, off dwarf.Offset) (int64, error) {
	for range maxTypeHops {
		e, err := r.at(off)
		if err != nil {
			return 0, err
		}
		if n, ok := e.Val(dwarf.AttrByteSize).(int64); ok && n >= 0 {
			return n, nil
		}
		switch e.Tag {
		case dwarf.TagPointerType, dwarf.TagReferenceType:
			return int64(r.r.AddressSize()), nil
		case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType:
			next, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
			if !ok {
				return 0, errors.New("a typedef of nothing")
			}
			off = next
		default:
			return 0, fmt.Errorf("a %v with no byte size", e.Tag)
		}
	}
	return 0, fmt.Errorf("more than %d typedefs to a type", maxTypeHops)
}

// dwarfStructs is structs from an executable's DWARF.
type dwarfStructs map[string]dwarfStruct

func (d dwarfStructs) field(typ, name string) (uint64, uint64, error) {
	st, ok := d[typ]
	if !ok {
		return 0, 0, fmt.Errorf("no struct %s in the DWARF", typ)
	}
	f, ok := st.fields[name]
	if !ok {
		return 0, 0, fmt.Errorf("%s has no field %s with an offset and size in the DWARF", typ, name)
	}
	return uint64(f.off), uint64(f.size), nil
}

func (d dwarfStructs) size(typ string) (uint64, error) {
	st, ok := d[typ]
	if !ok {
		return 0, fmt.Errorf("no struct %s in the DWARF", typ)
	}
	return uint64(st.size), nil
}

// dwarfError says what was wrong with an executable's DWARF, in one line.
func dwarfError(err error) error {
	return fmt.Errorf("its DWARF: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
}
