package gotls

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
}

// otherToolchain is a Go release other than the one kwatch is built by.
const otherToolchain = "go1.27.3"

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
		// Built by another Go release than kwatch's, the one the module
		// proxy serves (GOTOOLCHAIN: the go command fetches it), whose
		// crypto/tls.Conn has a field more than go1.26's.
		"conns-go127":          {pkg: "tlsconns", env: []string{"GOTOOLCHAIN=" + otherToolchain}},
		"conns-go127-stripped": {pkg: "tlsconns", env: []string{"GOTOOLCHAIN=" + otherToolchain}, flags: stripped},
		"notls":                {pkg: "notls"},
		"notls-stripped":       {pkg: "notls", flags: stripped},
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
