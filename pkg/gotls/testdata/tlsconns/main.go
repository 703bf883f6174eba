// Command tlsconns holds TLS connections open with a server in its own
// process, for pkg/gotls's tests of reading a connection's state from a
// running process: a TLS 1.3 and a TLS 1.2 connection over TCP loopback and
// a TLS 1.3 one over a Unix socket. Each client writes its secrets to its
// own key log, DIR/NAME.keylog (Config.KeyLogWriter), DIR given by -keylog;
// the server to DIR/server.keylog.
//
// Once every handshake is done on both sides it prints one line per
// connection, "conn NAME VERSION LOCAL REMOTE EKM CLIENT SERVER" (the
// client's addresses; VERSION in hex, e.g. 0304; EKM 32 bytes of
// ExportKeyingMaterial with the label "EXPERIMENTAL kwatch" and no
// context, in hex; CLIENT and SERVER the addresses of the two ends'
// crypto/tls.Conns in this process, in hex with 0x), then "ready", and
// reads commands on stdin,
// one a line: "rw N" makes each client write N records of one byte (N
// Writes), the server read them one by one and answer each with two
// records of one byte, and the client read the 2N bytes; then it prints
// "done". Each side's sequence numbers are then: the client's out and the
// server's in the sum of the Ns, the client's in and the server's out
// twice that. Between commands every connection is idle, its server side
// blocked in Read. It exits at the end of stdin.
//
// It builds with every Go release from 1.21 on (pkg/gotls's tests build it
// with each, outside kwatch's module): no newer language or library
// feature.
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
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/kwatch/kwatch/internal/testcert"
)

func main() {
	dir := flag.String("keylog", "", "write the key logs into `DIR` (required)")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "tlsconns:", err)
		os.Exit(1)
	}
}

type conn struct {
	name    string
	version uint16
	client  *tls.Conn
}

func run(dir string) error {
	if dir == "" {
		return errors.New("-keylog is required")
	}
	cert, roots, err := testcert.NewTrusted("localhost")
	if err != nil {
		return err
	}
	serverLog, err := os.Create(filepath.Join(dir, "server.keylog"))
	if err != nil {
		return err
	}
	defer serverLog.Close()
	server := &tls.Config{
		Certificates:           []tls.Certificate{cert},
		KeyLogWriter:           serverLog,
		SessionTicketsDisabled: true, // no NewSessionTicket records after the handshake
		MinVersion:             tls.VersionTLS12,
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer tcp.Close()
	unix, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		return err
	}
	defer unix.Close()

	handshaken := make(chan handshaken)
	for _, ln := range []net.Listener{tcp, unix} {
		// ln passed on: before Go 1.22 a loop's variable is shared by
		// its iterations.
		go func(ln net.Listener) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serve(tls.Server(c, server), handshaken)
			}
		}(ln)
	}

	var conns []conn
	for _, c := range []struct {
		name    string
		network string
		addr    string
		version uint16
	}{
		{"tls13", "tcp", tcp.Addr().String(), tls.VersionTLS13},
		{"tls12", "tcp", tcp.Addr().String(), tls.VersionTLS12},
		{"unix", "unix", unix.Addr().String(), tls.VersionTLS13},
	} {
		kl, err := os.Create(filepath.Join(dir, c.name+".keylog"))
		if err != nil {
			return err
		}
		defer kl.Close()
		raw, err := net.Dial(c.network, c.addr)
		if err != nil {
			return err
		}
		tc := tls.Client(raw, &tls.Config{
			RootCAs:      roots,
			ServerName:   "localhost",
			KeyLogWriter: kl,
			MinVersion:   c.version,
			MaxVersion:   c.version,
		})
		defer tc.Close()
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		srv := <-handshaken
		if srv.err != nil {
			return fmt.Errorf("%s: the server: %w", c.name, srv.err)
		}
		if v := tc.ConnectionState().Version; v != c.version {
			return fmt.Errorf("%s: negotiated %s", c.name, tls.VersionName(v))
		}
		conns = append(conns, conn{c.name, c.version, tc})
		st := tc.ConnectionState()
		ekm, err := st.ExportKeyingMaterial("EXPERIMENTAL kwatch", nil, 32)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Printf("conn %s %04x %s %s %x %#x %#x\n", c.name, c.version, raw.LocalAddr(), raw.RemoteAddr(), ekm, uintptr(unsafe.Pointer(tc)), uintptr(unsafe.Pointer(srv.conn)))
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 || f[0] != "rw" {
			return fmt.Errorf("command %q", in.Text())
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return fmt.Errorf("command %q", in.Text())
		}
		for _, c := range conns {
			for i := 0; i < n; i++ {
				if _, err := c.client.Write([]byte{'x'}); err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
			}
			if _, err := io.ReadFull(c.client, make([]byte, 2*n)); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		fmt.Println("done")
	}
	return in.Err()
}

// handshaken is what serve tells of its end's handshake.
type handshaken struct {
	conn *tls.Conn
	err  error
}

// serve handshakes, tells, then answers each byte read with two records of
// one byte each.
func serve(c *tls.Conn, done chan<- handshaken) {
	defer c.Close()
	err := c.Handshake()
	done <- handshaken{c, err}
	if err != nil {
		return
	}
	var b [1]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
		for i := 0; i < 2; i++ {
			if _, err := c.Write(b[:]); err != nil {
				return
			}
		}
	}
}
