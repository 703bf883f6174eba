package gotls

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLayout: an unstripped build's layout comes from its DWARF, a
// stripped build's from its type descriptors, and each equals the one
// reflect gives of kwatch's own crypto/tls and net; each finds
// *net.TCPConn's type descriptor, through the symbol table or the module
// data, at the same address.
func TestLayout(t *testing.T) {
	own, err := ownStructs()
	if err != nil {
		t.Fatal(err)
	}
	want, err := makeOffsets(own)
	if err != nil {
		t.Fatal(err)
	}
	closure, err := ownEKMClosure()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]uint64{}
	for _, c := range []struct {
		build  string
		source LayoutSource
		twin   string // a build linked at the same addresses
	}{
		{"conns", FromDWARF, "conns"},
		{"conns-stripped", FromTypes, "conns"},
		{"conns-pie-stripped", FromTypes, "conns-pie"},
		{"plain", FromDWARF, "plain"},
		{"stripped", FromTypes, "plain"},
		{"pie", FromDWARF, "pie"},
		{"pie-stripped", FromTypes, "pie"},
		{"external", FromDWARF, "external"},
		{"external-stripped", FromTypes, "external"},
	} {
		t.Run(c.build, func(t *testing.T) {
			l, err := LayoutFor(testProgram(t, c.build))
			if err != nil {
				t.Fatal(err)
			}
			if l.Source != c.source || l.GoVersion != runtime.Version() {
				t.Errorf("layout from %v of %s", l.Source, l.GoVersion)
			}
			if l.off != want {
				t.Errorf("offsets\n%+v, reflect's\n%+v", l.off, want)
			}
			if l.TCPConnType == 0 || l.types == 0 {
				t.Fatalf("*net.TCPConn's type at %#x, types at %#x", l.TCPConnType, l.types)
			}
			if l.tls12 != "" || l.closure != closure.off || len(l.ekmFuncs) != 2 {
				t.Errorf("TLS 1.2: %q, closure offsets %+v (kwatch's %+v), %d closures", l.tls12, l.closure, closure.off, len(l.ekmFuncs))
			}
			if a, ok := types[c.twin]; ok && a != l.TCPConnType {
				t.Errorf("*net.TCPConn's type at %#x, at %#x in its twin", l.TCPConnType, a)
			}
			types[c.twin] = l.TCPConnType
		})
	}
}

// TestLayoutRefused: a stripped program of a Go release whose module data
// kwatch does not read, or which does not check out, has no layout, said in
// one line that names both releases; one with DWARF has one whatever its
// release.
func TestLayoutRefused(t *testing.T) {
	stripped := testProgram(t, "conns-stripped")
	own := goMinor(runtime.Version())
	// The same program with its module data's types word zeroed: its type
	// descriptors cannot be found.
	b, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	mod := ef.Section(".go.module")
	if mod == nil {
		t.Fatal("no .go.module")
	}
	clear(b[mod.Offset+8*37 : mod.Offset+8*38])
	noTypes := filepath.Join(t.TempDir(), "no-types")
	if err := os.WriteFile(noTypes, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		path    string
		own     string
		ownArch string
		unread  bool // kwatch does not read go1.26's module data
		says    string
		source  LayoutSource // 0: refused
	}{
		{"type descriptors", stripped, "go1.25.3", runtime.GOARCH, false, "", FromTypes},
		{"another architecture", testProgram(t, "arm64-stripped"), runtime.Version(), runtime.GOARCH, false, "", FromTypes},
		{"DWARF, another release", testProgram(t, "conns"), "go1.25.3", runtime.GOARCH, false, "", FromDWARF},
		{"module data unread, own release", stripped, runtime.Version(), runtime.GOARCH, true, "", FromReflect},
		{"module data unread, a release candidate of the same", stripped, own + "rc1", runtime.GOARCH, true, "", FromReflect},
		{"module data unread, another release", stripped, "go1.25.3", runtime.GOARCH, true, "was built by " + runtime.Version() + " for amd64; kwatch reads type descriptors of go1.21, go1.22, go1.23, go1.24, go1.25 and go1.27 only, and has the layout of its own release go1.25 for amd64", 0},
		{"module data unread, a devel toolchain", stripped, "devel go1.28-abcdef Tue Jan 1 00:00:00 2030 +0000", runtime.GOARCH, true, "its own release go1.28 for amd64", 0},
		{"module data unread, another architecture", testProgram(t, "arm64-stripped"), runtime.Version(), runtime.GOARCH, true, "for arm64; kwatch reads type descriptors", 0},
		{"module data that does not check out", noTypes, "go1.25.3", runtime.GOARCH, false, "its type descriptors: its types 0x0 to etypes", 0},
		{"module data that does not check out, own release", noTypes, runtime.Version(), runtime.GOARCH, false, "", FromReflect},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.unread {
				saved := moduleWords[own]
				delete(moduleWords, own)
				defer func() { moduleWords[own] = saved }()
			}
			l, err := layoutFor(c.path, c.own, c.ownArch)
			if c.source != 0 {
				if err != nil {
					t.Fatal(err)
				}
				if l.Source != c.source {
					t.Errorf("layout from %v, want %v", l.Source, c.source)
				}
				return
			}
			if !errors.Is(err, ErrNoLayout) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("layout %v, err %v; want one line wrapping ErrNoLayout saying %q", l, err, c.says)
			}
		})
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if sh, err = filepath.EvalSymlinks(sh); err != nil {
		t.Fatal(err)
	}
	if _, err := LayoutFor(sh); !errors.Is(err, ErrNotGo) {
		t.Errorf("%s: %v", sh, err)
	}
}

// TestConnState: connections a running program made before the probe was
// attached are reported at their next use, and their state read from the
// program: the TLS 1.3 connection's traffic secrets are its key log's,
// its sequence numbers the records each side sent, its addresses its own,
// client side and server side; the TLS 1.2 connection's master secret and
// randoms are its key log's and give the keying material it exported;
// read again after more records, the numbers have moved on. The one over
// a Unix socket is refused as not TCP. For the program with DWARF,
// stripped (its type descriptors' layout), stripped PIE (the type check
// through the load bias), stripped by another Go release (go1.27, whose
// crypto/tls.Conn has a field more and whose module data lists its itabs
// another way), and stripped PIE by an older release with no section
// headers at all (go1.22: its functions, module data and relocations found
// through its program headers only).
func TestConnState(t *testing.T) {
	for _, b := range []struct {
		build      string
		noSections bool
	}{{"conns", false}, {"conns-stripped", false}, {"conns-pie-stripped", false}, {"conns-go1.27-stripped", false}, {"conns-go1.22-pie-stripped", true}} {
		name := b.build
		if b.noSections {
			name += "-no-sections"
		}
		t.Run(name, func(t *testing.T) {
			path := testProgram(t, b.build)
			if b.noSections {
				path = noSections(t, path)
			}
			layout, err := LayoutFor(path)
			if err != nil {
				t.Fatal(err)
			}
			p := openProbe(t, options{})
			pr := startConnsPeer(t, path)
			if _, err := p.AttachConns(path, pr.pid()); err != nil {
				t.Fatal(err)
			}
			pr.rw(t, 3)
			uses := collectConns(t, p, pr.pid(), 2*len(pr.conns))
			byName := map[string]*peerConn{}
			for i := range pr.conns {
				byName[pr.conns[i].name] = &pr.conns[i]
			}
			tls13, tls12 := byName["tls13"], byName["tls12"]
			random, master := keyLogRandom(t, readFile(t, filepath.Join(pr.dir, "tls12.keylog")))
			ekm, err := hex.DecodeString(tls12.ekm)
			if err != nil {
				t.Fatal(err)
			}
			keylog := readFile(t, filepath.Join(pr.dir, "tls13.keylog"))
			clientSecret := keyLogSecret(t, keylog, "CLIENT_TRAFFIC_SECRET_0")
			serverSecret := keyLogSecret(t, keylog, "SERVER_TRAFFIC_SECRET_0")
			var ends13, ends12 []uint64 // each connection's two Conns
			notTCP, refused12 := 0, 0
			for _, u := range uses {
				s, err := ReadConnState(int(u.PID), u.Conn, layout)
				if err != nil {
					if errors.Is(err, ErrNotTCP) {
						notTCP++
					}
					if errors.Is(err, ErrTLS12) {
						refused12++
					}
					if strings.Contains(err.Error(), "\n") {
						t.Errorf("an error of several lines: %q", err)
					}
					t.Logf("refused: %v", err)
					continue
				}
				if s.Version == 0x0303 {
					ends12 = append(ends12, u.Conn)
					checkState(t, s, tls12, nil, nil, 3)
					checkTLS12(t, s, random, master, ekm)
					continue
				}
				ends13 = append(ends13, u.Conn)
				checkState(t, s, tls13, clientSecret, serverSecret, 3)
			}
			want12 := 2
			if layout.tls12 != "" {
				want12 = 0
			}
			if len(ends13) != 2 || len(ends12) != want12 || refused12 != 2-want12 || notTCP != 2 {
				t.Fatalf("%d TLS 1.3 and %d TLS 1.2 states read (%d refused), %d not over TCP; want 2, %d (%d) and 2", len(ends13), len(ends12), refused12, notTCP, want12, 2-want12)
			}
			pr.rw(t, 2)
			for _, conn := range append(ends13, ends12...) {
				s, err := ReadConnState(pr.pid(), conn, layout)
				if err != nil {
					t.Fatal(err)
				}
				if s.Version == 0x0303 {
					checkState(t, s, tls12, nil, nil, 5)
				} else {
					checkState(t, s, tls13, clientSecret, serverSecret, 5)
				}
			}
		})
	}
}

// checkState checks one end of connection c after the client sent sent
// records and the server twice as many: for TLS 1.3 its traffic secrets
// too. In TLS 1.2 each side's Finished message came first, under the same
// keys.
func checkState(t *testing.T, s ConnState, c *peerConn, clientSecret, serverSecret []byte, sent uint64) {
	t.Helper()
	local, remote := c.local, c.remote
	in, out := 2*sent, sent
	if c.version == "0303" {
		in, out = in+1, out+1
	}
	if !s.IsClient {
		local, remote, in, out = remote, local, out, in
	}
	if s.Local.String() != local || s.Remote.String() != remote {
		t.Errorf("client %v: %v → %v, want %s → %s", s.IsClient, s.Local, s.Remote, local, remote)
	}
	if fmt.Sprintf("%04x", s.Version) != c.version || !s.TypeChecked || s.FD <= 2 || s.Inode == 0 || s.TCPState != 1 {
		t.Errorf("client %v: %+v", s.IsClient, s)
	}
	if c.version == "0303" {
		if s.In.Secret != nil || s.Out.Secret != nil || len(s.MasterSecret) != 48 {
			t.Errorf("TLS 1.2, client %v: traffic secrets %x %x, a master secret of %d bytes", s.IsClient, s.In.Secret, s.Out.Secret, len(s.MasterSecret))
		}
	} else if s.CipherSuite>>8 != 0x13 || !bytes.Equal(s.Client().Secret, clientSecret) || !bytes.Equal(s.Server().Secret, serverSecret) || s.MasterSecret != nil {
		t.Errorf("client %v: the secrets read are not the key log's", s.IsClient)
	}
	if s.In.Seq != in || s.Out.Seq != out {
		t.Errorf("client %v: sequence numbers in %d, out %d; want %d, %d", s.IsClient, s.In.Seq, s.Out.Seq, in, out)
	}
}
