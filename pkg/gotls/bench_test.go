package gotls

import (
	"crypto/tls"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testcert"
)

// BenchmarkHandshake measures one full TLS 1.3 handshake over loopback
// (ECDSA P-256 certificate, Go's default key exchange, no resumption; the
// client sends a byte and reads it back), client and server both in this
// process, without a probe and with the uprobe attached to this process.
// Each handshake makes 8 writeKeyLog calls (4 secrets a side), so the
// difference between the two, divided by 8, is the cost of one uprobe hit;
// secrets are read as they come, as kwatch would.
func BenchmarkHandshake(b *testing.B) {
	addr, cfg := handshakeServer(b)
	handshakes := func(b *testing.B) {
		for b.Loop() {
			if err := echo(addr, cfg); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no-probe", handshakes)
	b.Run("uprobe", func(b *testing.B) {
		p, err := Open()
		if err != nil {
			b.Skip(err)
		}
		defer p.Close()
		self, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Attach(self, os.Getpid()); err != nil {
			b.Fatal(err)
		}
		secrets := make(chan int)
		go func() {
			n := 0
			for {
				if _, err := p.Read(); err != nil {
					secrets <- n
					return
				}
				n++
			}
		}()
		handshakes(b)
		time.Sleep(10 * time.Millisecond) // let the reader catch up
		lost := p.Lost()
		p.Close()
		b.ReportMetric(float64(<-secrets)/float64(b.N), "secrets/op")
		if lost != 0 {
			b.Errorf("%d secrets lost", lost)
		}
	})
}

// handshakeServer starts a TLS server on loopback for the benchmark and
// returns its address and a client configuration for TLS 1.3.
func handshakeServer(b *testing.B) (string, *tls.Config) {
	cert, roots, err := testcert.NewTrusted("localhost")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates:           []tls.Certificate{cert},
		SessionTicketsDisabled: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var one [1]byte
				if _, err := io.ReadFull(c, one[:]); err == nil {
					c.Write(one[:])
				}
			}()
		}
	}()
	return ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
}

// echo makes one connection, sends a byte and reads it back: both sides
// have then finished their handshakes.
func echo(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var one [1]byte
	if _, err := io.ReadFull(c, one[:]); err != nil {
		return err
	}
	if c.ConnectionState().Version != tls.VersionTLS13 {
		return errors.New("not TLS 1.3")
	}
	return nil
}
