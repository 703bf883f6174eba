// RSA key exchange (TLS_RSA_WITH_*) is off by default in crypto/tls since
// Go 1.22; the tests turn it back on to decrypt those suites too.
//
//go:debug tlsrsakex=1
package tlsconn

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testcert"
	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

var (
	certOnce        sync.Once
	rsaCert, ecCert tls.Certificate
)

// certs makes a self-signed RSA and an ECDSA certificate for "kwatch.test".
func certs(t testing.TB) (rsaC, ecC tls.Certificate) {
	certOnce.Do(func() {
		var err error
		if rsaCert, err = testcert.New(testcert.RSA, "kwatch.test"); err != nil {
			panic(err)
		}
		if ecCert, err = testcert.New(testcert.ECDSA, "kwatch.test"); err != nil {
			panic(err)
		}
	})
	return rsaCert, ecCert
}

// recorder is a net.Conn that keeps a copy of every byte written.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.out.Bytes())
}

// watchBody is a chunked watch response body of n ConfigMap events, each
// in its own chunk.
func watchBody(n int) string {
	var b strings.Builder
	for i := range n {
		ev := fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"default","resourceVersion":"%d"}}}`+"\n", i, 100+i)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev)
	}
	return b.String() + "0\r\n\r\n"
}

const watchRequest = "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: kwatch.test\r\n\r\n"

// session runs an HTTP/1.1 watch over a real crypto/tls connection (on
// loopback TCP): the client asks, the server answers with events chunked
// watch events and closes. It returns what each side sent and the client's
// key log.
func session(t testing.TB, client, server *tls.Config, events int) (cl, sv, keys []byte) {
	return sessionWrites(t, client, server, events, false)
}

// sessionWrites is session; with perEvent the server writes each chunk
// with a Write of its own, so that each travels in a TLS record of its own.
func sessionWrites(t testing.TB, client, server *tls.Config, events int, perEvent bool) (cl, sv, keys []byte) {
	t.Helper()
	// A loopback TCP connection rather than net.Pipe: net.Pipe's writes
	// wait for the peer's reads, and both peers of a TLS 1.3 handshake
	// with session tickets write at once.
	a, b := tcpPair(t)
	ra, rb := &recorder{Conn: a}, &recorder{Conn: b}
	var kl bytes.Buffer
	client = client.Clone()
	client.KeyLogWriter = &kl
	client.ServerName = "kwatch.test"
	client.InsecureSkipVerify = true
	errc := make(chan error, 1)
	go func() {
		s := tls.Server(rb, server)
		defer s.Close()
		req, err := http.ReadRequest(bufio.NewReader(s))
		if err != nil {
			errc <- err
			return
		}
		_ = req
		body := watchBody(events)
		if perEvent {
			_, err = io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			for _, c := range strings.SplitAfter(body, "}}\n\r\n") {
				if err == nil && c != "" {
					_, err = io.WriteString(s, c)
				}
			}
		} else {
			_, err = io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		}
		if err == nil {
			err = s.CloseWrite()
		}
		errc <- err
	}()
	c := tls.Client(ra, client)
	if _, err := io.WriteString(c, watchRequest); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	c.Close()
	return ra.bytes(), rb.bytes(), kl.Bytes()
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	return client, server
}

// follow feeds a connection's two directions to a Conn, client first, in
// writes of step bytes (0: whole), and returns its records as text.
func follow(t testing.TB, keys *keylog.Log, cl, sv []byte, step int) []string {
	sink, out := testutil.RecordLines(t)
	c := newConn(&record.Conn{ID: 1}, sink, Options{Keys: keys})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed([]testutil.Piece{{Client: true, P: cl}, {P: sv}}, step, t0, c.ClientData, c.ServerData)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	return *out
}

var count = testutil.Count

// TestSuites decrypts real crypto/tls sessions of every suite Go speaks
// that kwatch decrypts, TLS 1.3 and TLS 1.2, whole and in small writes.
func TestSuites(t *testing.T) {
	rsaC, ecC := certs(t)
	for _, c := range []struct {
		name  string
		suite uint16
		cert  tls.Certificate
		max   uint16
	}{
		{"TLS 1.3 TLS_AES_128_GCM_SHA256", tls.TLS_AES_128_GCM_SHA256, ecC, tls.VersionTLS13},
		{"TLS 1.2 TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, rsaC, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, rsaC, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, rsaC, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ecC, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, ecC, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, ecC, tls.VersionTLS12},
		{"TLS 1.2 TLS_RSA_WITH_AES_128_GCM_SHA256", tls.TLS_RSA_WITH_AES_128_GCM_SHA256, rsaC, tls.VersionTLS12},
		{"TLS 1.2 TLS_RSA_WITH_AES_256_GCM_SHA384", tls.TLS_RSA_WITH_AES_256_GCM_SHA384, rsaC, tls.VersionTLS12},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &tls.Config{Certificates: []tls.Certificate{c.cert}, MaxVersion: c.max, CipherSuites: []uint16{c.suite}}
			cl, sv, keys := session(t, &tls.Config{MaxVersion: c.max, NextProtos: []string{"http/1.1"}}, srv, 5)
			kl := keylog.New()
			kl.Add(keys, "keys.log")
			whole := follow(t, kl, cl, sv, 0)
			if n := count(whole, `"Type":"ADDED"`); n != 5 {
				t.Fatalf("%d ADDED events, want 5:\n%s", n, strings.Join(whole, "\n"))
			}
			if n := count(whole, `"Kind":"tls-decrypted"`); n != 1 || count(whole, `"Suite":"`+c.name+`"`) != 1 {
				t.Errorf("want one tls-decrypted note for %s:\n%s", c.name, strings.Join(whole, "\n"))
			}
			if n := count(whole, "*record.Problem"); n != 0 {
				t.Errorf("%d problems:\n%s", n, strings.Join(whole, "\n"))
			}
			for _, step := range []int{1, 7, 1000} {
				if got := follow(t, kl, cl, sv, step); strings.Join(got, "\n") != strings.Join(whole, "\n") {
					t.Errorf("writes of %d bytes differ from whole writes:\n%s\nwhole:\n%s", step, strings.Join(got, "\n"), strings.Join(whole, "\n"))
				}
			}
		})
	}
}

// tapped is a server-side net.Conn that keeps what the client sent (read)
// and what the server sent (written), and counts the server's bytes.
type tapped struct {
	net.Conn
	mu     sync.Mutex
	cl, sv bytes.Buffer
}

func (c *tapped) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.cl.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *tapped) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.sv.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *tapped) sent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sv.Len()
}

// TestOpenSSLKeyUpdate decrypts sessions between OpenSSL's s_client (the
// TLS 1.3 suites Go's client never picks: AES-256-GCM and
// ChaCha20-Poly1305, keys from -keylogfile) and a crypto/tls server: two
// watch requests on one connection, with a KeyUpdate between them
// (s_client's "K" command: it updates its keys and asks the server to,
// RFC 8446 §4.6.3), so that both directions change keys mid-connection.
func TestOpenSSLKeyUpdate(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed (.ci/run installs it)")
	}
	_, ecC := certs(t)
	for _, suite := range []string{"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		t.Run(suite, func(t *testing.T) {
			var conn *tapped
			accepted := make(chan *tls.Conn, 1)
			// The server's connection is tapped below TLS.
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			go func() {
				c, err := raw.Accept()
				if err != nil {
					return
				}
				conn = &tapped{Conn: c}
				accepted <- tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{ecC}})
			}()
			keyFile := filepath.Join(t.TempDir(), "keys.log")
			cmd := exec.Command(openssl, "s_client", "-connect", raw.Addr().String(), "-tls1_3", "-ciphersuites", suite,
				"-keylogfile", keyFile, "-crlf", "-servername", "kwatch.test")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out syncBuf
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			s := <-accepted
			br := bufio.NewReader(s)
			answer := func() {
				t.Helper()
				if _, err := http.ReadRequest(br); err != nil {
					t.Fatalf("reading the request: %v; s_client: %s", err, out.String())
				}
				if _, err := io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+watchBody(2)); err != nil {
					t.Fatal(err)
				}
			}
			req := strings.ReplaceAll(watchRequest, "\r\n", "\n") // -crlf puts the CRs back
			io.WriteString(stdin, req)
			answer()
			// K: s_client sends KeyUpdate(update_requested); the server
			// answers with its own KeyUpdate as it reads it, which the
			// tap sees as bytes written with no response pending.
			before := conn.sent()
			io.WriteString(stdin, "K\n")
			read := make(chan error, 1)
			go func() {
				_, err := br.Peek(1) // reads (and answers) the KeyUpdate, then waits for the next request
				read <- err
			}()
			deadline := time.Now().Add(20 * time.Second)
			for conn.sent() == before {
				if time.Now().After(deadline) {
					t.Fatalf("the server did not answer the KeyUpdate; s_client: %s", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			io.WriteString(stdin, req)
			if err := <-read; err != nil {
				t.Fatal(err)
			}
			answer()
			s.Close()
			stdin.Close()
			_ = cmd.Wait()
			keys := keylog.New()
			if err := keys.AddFile(keyFile); err != nil {
				t.Fatal(err)
			}
			conn.mu.Lock()
			cl, sv := bytes.Clone(conn.cl.Bytes()), bytes.Clone(conn.sv.Bytes())
			conn.mu.Unlock()
			whole := follow(t, keys, cl, sv, 0)
			text := strings.Join(whole, "\n")
			if n := count(whole, `"Type":"ADDED"`); n != 4 {
				t.Fatalf("%d ADDED events, want 2 in each of 2 exchanges:\n%s", n, text)
			}
			for _, want := range []string{`"Suite":"TLS 1.3 ` + suite + `"`, `client KeyUpdate`, `server KeyUpdate`} {
				if !strings.Contains(text, want) {
					t.Errorf("no %q in:\n%s", want, text)
				}
			}
			if n := count(whole, "*record.Problem"); n != 0 {
				t.Errorf("%d problems:\n%s", n, text)
			}
			if got := follow(t, keys, cl, sv, 3); strings.Join(got, "\n") != text {
				t.Errorf("writes of 3 bytes differ from whole writes")
			}
		})
	}
}

// syncBuf is a bytes.Buffer safe for a command's output and a test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestResumption decrypts a resumed TLS 1.3 session (a PSK from a session
// ticket), whose keys the client logs under the new connection's client
// random like any other. Go's client logs no key for a resumed TLS 1.2
// session (its abbreviated handshake reuses the master secret): that
// connection is said to be undecryptable.
func TestResumption(t *testing.T) {
	_, ecC := certs(t)
	for _, max := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		cache := tls.NewLRUClientSessionCache(4)
		client := &tls.Config{MaxVersion: max, ClientSessionCache: cache}
		server := &tls.Config{Certificates: []tls.Certificate{ecC}, MaxVersion: max}
		for i := range 2 {
			cl, sv, kl := session(t, client, server, 2)
			keys := keylog.New()
			keys.Add(kl, "keys.log")
			text := strings.Join(follow(t, keys, cl, sv, 0), "\n")
			if max == tls.VersionTLS12 && i == 1 {
				if len(kl) != 0 || !strings.Contains(text, "encrypted, not decoded") {
					t.Errorf("resumed TLS 1.2: key log %q:\n%s", kl, text)
				}
				continue
			}
			if n := strings.Count(text, `"Type":"ADDED"`); n != 2 || strings.Contains(text, "*record.Problem") {
				t.Errorf("%s, connection %d: %d events:\n%s", tls.VersionName(max), i+1, n, text)
			}
		}
	}
}
