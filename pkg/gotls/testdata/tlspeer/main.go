// Command tlspeer makes TLS handshakes with a server in its own process, for
// pkg/gotls's tests: -n TLS 1.3 handshakes and -n TLS 1.2 handshakes on new
// connections over loopback, each sending one byte and reading it back, with
// both sides writing their secrets to the key log named by -keylog
// (Config.KeyLogWriter). With -wait it prints "ready" and waits for a line on
// stdin before the first handshake, so that a probe can be placed on it
// first; it prints "done" when every connection is closed.
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/kwatch/kwatch/internal/testcert"
)

func main() {
	keylog := flag.String("keylog", "", "write the key log to `FILE` (required)")
	wait := flag.Bool("wait", false, `print "ready" and wait for a line on stdin before handshaking`)
	n := flag.Int("n", 1, "handshakes of each version")
	flag.Parse()
	if err := run(*keylog, *wait, *n); err != nil {
		fmt.Fprintln(os.Stderr, "tlspeer:", err)
		os.Exit(1)
	}
}

func run(keylog string, wait bool, n int) error {
	if keylog == "" {
		return errors.New("-keylog is required")
	}
	kl, err := os.OpenFile(keylog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer kl.Close()
	cert, roots, err := testcert.NewTrusted("localhost")
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates:           []tls.Certificate{cert},
		KeyLogWriter:           kl,
		SessionTicketsDisabled: true,
		MinVersion:             tls.VersionTLS12,
	})
	if err != nil {
		return err
	}
	defer ln.Close()
	go serve(ln)

	if wait {
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for a line on stdin: %w", err)
		}
	}
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		for range n {
			cfg := &tls.Config{
				RootCAs:      roots,
				ServerName:   "localhost",
				KeyLogWriter: kl,
				MinVersion:   version,
				MaxVersion:   version,
			}
			if err := echo(ln.Addr().String(), cfg); err != nil {
				return err
			}
		}
	}
	fmt.Println("done")
	return nil
}

// echo makes one connection, sends a byte and reads it back: the server has
// then finished its handshake too.
func echo(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.ConnectionState().Version != cfg.MaxVersion {
		return fmt.Errorf("negotiated %s, not %s", tls.VersionName(c.ConnectionState().Version), tls.VersionName(cfg.MaxVersion))
	}
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	return err
}

func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err == nil {
				c.Write(b[:])
			}
		}()
	}
}
