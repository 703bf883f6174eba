package gotls

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/kwatch/kwatch/internal/testcert"
)

// selfConn is a TLS connection made in the test process, both ends: the
// client's and the server's crypto/tls.Conn, their key log, and the TCP
// addresses of the client's end.
type selfConn struct {
	client, server *tls.Conn
	keylog         *syncBuffer
	local, remote  string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// secret returns the key log's secret of label, decoded.
func keyLogSecret(t *testing.T, keylog, label string) []byte {
	t.Helper()
	for line := range strings.Lines(keylog) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == label {
			b, err := hex.DecodeString(f[2])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no %s in the key log", label)
	return nil
}

// dialSelf makes a connection of version over loopback TCP (or over
// net.Pipe when pipe is set), handshakes both ends, then has the client
// write n records of one byte and the server answer each with two; the
// server is left blocked in Read.
func dialSelf(t *testing.T, version uint16, pipe bool, n int) *selfConn {
	t.Helper()
	cert, roots, err := testcert.NewTrusted("localhost")
	if err != nil {
		t.Fatal(err)
	}
	kl := &syncBuffer{}
	var rawClient, rawServer net.Conn
	if pipe {
		rawClient, rawServer = net.Pipe()
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if rawClient, err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		if rawServer, err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
	}
	c := &selfConn{keylog: kl, local: rawClient.LocalAddr().String(), remote: rawClient.RemoteAddr().String()}
	c.server = tls.Server(rawServer, &tls.Config{Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true, MinVersion: tls.VersionTLS12})
	c.client = tls.Client(rawClient, &tls.Config{RootCAs: roots, ServerName: "localhost", KeyLogWriter: kl, MinVersion: version, MaxVersion: version})
	t.Cleanup(func() { c.client.Close(); c.server.Close() })
	done := make(chan error, 1)
	go func() { done <- c.server.Handshake() }()
	if err := c.client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() {
		var b [1]byte
		for {
			if _, err := c.server.Read(b[:]); err != nil {
				return
			}
			c.server.Write(b[:])
			c.server.Write(b[:])
		}
	}()
	for range n {
		if _, err := c.client.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.ReadFull(c.client, make([]byte, 2*n)); err != nil {
		t.Fatal(err)
	}
	return c
}

func addrOf(c *tls.Conn) uint64 { return uint64(uintptr(unsafe.Pointer(c))) }

// selfLayouts returns this test binary's layouts: from reflect, and from
// its DWARF when it has some (go test links without DWARF unless -c or -o
// is given; the DWARF path is tested on testdata/tlsconns).
func selfLayouts(t *testing.T) map[string]*Layout {
	t.Helper()
	l, err := LayoutFor("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if l.Source == FromReflect {
		return map[string]*Layout{"reflect": l}
	}
	rs, err := ownStructs()
	if err != nil {
		t.Fatal(err)
	}
	rl := *l
	rl.Source = FromReflect
	if rl.off, err = makeOffsets(rs); err != nil {
		t.Fatal(err)
	}
	return map[string]*Layout{"dwarf": l, "reflect": &rl}
}

// TestReadConnStateSelf: the state read from this process's own live
// crypto/tls.Conns, both ends, matches the key log of the same session:
// secrets, sequence numbers, roles, addresses; TLS 1.2 and a connection
// over net.Pipe are refused with their reasons.
func TestReadConnStateSelf(t *testing.T) {
	pid := os.Getpid()
	tls13 := dialSelf(t, tls.VersionTLS13, false, 3)
	tls12 := dialSelf(t, tls.VersionTLS12, false, 1)
	pipe := dialSelf(t, tls.VersionTLS13, true, 1)
	for name, l := range selfLayouts(t) {
		t.Run(name, func(t *testing.T) {
			clientSecret := keyLogSecret(t, tls13.keylog.String(), "CLIENT_TRAFFIC_SECRET_0")
			serverSecret := keyLogSecret(t, tls13.keylog.String(), "SERVER_TRAFFIC_SECRET_0")
			for _, end := range []struct {
				conn          *tls.Conn
				client        bool
				local, remote string
				in, out       uint64
			}{
				{tls13.client, true, tls13.local, tls13.remote, 6, 3},
				{tls13.server, false, tls13.remote, tls13.local, 3, 6},
			} {
				s, err := ReadConnState(pid, addrOf(end.conn), l)
				if err != nil {
					t.Fatal(err)
				}
				if s.Version != tls.VersionTLS13 || s.CipherSuite != end.conn.ConnectionState().CipherSuite || s.IsClient != end.client || !s.TypeChecked {
					t.Errorf("client %v: %+v", end.client, s)
				}
				if !bytes.Equal(s.Client().Secret, clientSecret) || !bytes.Equal(s.Server().Secret, serverSecret) {
					t.Errorf("client %v: the secrets read are not the key log's", end.client)
				}
				if s.In.Seq != end.in || s.Out.Seq != end.out {
					t.Errorf("client %v: sequence numbers in %d, out %d; want %d, %d", end.client, s.In.Seq, s.Out.Seq, end.in, end.out)
				}
				if s.Local.String() != end.local || s.Remote.String() != end.remote {
					t.Errorf("client %v: %v → %v, want %s → %s", end.client, s.Local, s.Remote, end.local, end.remote)
				}
			}
			// TLS 1.2: the master secret and randoms, which give the
			// keying material the connection exports.
			random, master := keyLogRandom(t, tls12.keylog.String())
			st := tls12.client.ConnectionState()
			ekm, err := st.ExportKeyingMaterial(ekmLabel, nil, 32)
			if err != nil {
				t.Fatal(err)
			}
			for _, end := range []struct {
				conn    *tls.Conn
				client  bool
				in, out uint64
			}{
				{tls12.client, true, 3, 2}, // the Finished messages count
				{tls12.server, false, 2, 3},
			} {
				s, err := ReadConnState(pid, addrOf(end.conn), l)
				if err != nil {
					t.Fatal(err)
				}
				if s.Version != tls.VersionTLS12 || s.IsClient != end.client || s.In.Seq != end.in || s.Out.Seq != end.out || s.In.Secret != nil || s.Local.String() == "" {
					t.Errorf("TLS 1.2, client %v: %+v", end.client, s)
				}
				checkTLS12(t, s, random, master, ekm)
			}
			for _, c := range []struct {
				name string
				conn *tls.Conn
				want error
				says string
			}{
				{"net.Pipe", pipe.client, ErrNotTCP, "net.Conn is a *net.pipe, not a *net.TCPConn"},
			} {
				_, err := ReadConnState(pid, addrOf(c.conn), l)
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s: %v; want one line wrapping %v, saying %q", c.name, err, c.want, c.says)
				}
			}
		})
	}
}

// ekmLabel is the label of the keying material the tests export.
const ekmLabel = "EXPERIMENTAL kwatch"

// keyLogRandom returns the key log's CLIENT_RANDOM client random and
// master secret.
func keyLogRandom(t *testing.T, keylog string) (random, master []byte) {
	t.Helper()
	random, master, err := clientRandomLine(keylog)
	if err != nil {
		t.Fatal(err)
	}
	return random, master
}

// checkTLS12 checks a TLS 1.2 state against the key log's client random
// and master secret, and its server random through the keying material
// the connection exported (RFC 5705: PRF(master secret, label, client
// random + server random)).
func checkTLS12(t *testing.T, s ConnState, random, master, ekm []byte) {
	t.Helper()
	if !bytes.Equal(s.ClientRandom[:], random) || !bytes.Equal(s.MasterSecret, master) {
		t.Errorf("client %v: the master secret or client random read is not the key log's", s.IsClient)
	}
	h := sha256.New
	if strings.HasSuffix(tls.CipherSuiteName(s.CipherSuite), "SHA384") {
		h = sha512.New384
	}
	if got := prf12(h, s.MasterSecret, ekmLabel, append(s.ClientRandom[:], s.ServerRandom[:]...), len(ekm)); !bytes.Equal(got, ekm) {
		t.Errorf("client %v: the keying material from the state read is not the connection's: the server random is wrong", s.IsClient)
	}
}

// prf12 is TLS 1.2's PRF (RFC 5246 section 5): P_hash(secret, label +
// seed), n bytes.
func prf12(h func() hash.Hash, secret []byte, label string, seed []byte, n int) []byte {
	seed = append([]byte(label), seed...)
	mac := hmac.New(h, secret)
	mac.Write(seed)
	a := mac.Sum(nil)
	var out []byte
	for len(out) < n {
		mac.Reset()
		mac.Write(a)
		mac.Write(seed)
		out = mac.Sum(out)
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(nil)
	}
	return out[:n]
}
