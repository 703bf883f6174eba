package gotls

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The tests of this file hold kwatch's tables of Go releases (moduleWords,
// ekmClosures, the internal/abi offsets) against each release's own
// sources (the toolchain the go command fetches holds its GOROOT/src),
// against the DWARF of programs each release built (what its compiler
// laid out), and against those programs as they run: for each release
// from go1.21 to go1.27, testdata/tlsconns built with DWARF, stripped,
// stripped PIE, and each stripped build also with no section headers at
// all, for amd64; with DWARF and stripped for arm64 (not run).

// gorootOf returns the GOROOT of release's toolchain (kwatch's own: the
// local one), asked of the go command once.
var gorootOf = func() func(t *testing.T, release string) string {
	var roots sync.Map
	return func(t *testing.T, release string) string {
		t.Helper()
		tc := "local"
		if release != ownRelease {
			var ok bool
			if tc, ok = toolchains[release]; !ok {
				t.Fatalf("no toolchain for %s in the tests' toolchains", release)
			}
		}
		if r, ok := roots.Load(tc); ok {
			return r.(string)
		}
		cmd := exec.Command("go", "env", "GOROOT")
		cmd.Dir = buildDir // outside kwatch's module, whose go.mod names its release
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+tc, "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GOTOOLCHAIN=%s go env GOROOT: %v\n%s", tc, err, out)
		}
		root := strings.TrimSpace(string(out))
		roots.Store(tc, root)
		return root
	}
}()

// goPackage is a package of a release's GOROOT/src as linux/amd64 builds
// it: its struct types, its constant declarations and its functions.
type goPackage struct {
	structs map[string]*ast.StructType
	named   map[string]ast.Expr // type NAME EXPR, for every type declaration
	blocks  [][]*ast.ValueSpec  // const blocks, their specs in source order
	funcs   map[string]*ast.FuncDecl
}

// parsePackage parses the files of GOROOT/src/dir that linux/amd64 builds.
func parsePackage(t *testing.T, root, dir string) *goPackage {
	t.Helper()
	ctx := build.Default
	ctx.GOROOT, ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = root, "linux", "amd64", false
	full := filepath.Join(root, "src", dir)
	entries, err := os.ReadDir(full)
	if err != nil {
		t.Fatal(err)
	}
	p := &goPackage{structs: map[string]*ast.StructType{}, named: map[string]ast.Expr{}, funcs: map[string]*ast.FuncDecl{}}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(full, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(full, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				var block []*ast.ValueSpec
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						p.named[s.Name.Name] = s.Type
						if st, ok := s.Type.(*ast.StructType); ok {
							p.structs[s.Name.Name] = st
						}
					case *ast.ValueSpec:
						if d.Tok == token.CONST {
							block = append(block, s)
						}
					}
				}
				if len(block) > 0 {
					p.blocks = append(p.blocks, block)
				}
			}
		}
	}
	return p
}

// field is one field of a parsed struct: its name (an embedded field's is
// its type's), its type as written.
type field struct {
	name string
	typ  ast.Expr
}

func (p *goPackage) fields(t *testing.T, name string) []field {
	t.Helper()
	st, ok := p.structs[name]
	if !ok {
		t.Fatalf("no struct %s", name)
	}
	var out []field
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			n := types.ExprString(f.Type)
			out = append(out, field{n[strings.LastIndex(n, ".")+1:], f.Type})
		}
		for _, n := range f.Names {
			out = append(out, field{n.Name, f.Type})
		}
	}
	return out
}

// fieldTypes returns the types, as written, of a struct's fields by name.
func (p *goPackage) fieldTypes(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range p.fields(t, name) {
		out[f.name] = types.ExprString(f.typ)
	}
	return out
}

// sizeOf returns the size and alignment, in bytes, that the gc compiler
// gives a type written as e in package p on a 64-bit target (the Go
// specification's sizes, as go/types.SizesFor("gc", "amd64") gives them),
// for the types the structs read here are made of.
func (p *goPackage) sizeOf(e ast.Expr) (size, align int64, err error) {
	switch e := e.(type) {
	case *ast.StarExpr, *ast.FuncType, *ast.MapType, *ast.ChanType:
		return 8, 8, nil
	case *ast.InterfaceType:
		return 16, 8, nil
	case *ast.ArrayType:
		if e.Len == nil {
			return 24, 8, nil
		}
		lit, ok := e.Len.(*ast.BasicLit)
		if !ok {
			return 0, 0, fmt.Errorf("array length %s", types.ExprString(e.Len))
		}
		n, err := strconv.ParseInt(lit.Value, 0, 64)
		if err != nil {
			return 0, 0, err
		}
		s, a, err := p.sizeOf(e.Elt)
		return n * s, a, err
	case *ast.StructType:
		var off, maxAlign int64 = 0, 1
		for _, f := range e.Fields.List {
			s, a, err := p.sizeOf(f.Type)
			if err != nil {
				return 0, 0, err
			}
			for range max(1, len(f.Names)) {
				off = (off+a-1)/a*a + s
				maxAlign = max(maxAlign, a)
			}
		}
		return (off + maxAlign - 1) / maxAlign * maxAlign, maxAlign, nil
	case *ast.SelectorExpr:
		if types.ExprString(e) == "sys.NotInHeap" { // runtime/internal/sys, internal/runtime/sys: struct{ _ nih }, nih struct{}
			return 0, 1, nil
		}
	case *ast.Ident:
		if s, ok := basicSizes[e.Name]; ok {
			return s, min(s, 8), nil
		}
		if u, ok := p.named[e.Name]; ok {
			return p.sizeOf(u)
		}
	}
	return 0, 0, fmt.Errorf("no size known for %s", types.ExprString(e))
}

var basicSizes = map[string]int64{
	"bool": 1, "uint8": 1, "int8": 1, "byte": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4, "float32": 4,
	"uint64": 8, "int64": 8, "uint": 8, "int": 8, "uintptr": 8, "float64": 8, "string": 16,
}

// offsets returns the byte offset of each field of struct name, up to the
// first whose size is not known.
func (p *goPackage) offsets(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var off int64
	for _, f := range p.fields(t, name) {
		s, a, err := p.sizeOf(f.typ)
		if err != nil {
			break
		}
		off = (off + a - 1) / a * a
		out[f.name] = off
		off += s
	}
	return out
}

// TestModuleWordsSource: for each release, the word index of each field of
// runtime.moduledata that kwatch reads, computed from the field types
// declared in that release's runtime/symtab.go, is the one kwatch's tables
// say; the internal/abi descriptors have the shapes kwatch reads; the
// crypto/tls, net and internal/poll fields a layout is made of are there,
// of the types makeOffsets expects; and the closure of crypto/tls's
// ekmFromMasterSecret, laid out as cmd/compile does (its captured
// variables in the order its body first uses them, each aligned: the
// ClosureStructIter of cmd/compile/internal/typecheck/func.go), keeps the
// master secret and randoms where ekmClosures says.
func TestModuleWordsSource(t *testing.T) {
	for _, release := range testReleases() {
		t.Run(release, func(t *testing.T) {
			root := gorootOf(t, release)
			rt := parsePackage(t, root, "runtime")
			words := map[string]int{}
			for name, off := range rt.offsets(t, "moduledata") {
				words[name] = int(off / 8)
			}
			w := moduleWords[release]
			want := map[string]int{"pcHeader": moduledataPCHeader, "funcnametab": moduledataFuncnametab, "minpc": moduledataMinPC,
				"maxpc": moduledataMaxPC, "text": moduledataText, "etext": moduledataEText, "types": w.types, "etypes": w.etypes}
			if w.itablinks != 0 {
				want["itablinks"] = w.itablinks
			} else {
				want["itaboffset"], want["itabsize"] = w.itabOffset, w.itabBytes
			}
			for name, i := range want {
				if got, ok := words[name]; !ok || got != i {
					t.Errorf("runtime/symtab.go: moduledata.%s is word %d (found %v), kwatch reads word %d", name, got, ok, i)
				}
			}
			if _, ok := words["itablinks"]; ok != (w.itablinks != 0) {
				t.Errorf("runtime/symtab.go: moduledata has itablinks %v, kwatch's table %d", ok, w.itablinks)
			}

			abi := parsePackage(t, root, "internal/abi")
			for _, c := range []struct {
				typ, field string
				off        int64
			}{
				{"Type", "TFlag", abiTypeTFlag}, {"Type", "Kind_", abiTypeKind}, {"Type", "Str", abiTypeStr},
				{"PtrType", "Elem", abiPtrElem}, {"StructType", "PkgPath", abiStructPkg}, {"StructType", "Fields", abiStructField},
				{"InterfaceType", "Methods", abiIfaceMeths}, {"StructField", "Typ", 8}, {"StructField", "Offset", 16},
			} {
				if got, ok := abi.offsets(t, c.typ)[c.field]; !ok || got != c.off {
					t.Errorf("internal/abi: %s.%s at %d (%v), kwatch reads %d", c.typ, c.field, got, ok, c.off)
				}
			}
			for typ, size := range map[string]int64{"Type": abiTypeSize, "StructField": abiFieldSize, "Name": 8} {
				if got, _, err := abi.sizeOf(&ast.Ident{Name: typ}); err != nil || got != size {
					t.Errorf("internal/abi: %s is %d bytes (%v), kwatch reads %d", typ, got, err, size)
				}
			}
			if k := abiKinds(t, abi); k["Pointer"] != kindPointer || k["Struct"] != kindStruct {
				t.Errorf("internal/abi: Pointer %d, Struct %d; kwatch reads %d, %d", k["Pointer"], k["Struct"], kindPointer, kindStruct)
			}
			itab, itabPkg := "itab", rt // runtime/runtime2.go up to go1.22
			if _, ok := abi.structs["ITab"]; ok {
				itab, itabPkg = "ITab", abi
			}
			if o := itabPkg.offsets(t, itab); len(o) < 4 || o[itabPkg.fields(t, itab)[1].name] != 8 || o[itabPkg.fields(t, itab)[len(o)-1].name] != abiItabFun {
				t.Errorf("%s: %v; kwatch reads the type at 8 and Fun at %d", itab, o, abiItabFun)
			}

			tls := parsePackage(t, root, "crypto/tls")
			checkFields(t, "crypto/tls.Conn", tls.fieldTypes(t, "Conn"), map[string]string{
				"conn": "net.Conn", "isClient": "bool", "isHandshakeComplete": "atomic.Bool", "vers": "uint16",
				"haveVers": "bool", "cipherSuite": "uint16", "in": "halfConn", "out": "halfConn",
				"ekm": "func(label string, context []byte, length int) ([]byte, error)",
			})
			checkFields(t, "crypto/tls.halfConn", tls.fieldTypes(t, "halfConn"), map[string]string{
				"version": "uint16", "seq": "[8]byte", "trafficSecret": "[]byte",
			})
			net := parsePackage(t, root, "net")
			checkFields(t, "net.TCPConn", net.fieldTypes(t, "TCPConn"), map[string]string{"conn": "conn"})
			checkFields(t, "net.conn", net.fieldTypes(t, "conn"), map[string]string{"fd": "*netFD"})
			checkFields(t, "net.netFD", net.fieldTypes(t, "netFD"), map[string]string{"pfd": "poll.FD", "family": "int", "sotype": "int"})
			poll := parsePackage(t, root, "internal/poll")
			checkFields(t, "internal/poll.FD", poll.fieldTypes(t, "FD"), map[string]string{"Sysfd": "int"})
			atomic := parsePackage(t, root, "sync/atomic")
			checkFields(t, "sync/atomic.Bool", atomic.fieldTypes(t, "Bool"), map[string]string{"v": "uint32"})

			if got, err := sourceClosure(tls); err != nil || got != ekmClosures[release] {
				t.Errorf("crypto/tls's ekmFromMasterSecret closure, from its source: %+v (%v); ekmClosures: %+v", got, err, ekmClosures[release])
			}
		})
	}
}

// checkFields checks that a struct has the fields of want, of those types.
func checkFields(t *testing.T, name string, got, want map[string]string) {
	t.Helper()
	for f, typ := range want {
		if got[f] != typ {
			t.Errorf("%s.%s is %q, kwatch reads it as %s", name, f, got[f], typ)
		}
	}
}

// abiKinds returns the values of internal/abi's Kind constants (the const
// block that starts with Invalid Kind = iota).
func abiKinds(t *testing.T, p *goPackage) map[string]int {
	t.Helper()
	for _, block := range p.blocks {
		if len(block) == 0 || len(block[0].Names) == 0 || block[0].Names[0].Name != "Invalid" {
			continue
		}
		out := map[string]int{}
		for i, s := range block {
			for _, n := range s.Names {
				out[n.Name] = i
			}
		}
		return out
	}
	t.Fatal("internal/abi: no Kind constants (Invalid Kind = iota)")
	return nil
}

// sourceClosure lays out the closure ekmFromMasterSecret returns, from
// crypto/tls's source: its body's first uses of the function's
// parameters, in source order, each captured by value (none is assigned
// to), after the 8-byte function pointer, aligned to its type.
func sourceClosure(tls *goPackage) (closureOffsets, error) {
	fn := tls.funcs["ekmFromMasterSecret"]
	if fn == nil {
		return closureOffsets{}, errors.New("no func ekmFromMasterSecret")
	}
	params := map[string]ast.Expr{}
	for _, f := range fn.Type.Params.List {
		for _, n := range f.Names {
			params[n.Name] = f.Type
		}
	}
	var lit *ast.FuncLit
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if l, ok := n.(*ast.FuncLit); ok && lit == nil {
			lit = l
			return false
		}
		return true
	})
	if lit == nil {
		return closureOffsets{}, errors.New("ekmFromMasterSecret returns no closure")
	}
	var order []string
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if _, ok := params[n.Name]; ok && !slices.Contains(order, n.Name) {
				order = append(order, n.Name)
			}
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && params[id.Name] != nil {
					order = append(order, "assigned: "+id.Name) // captured by reference: not laid out here
				}
			}
		}
		return true
	})
	off := int64(8)
	at := map[string]int64{}
	for _, name := range order {
		typ, ok := params[name]
		if !ok {
			return closureOffsets{}, fmt.Errorf("the closure %s", name)
		}
		s, a, err := tls.sizeOf(typ)
		if err != nil {
			return closureOffsets{}, err
		}
		off = (off + a - 1) / a * a
		at[name] = off
		off += s
	}
	return closureOffsets{master: uint64(at["masterSecret"]), client: uint64(at["clientRandom"]), server: uint64(at["serverRandom"])}, nil
}

// dwarfOf returns the struct types named names from the DWARF of the
// executable at path, and the ekmFromMasterSecret closures it describes.
func dwarfOf(t *testing.T, path string, names ...string) (map[string]*dwarf.StructType, []dwarfClosure) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dwarf.StructType{}
	var closures []dwarfClosure
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			break
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		switch {
		case e.Tag == dwarf.TagStructType && slices.Contains(names, name) && out[name] == nil:
			typ, err := d.Type(e.Offset)
			if err != nil {
				t.Fatal(err)
			}
			if st, ok := typ.(*dwarf.StructType); ok {
				out[name] = st
			}
		case e.Tag == dwarf.TagSubprogram && isEKMClosure(name) && e.Children:
			c := dwarfClosure{name: name}
			c.entry, _ = e.Val(dwarf.AttrLowpc).(uint64)
			for {
				v, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if v == nil || v.Tag == 0 {
					break
				}
				if v.Children {
					r.SkipChildren()
				}
				if v.Tag == dwarf.TagVariable {
					c.add(v)
				}
			}
			closures = append(closures, c)
			continue
		}
		if e.Children && e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
		}
	}
	return out, closures
}

// memberAt returns the offset of member name of st, -1 if none.
func memberAt(st *dwarf.StructType, name string) int64 {
	if st == nil {
		return -1
	}
	for _, f := range st.Field {
		if f.Name == name {
			return f.ByteOffset
		}
	}
	return -1
}

// TestABIShapesDWARF: for each release, amd64 and arm64, the DWARF of a
// program it built lays out runtime.moduledata and the internal/abi
// descriptors as kwatch reads them (what the compiler and linker of that
// release made, where TestModuleWordsSource reads what its source
// declares), and its ekmFromMasterSecret closures' captured variables are
// where ekmClosures says (DW_AT_go_closure_offset: go1.23 on; go1.21 and
// go1.22 say none, TestEKMClosures measures theirs).
func TestABIShapesDWARF(t *testing.T) {
	for _, release := range testReleases() {
		for _, kind := range []string{kindDWARF, kindARM64} {
			t.Run(release+kind, func(t *testing.T) {
				s, closures := dwarfOf(t, testProgram(t, releaseBuild(release, kind)), "runtime.moduledata", "internal/abi.Type",
					"internal/abi.PtrType", "internal/abi.StructType", "internal/abi.StructField", "internal/abi.InterfaceType",
					"runtime.itab", "internal/abi.ITab")
				w := moduleWords[release]
				md := s["runtime.moduledata"]
				for name, word := range map[string]int{"pcHeader": moduledataPCHeader, "funcnametab": moduledataFuncnametab,
					"minpc": moduledataMinPC, "maxpc": moduledataMaxPC, "text": moduledataText, "etext": moduledataEText,
					"types": w.types, "etypes": w.etypes} {
					if got := memberAt(md, name); got != int64(8*word) {
						t.Errorf("runtime.moduledata.%s at %d, kwatch reads word %d", name, got, word)
					}
				}
				if w.itablinks != 0 {
					if got := memberAt(md, "itablinks"); got != int64(8*w.itablinks) {
						t.Errorf("runtime.moduledata.itablinks at %d, kwatch reads word %d", got, w.itablinks)
					}
				} else if memberAt(md, "itaboffset") != int64(8*w.itabOffset) || memberAt(md, "itabsize") != int64(8*w.itabBytes) {
					t.Errorf("runtime.moduledata.itaboffset, itabsize at %d, %d; kwatch reads words %d, %d", memberAt(md, "itaboffset"), memberAt(md, "itabsize"), w.itabOffset, w.itabBytes)
				}
				for _, c := range []struct {
					typ, member string
					off         int64
				}{
					{"internal/abi.Type", "TFlag", abiTypeTFlag}, {"internal/abi.Type", "Kind_", abiTypeKind},
					{"internal/abi.Type", "Str", abiTypeStr}, {"internal/abi.PtrType", "Elem", abiPtrElem},
					{"internal/abi.StructType", "PkgPath", abiStructPkg}, {"internal/abi.StructType", "Fields", abiStructField},
					{"internal/abi.StructField", "Name", 0}, {"internal/abi.StructField", "Typ", 8}, {"internal/abi.StructField", "Offset", 16},
					{"internal/abi.InterfaceType", "Methods", abiIfaceMeths},
				} {
					if got := memberAt(s[c.typ], c.member); got != c.off {
						t.Errorf("%s.%s at %d, kwatch reads %d", c.typ, c.member, got, c.off)
					}
				}
				if st := s["internal/abi.Type"]; st == nil || st.ByteSize != abiTypeSize {
					t.Errorf("internal/abi.Type: %v, kwatch reads %d bytes", st, abiTypeSize)
				}
				if st := s["internal/abi.StructField"]; st == nil || st.ByteSize != abiFieldSize {
					t.Errorf("internal/abi.StructField: %v, kwatch reads %d bytes", st, abiFieldSize)
				}
				itab := s["internal/abi.ITab"]
				typ, fun := memberAt(itab, "Type"), memberAt(itab, "Fun")
				if itab == nil {
					itab = s["runtime.itab"]
					typ, fun = memberAt(itab, "_type"), memberAt(itab, "fun")
				}
				if typ != 8 || fun != abiItabFun {
					t.Errorf("the itab's type at %d and fun at %d, kwatch reads 8 and %d", typ, fun, abiItabFun)
				}
				if len(closures) == 0 {
					t.Fatal("no ekmFromMasterSecret closure in the DWARF")
				}
				for _, c := range closures {
					switch {
					case minorOf(release) < 23 && c.has != 0:
						t.Errorf("%s: closure offsets %+v in the DWARF of %s", c.name, c.off, release)
					case minorOf(release) >= 23 && (c.has != 3 || c.off != ekmClosures[release]):
						t.Errorf("%s: closure offsets %+v (%d) in the DWARF, ekmClosures %+v", c.name, c.off, c.has, ekmClosures[release])
					}
				}
			})
		}
	}
}

// TestReleaseLayouts: for each release, the layout a stripped program's
// type descriptors give equals the one its DWARF gives (amd64: stripped,
// stripped PIE, each also with no section headers at all; arm64:
// stripped); each finds *net.TCPConn's type descriptor and the TLS 1.2
// closures, at the addresses of the build with DWARF where the two are
// linked alike; and Find finds writeKeyLog in each at the same place.
func TestReleaseLayouts(t *testing.T) {
	own, err := ownStructs()
	if err != nil {
		t.Fatal(err)
	}
	ownOffsets, err := makeOffsets(own)
	if err != nil {
		t.Fatal(err)
	}
	differs := 0
	for _, release := range testReleases() {
		t.Run(release, func(t *testing.T) {
			for _, arch := range []struct{ dwarf, stripped string }{{kindDWARF, kindStripped}, {kindARM64, kindARM64Stripped}} {
				dwPath := testProgram(t, releaseBuild(release, arch.dwarf))
				dw, err := LayoutFor(dwPath)
				if err != nil {
					t.Fatal(err)
				}
				if dw.Source != FromDWARF || goMinor(dw.GoVersion) != release || dw.tls12 != "" || dw.closure != ekmClosures[release] {
					t.Fatalf("%s: layout from %v of %s, TLS 1.2 %q %+v", filepath.Base(dwPath), dw.Source, dw.GoVersion, dw.tls12, dw.closure)
				}
				if dw.off != ownOffsets {
					differs++
				}
				want, err := Find(dwPath)
				if err != nil {
					t.Fatal(err)
				}
				kinds := []string{arch.stripped}
				if arch.dwarf == kindDWARF {
					kinds = append(kinds, kindPIEStripped)
				}
				for _, kind := range kinds {
					path := testProgram(t, releaseBuild(release, kind))
					for _, p := range []string{path, noSections(t, path)} {
						name := filepath.Base(path)
						if p != path {
							name += " with no section headers"
						}
						twin := kind != kindPIEStripped // linked at the same addresses as the build with DWARF
						l, err := LayoutFor(p)
						if err != nil {
							t.Errorf("%s: %v", name, err)
							continue
						}
						if l.Source != FromTypes || l.GoVersion != dw.GoVersion || l.off != dw.off {
							t.Errorf("%s: layout from %v of %s:\n%+v; DWARF's:\n%+v", name, l.Source, l.GoVersion, l.off, dw.off)
						}
						if l.TCPConnType == 0 || twin && l.TCPConnType != dw.TCPConnType {
							t.Errorf("%s: *net.TCPConn's type at %#x, %#x in the build with DWARF", name, l.TCPConnType, dw.TCPConnType)
						}
						if l.tls12 != "" || l.closure != ekmClosures[release] || len(l.ekmFuncs) == 0 || twin && !slices.Equal(l.ekmFuncs, sorted(dw.ekmFuncs)) {
							t.Errorf("%s: TLS 1.2 %q, closure %+v at %x; DWARF's at %x", name, l.tls12, l.closure, l.ekmFuncs, dw.ekmFuncs)
						}
						loc, err := Find(p)
						if err != nil {
							t.Errorf("%s: %v", name, err)
							continue
						}
						if loc.Method != ByPclntab || loc.GoVersion != want.GoVersion || loc.Arch != want.Arch || twin && (loc.Address != want.Address || loc.Offset != want.Offset) {
							t.Errorf("%s: Find %+v; in the build with DWARF %+v", name, loc, want)
						}
					}
				}
			}
		})
	}
	if differs == 0 {
		t.Error("every release's layout is kwatch's own: the test proves nothing")
	}
}

func sorted(s []uint64) []uint64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestEKMClosures: for each release, a running program it built (stripped)
// that made a TLS 1.2 connection with itself: the closure each end's
// Conn.ekm points to is read from its memory and the master secret, client
// random and server random are looked for in it, as ownEKMClosure does in
// kwatch's own process (the key log's CLIENT_RANDOM line says which is
// which): they are where ekmClosures says. For go1.21 and go1.22, whose
// DWARF does not say, this is the proof of the table; for the others it
// agrees with their DWARF (TestABIShapesDWARF).
func TestEKMClosures(t *testing.T) {
	for _, release := range testReleases() {
		t.Run(release, func(t *testing.T) {
			path := testProgram(t, releaseBuild(release, kindStripped))
			l, err := LayoutFor(path)
			if err != nil {
				t.Fatal(err)
			}
			pr := startConnsPeer(t, path)
			var c *peerConn
			for i := range pr.conns {
				if pr.conns[i].name == "tls12" {
					c = &pr.conns[i]
				}
			}
			if c == nil {
				t.Fatal("no TLS 1.2 connection")
			}
			random, master := keyLogRandom(t, readFile(t, filepath.Join(pr.dir, "tls12.keylog")))
			m := procMemory{pid: pr.pid()}
			for _, conn := range []uint64{c.client, c.server} {
				off, _, err := findClosure(m, conn+l.off.ekm, random, master, func(pc uint64) (string, bool) {
					return "ekmFromMasterSecret.func1", slices.Contains(l.ekmFuncs, pc)
				})
				if err != nil {
					t.Fatal(err)
				}
				if off != ekmClosures[release] {
					t.Errorf("the Conn at %#x: its closure holds the master secret and randoms at %+v; ekmClosures says %+v", conn, off, ekmClosures[release])
				}
			}
		})
	}
	own, err := ownEKMClosure()
	if err != nil {
		t.Fatal(err)
	}
	if own.off != ekmClosures[ownRelease] {
		t.Errorf("kwatch's own closure: %+v; ekmClosures says %+v", own.off, ekmClosures[ownRelease])
	}
}

// TestReleaseConnState: for each release, the state of a running
// program's connections read from its memory (both ends of a TLS 1.3 and
// of a TLS 1.2 connection over TCP, each end's crypto/tls.Conn address as
// the program printed it) is that of its key logs: traffic secrets,
// master secret and randoms (which give the keying material the
// connection exported), sequence numbers, addresses; the connection over a
// Unix socket is refused as not TCP. The program runs stripped, and as a
// stripped PIE with no section headers (its layout found through the
// relocations its dynamic segment names); from go1.24 on also in FIPS
// 140-3 mode (GODEBUG=fips140=on: TLS 1.2 with the extended master
// secret, AES-GCM suites), and for kwatch's own release also built with
// BoringCrypto (GOEXPERIMENT=boringcrypto, cgo).
func TestReleaseConnState(t *testing.T) {
	type run struct {
		name, build string
		noSections  bool
		env         []string
	}
	var runs []run
	for _, release := range testReleases() {
		runs = append(runs, run{release + kindStripped, releaseBuild(release, kindStripped), false, nil},
			run{release + kindPIEStripped + "-no-sections", releaseBuild(release, kindPIEStripped), true, nil})
		if minorOf(release) >= 24 {
			runs = append(runs, run{release + kindStripped + "-fips140", releaseBuild(release, kindStripped), false, []string{"GODEBUG=fips140=on"}})
		}
	}
	runs = append(runs, run{ownRelease + "-boringcrypto-stripped", "conns-boring-stripped", false, nil})
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			path := testProgram(t, r.build)
			if r.noSections {
				path = noSections(t, path)
			}
			layout, err := LayoutFor(path)
			if err != nil {
				t.Fatal(err)
			}
			pr := startConnsPeer(t, path, r.env...)
			pr.rw(t, 3)
			keylog13 := readFile(t, filepath.Join(pr.dir, "tls13.keylog"))
			clientSecret := keyLogSecret(t, keylog13, "CLIENT_TRAFFIC_SECRET_0")
			serverSecret := keyLogSecret(t, keylog13, "SERVER_TRAFFIC_SECRET_0")
			random, master := keyLogRandom(t, readFile(t, filepath.Join(pr.dir, "tls12.keylog")))
			read, notTCP := 0, 0
			for _, c := range pr.conns {
				for _, conn := range []uint64{c.client, c.server} {
					s, err := ReadConnState(pr.pid(), conn, layout)
					switch {
					case c.name == "unix":
						if !errors.Is(err, ErrNotTCP) {
							t.Errorf("the connection over a Unix socket: %v", err)
						}
						notTCP++
						continue
					case err != nil:
						t.Errorf("%s: %v", c.name, err)
						continue
					}
					read++
					if c.version == "0303" {
						ekm, err := hex.DecodeString(c.ekm)
						if err != nil {
							t.Fatal(err)
						}
						checkState(t, s, &c, nil, nil, 3)
						checkTLS12(t, s, random, master, ekm)
					} else {
						checkState(t, s, &c, clientSecret, serverSecret, 3)
					}
				}
			}
			if read != 4 || notTCP != 2 {
				t.Errorf("%d states read, %d refused as not TCP; want 4 (two ends of two connections) and 2", read, notTCP)
			}
		})
	}
}

// TestNoSectionsVersion: a stripped PIE with no section headers, whose
// build information debug/buildinfo does not find (it looks in the first
// writable segment), still says which release built it.
func TestNoSectionsVersion(t *testing.T) {
	path := noSections(t, testProgram(t, releaseBuild("go1.22", kindPIEStripped)))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := goVersion(f, newImage(ef, newBudget(f))); got != toolchains["go1.22"] {
		t.Errorf("go version %q, want %s", got, toolchains["go1.22"])
	}
	// Its module data's words are in the file: the relocations are
	// found through PT_DYNAMIC all the same.
	img := newImage(ef, newBudget(f))
	if n := len(img.relocs()); n == 0 {
		t.Error("no R_X86_64_RELATIVE relocation found through PT_DYNAMIC")
	}
}

// TestEKMRefused: where kwatch's table does not know a release's closure
// (its entry taken out here), a stripped program of that release, not
// kwatch's own, still gets its layout, with TLS 1.2 refused and the reason
// said; with DWARF that gives the closure offsets (go1.23 on) TLS 1.2 is
// read; with DWARF that does not (go1.22), refused.
func TestEKMRefused(t *testing.T) {
	for _, c := range []struct {
		release, kind string
		refused       bool
	}{
		{"go1.27", kindStripped, true},
		{"go1.27", kindDWARF, false},
		{"go1.22", kindDWARF, true},
	} {
		t.Run(c.release+c.kind, func(t *testing.T) {
			saved := ekmClosures[c.release]
			delete(ekmClosures, c.release)
			defer func() { ekmClosures[c.release] = saved }()
			l, err := LayoutFor(testProgram(t, releaseBuild(c.release, c.kind)))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.refused && !strings.Contains(l.tls12, "is known for go1.21") || c.refused && strings.Contains(l.tls12, c.release+" "):
				t.Errorf("TLS 1.2: %q", l.tls12)
			case !c.refused && (l.tls12 != "" || l.closure != saved):
				t.Errorf("TLS 1.2: %q, closure offsets %+v", l.tls12, l.closure)
			}
		})
	}
}

// TestCIToolchains: .ci/run fetches every toolchain the tests build with.
func TestCIToolchains(t *testing.T) {
	run := readFile(t, "../../.ci/run")
	for release, tc := range toolchains {
		if !strings.Contains(run, " "+tc+" ") && !strings.Contains(run, " "+tc+";") {
			t.Errorf(".ci/run does not fetch %s (%s)", tc, release)
		}
	}
	for _, release := range testReleases() {
		if _, ok := toolchains[release]; !ok && release != ownRelease {
			t.Errorf("no toolchain builds %s's programs in the tests", release)
		}
	}
}
