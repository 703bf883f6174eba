package gotls

import (
	"encoding/binary"
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
