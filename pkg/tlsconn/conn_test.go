package tlsconn

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/httpconn"
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
		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kwatch.test"},
			DNSNames: []string{"kwatch.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		for _, k := range []struct {
			priv any
			pub  any
			out  *tls.Certificate
		}{{rk, &rk.PublicKey, &rsaCert}, {ek, &ek.PublicKey, &ecCert}} {
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.pub, k.priv)
			if err != nil {
				panic(err)
			}
			*k.out = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k.priv}
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

// session runs an HTTP/1.1 watch over a real crypto/tls connection (over
// net.Pipe): the client asks, the server answers with events chunked
// watch events and closes. It returns what each side sent and the client's
// key log.
func session(t testing.TB, client, server *tls.Config, events int) (cl, sv, keys []byte) {
	t.Helper()
	a, b := net.Pipe()
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
		_, err = io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+watchBody(events))
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

// follow feeds a connection's two directions to a Conn, client first, in
// writes of step bytes (0: whole), and returns its records as text.
func follow(t testing.TB, keys *keylog.Log, cl, sv []byte, step int) []string {
	var out []string
	sink := record.SinkFunc(func(r record.Record) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%T %s", r, b))
	})
	c := New(&record.Conn{ID: 1}, sink, Options{Keys: keys})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feed := func(p []byte, f func([]byte, time.Time)) {
		for len(p) > 0 {
			k := len(p)
			if step > 0 {
				k = min(k, step)
			}
			f(p[:k], t0)
			p = p[k:]
		}
	}
	feed(cl, c.ClientData)
	feed(sv, c.ServerData)
	c.CloseServer(httpconn.EndFIN, t0)
	c.CloseClient(httpconn.EndFIN, t0)
	return out
}

func count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

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
