// Package layout holds the test that keeps kwatch's packages in the shape
// README's Development section draws: one switchboard (pkg/wire), the
// protocol followers side by side below it, the sources above it, and
// sinks that decide from typed record fields, not from message text.
package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kwatch/kwatch/pkg/"

// followers are the protocol followers: each knows its own protocol only.
var followers = []string{"httpconn", "h2conn", "tlsconn"}

// imports returns the kwatch packages (relative to pkg/) that the non-test
// files of pkg/name import.
func imports(t *testing.T, name string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "pkg", name, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("pkg/%s: no Go files (%v)", name, err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok && !slices.Contains(out, rest) {
				out = append(out, rest)
			}
		}
	}
	return out
}

func TestImports(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
		required  []string
	}{
		{pkg: "exchange", forbidden: append([]string{"wire"}, followers...)},
		{pkg: "httpconn", forbidden: append([]string{"wire"}, followers...)},
		{pkg: "h2conn", forbidden: append([]string{"wire"}, followers...)},
		{pkg: "tlsconn", forbidden: append([]string{"wire"}, followers...)},
		{pkg: "pcap", forbidden: followers, required: []string{"wire"}},
		{pkg: "watchclient", forbidden: append([]string{"pcap"}, followers...), required: []string{"wire"}},
		{pkg: "pcapwriter", forbidden: append([]string{"pcap", "wire"}, followers...)},
		// Live capture is a packet source like a file: it feeds pkg/pcap
		// and knows nothing of decoding.
		{pkg: "live", forbidden: append([]string{"pcap", "wire", "attach"}, followers...)},
		// The uprobe is a key source: it knows no key store, no packet.
		{pkg: "gotls", forbidden: append([]string{"pcap", "wire", "keylog", "live", "attach"}, followers...)},
		{pkg: "procnet", forbidden: append([]string{"pcap", "wire", "live", "attach"}, followers...)},
		// The kernel's connection owners are a source of facts about
		// sockets: they know no packet source, no process table, no
		// decoding.
		{pkg: "sockowner", forbidden: append([]string{"pcap", "wire", "live", "procnet", "gotls", "keylog", "attach"}, followers...)},
		// attach wires key and packet sources into the one reader.
		{pkg: "attach", forbidden: append([]string{"wire"}, followers...), required: []string{"pcap", "gotls", "live", "procnet", "sockowner", "keylog"}},
		{pkg: "report", forbidden: append([]string{"wire", "pcap", "watchclient"}, followers...)},
		// The live table is a sink beside the printer and the report.
		{pkg: "top", forbidden: append([]string{"wire", "pcap", "watchclient", "attach", "live", "report"}, followers...)},
		// Who a client is comes from records alone.
		{pkg: "who", forbidden: append([]string{"wire", "pcap", "watchclient", "attach", "printer"}, followers...)},
		{pkg: "health", forbidden: append([]string{"wire", "pcap", "watchclient"}, followers...)},
		// The nodes are a source of records, not of bytes: they read the
		// records kwatch on each node writes, and decode nothing.
		{pkg: "node", forbidden: append([]string{"wire", "pcap", "attach", "live", "gotls", "watchclient", "health", "diff", "report"}, followers...),
			required: []string{"printer", "merge"}},
		{pkg: "merge", forbidden: append([]string{"wire", "pcap", "printer", "node"}, followers...)},
		// The filters judge records, as the sinks do; the followers ask
		// them through exchange.Limits.Omit, never by importing them.
		{pkg: "filter", forbidden: append([]string{"wire", "pcap", "watchclient", "exchange"}, followers...)},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			got := imports(t, tc.pkg)
			for _, f := range tc.forbidden {
				if f != tc.pkg && slices.Contains(got, f) {
					t.Errorf("pkg/%s imports pkg/%s; it must not (README, Development)", tc.pkg, f)
				}
			}
			for _, r := range tc.required {
				if !slices.Contains(got, r) {
					t.Errorf("pkg/%s does not import pkg/%s: its connections must be built through the switchboard", tc.pkg, r)
				}
			}
		})
	}
}

// textFields are the record fields that hold words for people (messages,
// reasons, details): a sink that decides by matching them breaks when the
// wording changes.
var textFields = []string{"Message", "Reason", "How", "Detail", "Hint", "BodyText"}

// TestSinksDecideByKind: pkg/report, pkg/health, pkg/rewatch, pkg/top,
// pkg/who and pkg/filter never match record text: no strings.HasPrefix,
// HasSuffix, Contains, Cut or Index on one of textFields, and no
// comparison of one with a string literal.
func TestSinksDecideByKind(t *testing.T) {
	matchers := []string{"HasPrefix", "HasSuffix", "Contains", "Cut", "Index", "EqualFold"}
	isText := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		return ok && slices.Contains(textFields, sel.Sel.Name)
	}
	for _, name := range []string{"report", "health", "rewatch", "top", "who", "filter"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "pkg", name, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			af, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				switch v := n.(type) {
				case *ast.CallExpr:
					sel, ok := v.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "strings" && slices.Contains(matchers, sel.Sel.Name) {
						for _, a := range v.Args {
							if isText(a) {
								t.Errorf("%s: strings.%s on a record's text: decide from a typed field", fset.Position(v.Pos()), sel.Sel.Name)
							}
						}
					}
				case *ast.BinaryExpr:
					if v.Op != token.EQL && v.Op != token.NEQ {
						return true
					}
					// A test for emptiness (== "") is no match on words.
					nonEmpty := func(e ast.Expr) bool {
						l, ok := e.(*ast.BasicLit)
						return ok && l.Value != `""`
					}
					lit1, lit2 := nonEmpty(v.X), nonEmpty(v.Y)
					if isText(v.X) && lit2 || isText(v.Y) && lit1 {
						t.Errorf("%s: a record's text compared with a literal: decide from a typed field", fset.Position(v.Pos()))
					}
				}
				return true
			})
		}
	}
}
