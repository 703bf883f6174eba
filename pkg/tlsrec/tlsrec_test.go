package tlsrec

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/cryptobyte"
	"time"
)

// tapped records what one end of a connection wrote.
type tapped struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (t *tapped) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.out = append(t.out, p...)
	t.mu.Unlock()
	return t.Conn.Write(p)
}

func (t *tapped) written() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.out...)
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-apiserver"},
		DNSNames: []string{"kubernetes"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// handshake runs a real crypto/tls handshake and returns what the client
// and the server wrote.
func handshake(t *testing.T, maxVersion uint16, alpn []string) (client, server []byte) {
	t.Helper()
	a, b := net.Pipe()
	ca, sb := &tapped{Conn: a}, &tapped{Conn: b}
	srv := tls.Server(sb, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: alpn, MaxVersion: maxVersion})
	cli := tls.Client(ca, &tls.Config{ServerName: "kubernetes", InsecureSkipVerify: true, NextProtos: alpn, MaxVersion: maxVersion})
	errs := make(chan error, 1)
	go func() { errs <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// No close_notify: on a net.Pipe nobody would read it.
	a.Close()
	b.Close()
	return ca.written(), sb.written()
}

func TestSnifferRealHandshakes(t *testing.T) {
	for _, tc := range []struct {
		name               string
		max                uint16
		alpn               []string
		wantClient, wantSv string
	}{
		{"TLS 1.3 h2", tls.VersionTLS13, []string{"h2", "http/1.1"},
			`TLS 1.3, server name "kubernetes", ALPN h2,http/1.1`, "TLS 1.3, TLS_AES_128_GCM_SHA256"},
		{"TLS 1.2 h2", tls.VersionTLS12, []string{"h2", "http/1.1"},
			`TLS 1.2, server name "kubernetes", ALPN h2,http/1.1`, "TLS 1.2, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ALPN h2"},
		{"TLS 1.2 no ALPN", tls.VersionTLS12, nil,
			`TLS 1.2, server name "kubernetes"`, "TLS 1.2, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := handshake(t, tc.max, tc.alpn)
			for _, side := range []struct {
				name string
				data []byte
				want string
			}{{"client", c, tc.wantClient}, {"server", s, tc.wantSv}} {
				// Whole, and one byte at a time.
				for _, step := range []int{len(side.data), 1} {
					var sn Sniffer
					for i := 0; i < len(side.data) && !sn.Done(); i += step {
						sn.Write(side.data[i:min(i+step, len(side.data))])
					}
					if !sn.Done() || sn.Err != nil || sn.Hello == nil || sn.MidStream {
						t.Fatalf("%s (step %d): done %v, err %v, hello %v", side.name, step, sn.Done(), sn.Err, sn.Hello)
					}
					if got := sn.Hello.String(); got != side.want {
						t.Errorf("%s (step %d): %q, want %q", side.name, step, got, side.want)
					}
					if sn.FirstVersion != 0x0301 && sn.FirstVersion != 0x0303 {
						t.Errorf("%s: first record version %#x", side.name, sn.FirstVersion)
					}
				}
			}
		})
	}
}

func TestSnifferMidStreamAndHostile(t *testing.T) {
	var sn Sniffer
	sn.Write([]byte{23, 3, 3, 0, 5, 1, 2, 3, 4, 5})
	if !sn.Done() || !sn.MidStream || sn.FirstVersion != 0x0303 || sn.Hello != nil {
		t.Errorf("application data first: %+v", sn)
	}
	// A handshake record announcing a hello far larger than it carries,
	// then more handshake records that never complete it: bounded.
	sn = Sniffer{}
	sn.Write([]byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff})
	rec := append([]byte{22, 3, 1, 0x40, 0}, make([]byte, 0x4000)...)
	for i := 0; i < 10 && !sn.Done(); i++ {
		sn.Write(rec)
	}
	if !sn.Done() || sn.Err == nil || sn.Hello != nil {
		t.Errorf("endless hello: done %v, err %v", sn.Done(), sn.Err)
	}
	// An alert first, one byte at a time: read once its two bytes have
	// come, as when written whole.
	sn = Sniffer{}
	for _, b := range []byte{21, 3, 3, 0, 2, 2, 40} {
		sn.Write([]byte{b})
	}
	if !sn.Done() || sn.Err == nil || !strings.Contains(sn.Err.Error(), "an alert (level 2, description 40)") || sn.FirstVersion != 0x0303 {
		t.Errorf("an alert byte by byte: done %v, err %v, version %#x", sn.Done(), sn.Err, sn.FirstVersion)
	}
	// A malformed ClientHello: a session ID longer than the message.
	sn = Sniffer{}
	msg := append([]byte{1, 0, 0, 36, 3, 3}, make([]byte, 32)...)
	msg = append(msg, 200, 0)
	sn.Write(append([]byte{22, 3, 1, 0, byte(len(msg))}, msg...))
	if !sn.Done() || sn.Err == nil {
		t.Errorf("malformed: done %v, err %v", sn.Done(), sn.Err)
	}
}

// TestSnifferBounds: a hello held back by empty records costs linear time
// (each record is looked at once), a write that crosses the 64 KiB bound
// still parses the hello it completes, an alert first is not taken for
// the middle of a connection, and lost bytes end the reading.
func TestSnifferBounds(t *testing.T) {
	c, _ := handshake(t, tls.VersionTLS13, []string{"h2"})
	hello := c[:5+int(c[3])<<8|int(c[4])]
	var sn Sniffer
	for range 14000 { // 70 KB of empty handshake records
		sn.Write([]byte{22, 3, 1, 0, 0})
	}
	if !sn.Done() || sn.Err == nil {
		t.Errorf("endless empty records: done %v, err %v", sn.Done(), sn.Err)
	}
	sn = Sniffer{}
	sn.Write(hello[:5])
	big := append(append([]byte{}, hello[5:]...), make([]byte, 70<<10)...)
	if n, _ := sn.Write(big); n != len(big) || sn.Hello == nil || sn.Err != nil {
		t.Errorf("hello completed by a write past the bound: n %d of %d, hello %v, err %v", n, len(big), sn.Hello, sn.Err)
	}
	sn = Sniffer{}
	sn.Write([]byte{21, 3, 3, 0, 2, 2, 40})
	if !sn.Done() || sn.MidStream || sn.Err == nil || !strings.Contains(sn.Err.Error(), "alert (level 2, description 40)") {
		t.Errorf("alert first: %+v", sn)
	}
	sn = Sniffer{}
	sn.Write(hello[:20])
	sn.Gap()
	if !sn.Done() || sn.Err == nil || sn.Hello != nil {
		t.Errorf("gap: %+v", sn)
	}
	if got := ALPNText([]string{"h2", "http/1.1", "x\u202etxt", "a,b"}); got != `h2,http/1.1,"x\u202etxt","a,b"` {
		t.Errorf("ALPNText: %s", got)
	}
}

// TestHelloVersions: supported_versions replaces legacy_version, also to a
// lower one, and one with a trailing byte is malformed.
func TestHelloVersions(t *testing.T) {
	client := func(versions ...byte) []byte {
		b := cryptobyte.NewBuilder(nil)
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32))
		b.AddUint8LengthPrefixed(func(*cryptobyte.Builder) {})
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(extSupportedVersions)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(versions) })
			})
		})
		return b.BytesOrPanic()
	}
	if h, err := ParseClientHello(client(0x03, 0x02)); err != nil || VersionName(h.Version) != "TLS 1.1" {
		t.Errorf("only TLS 1.1 offered: %+v, %v", h, err)
	}
	if h, err := ParseClientHello(client(0x0a, 0x0a, 0x03, 0x04, 0x03, 0x03)); err != nil || h.Version != tls.VersionTLS13 {
		t.Errorf("GREASE, 1.3, 1.2: %+v, %v", h, err)
	}
	server := func(ext []byte) []byte {
		b := cryptobyte.NewBuilder(nil)
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32))
		b.AddUint8LengthPrefixed(func(*cryptobyte.Builder) {})
		b.AddUint16(0x1301)
		b.AddUint8(0)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(extSupportedVersions)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(ext) })
		})
		return b.BytesOrPanic()
	}
	if _, err := ParseServerHello(server([]byte{0x03, 0x04, 0x00})); err == nil {
		t.Errorf("supported_versions with a trailing byte accepted")
	}
	if h, err := ParseServerHello(server([]byte{0x03, 0x04})); err != nil || h.Version != tls.VersionTLS13 {
		t.Errorf("TLS 1.3 ServerHello: %+v, %v", h, err)
	}
}
