package gotls

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// buildDir holds the test programs, built once per run (TestMain removes it).
var buildDir string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper())
	}
	dir, err := os.MkdirTemp("", "gotls-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Readable by all: the unprivileged test runs a copy of the test
	// binary from here as nobody.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// variant is one way of building one of testdata's programs.
type variant struct {
	pkg   string   // directory under testdata
	env   []string // added to the environment of go build
	flags []string // go build flags
	cc    bool     // needs a C compiler (external linking)
	// toolchain, when set, is the Go toolchain that builds it
	// (GOTOOLCHAIN: the go command fetches it from the module proxy),
	// outside kwatch's module (releaseModule), whose go.mod asks for
	// kwatch's own release.
	toolchain string
}

// otherToolchain is a Go release other than the one kwatch is built by.
const otherToolchain = "go1.27.3"

// toolchains are the Go releases whose programs the tests build, other
// than kwatch's own (the local toolchain's): the newest patch of each that
// the module proxy served when they were chosen (go list -m -versions
// golang.org/toolchain), .ci/run fetches each. Every release in
// moduleWords but kwatch's own must be here.
var toolchains = map[string]string{
	"go1.21": "go1.21.13",
	"go1.22": "go1.22.12",
	"go1.23": "go1.23.12",
	"go1.24": "go1.24.13",
	"go1.25": "go1.25.14",
	"go1.27": otherToolchain,
}

// Kinds of a release's build of tlsconns (releaseBuild): with DWARF,
// stripped (-s -w), stripped PIE, and arm64 with DWARF and stripped.
const (
	kindDWARF         = ""
	kindStripped      = "-stripped"
	kindPIEStripped   = "-pie-stripped"
	kindARM64         = "-arm64"
	kindARM64Stripped = "-arm64-stripped"
)

var releaseKinds = map[string]variant{
	kindDWARF:         {},
	kindStripped:      {flags: []string{"-ldflags=-s -w"}},
	kindPIEStripped:   {flags: []string{"-buildmode=pie", "-ldflags=-s -w"}},
	kindARM64:         {env: []string{"GOARCH=arm64"}},
	kindARM64Stripped: {env: []string{"GOARCH=arm64"}, flags: []string{"-ldflags=-s -w"}},
}

// ownRelease is kwatch's own Go release: "go1.26".
var ownRelease = goMinor(runtime.Version())

// testReleases returns the releases kwatch reads the module data of,
// oldest first: each is built by the tests.
func testReleases() []string {
	var rs []string
	for r := range moduleWords {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b string) int { return cmp.Compare(minorOf(a), minorOf(b)) })
	return rs
}

// minorOf returns 22 for "go1.22".
func minorOf(release string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(release, "go1."))
	return n
}

// releaseBuild returns the variant name of testdata/tlsconns built by
// release's toolchain as kind says: kwatch's own release builds it in
// kwatch's module ("conns-stripped"), the others in releaseModule
// ("conns-go1.22-stripped").
func releaseBuild(release, kind string) string {
	if release == ownRelease {
		return "conns" + kind
	}
	return "conns-" + release + kind
}

func init() {
	for release, tc := range toolchains {
		for kind, v := range releaseKinds {
			v.pkg, v.toolchain = "tlsconns", tc
			variants[releaseBuild(release, kind)] = v
		}
	}
	// BoringCrypto (crypto/internal/boring, cgo): kwatch's own release.
	variants["conns-boring-stripped"] = variant{pkg: "tlsconns", env: []string{"CGO_ENABLED=1", "GOEXPERIMENT=boringcrypto"}, flags: stripped, cc: true}
	variants["conns-arm64"] = variant{pkg: "tlsconns", env: []string{"GOARCH=arm64"}}
	variants["conns-arm64-stripped"] = variant{pkg: "tlsconns", env: []string{"GOARCH=arm64"}, flags: stripped}
}

// releaseModule makes, once, a module of its own in buildDir that holds
// testdata/tlsconns and internal/testcert at their paths in kwatch's
// (module github.com/kwatch/kwatch, go 1.21): what a Go release older than
// kwatch's go.mod asks for can build.
var releaseModule = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(buildDir, "module")
	for _, f := range []struct{ from, to string }{
		{"testdata/tlsconns/main.go", "pkg/gotls/testdata/tlsconns/main.go"},
		{"../../internal/testcert/testcert.go", "internal/testcert/testcert.go"},
	} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return "", err
		}
		to := filepath.Join(dir, f.to)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module github.com/kwatch/kwatch\n\ngo 1.21\n"), 0o644)
})

// noSections writes a copy of the executable at path with no section
// headers at all (e_shoff, e_shnum and e_shstrndx 0), as some release
// pipelines leave programs: only the program headers say what is where.
func noSections(t *testing.T, path string) string {
	t.Helper()
	return patched(t, path, func(b []byte) {
		clear(b[0x28:0x30]) // e_shoff
		clear(b[0x3c:0x40]) // e_shnum, e_shstrndx
	})
}

var (
	stripped = []string{"-ldflags=-s -w"}
	variants = map[string]variant{
		"plain":              {pkg: "tlspeer"},
		"stripped":           {pkg: "tlspeer", flags: stripped},
		"pie":                {pkg: "tlspeer", flags: []string{"-buildmode=pie"}},
		"pie-stripped":       {pkg: "tlspeer", flags: []string{"-buildmode=pie", "-ldflags=-s -w"}},
		"external":           {pkg: "tlspeer", env: []string{"CGO_ENABLED=1"}, flags: []string{"-ldflags=-linkmode=external"}, cc: true},
		"external-stripped":  {pkg: "tlspeer", env: []string{"CGO_ENABLED=1"}, flags: []string{"-ldflags=-linkmode=external -s -w"}, cc: true},
		"arm64":              {pkg: "tlspeer", env: []string{"GOARCH=arm64"}},
		"arm64-stripped":     {pkg: "tlspeer", env: []string{"GOARCH=arm64"}, flags: stripped},
		"conns":              {pkg: "tlsconns"},
		"conns-stripped":     {pkg: "tlsconns", flags: stripped},
		"conns-pie":          {pkg: "tlsconns", flags: []string{"-buildmode=pie"}},
		"conns-pie-stripped": {pkg: "tlsconns", flags: []string{"-buildmode=pie", "-ldflags=-s -w"}},
		// DWARF left uncompressed: what a test or the fuzzer writes over
		// it is read as written.
		"conns-rawdwarf":    {pkg: "tlsconns", flags: []string{"-ldflags=-compressdwarf=false"}},
		"external-rawdwarf": {pkg: "tlsconns", env: []string{"CGO_ENABLED=1"}, flags: []string{"-ldflags=-linkmode=external -compressdwarf=false"}, cc: true},
		"notls":             {pkg: "notls"},
		"notls-stripped":    {pkg: "notls", flags: stripped},
	}
	builds sync.Map // variant name → *built
)

type built struct {
	once sync.Once
	path string
	err  error
	skip string
}

// testProgram returns the path of the variant's build, building it the first
// time (go build into buildDir).
func testProgram(t testing.TB, name string) string {
	t.Helper()
	v, ok := variants[name]
	if !ok {
		t.Fatalf("no variant %q", name)
	}
	b0, _ := builds.LoadOrStore(name, &built{})
	b := b0.(*built)
	b.once.Do(func() {
		if v.cc {
			if _, err := exec.LookPath("gcc"); err != nil {
				b.skip = "no gcc for an externally linked build"
				return
			}
		}
		out := filepath.Join(buildDir, name)
		args := append([]string{"build", "-o", out}, v.flags...)
		cmd := exec.Command("go", append(args, "./testdata/"+v.pkg)...)
		cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), v.env...)
		if v.toolchain != "" {
			dir, err := releaseModule()
			if err != nil {
				b.err = err
				return
			}
			cmd.Args[len(cmd.Args)-1] = "./pkg/gotls/testdata/" + v.pkg
			cmd.Dir = dir
			cmd.Env = append(cmd.Env, "GOTOOLCHAIN="+v.toolchain, "GOFLAGS=", "GOWORK=off")
		}
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, msg)
			return
		}
		b.path = out
	})
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// nmAddress returns the address go tool nm gives FuncName in the file.
func nmAddress(t *testing.T, path string) uint64 {
	t.Helper()
	out, err := exec.Command("go", "tool", "nm", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm %s: %v\n%s", path, err, out)
	}
	for line := range bytes.Lines(out) {
		f := strings.Fields(string(line))
		if len(f) == 3 && f[2] == FuncName {
			var a uint64
			if _, err := fmt.Sscanf(f[0], "%x", &a); err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatalf("go tool nm %s: no %s", path, FuncName)
	return 0
}

// patched writes a copy of the file at path with edit applied to its bytes.
func patched(t *testing.T, path string, edit func(b []byte)) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	out, err := os.CreateTemp(t.TempDir(), filepath.Base(path)+"-patched-")
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	if err := os.WriteFile(out.Name(), b, 0o755); err != nil {
		t.Fatal(err)
	}
	// Runnable: CreateTemp made it 0600, which WriteFile keeps.
	if err := os.Chmod(out.Name(), 0o755); err != nil {
		t.Fatal(err)
	}
	return out.Name()
}

// readFile returns the file's text.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
