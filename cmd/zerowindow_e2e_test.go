package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestPcapZeroWindow: a client that stops reading its watch (a TCP
// connection to the test's own kubectl proxy with a small receive buffer,
// which reads nothing until its window is full) makes the proxy wait; in
// tcpdump's capture kwatch pcap says for how long the client's receive
// window was at 0, and every event still decodes as the client read it.
func TestPcapZeroWindow(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	proxy := newProxy(t, env)
	file, capture := tcpdumpFile(t, fmt.Sprintf("tcp port %d", proxy.port), dialMarker(&net.Dialer{}, fmt.Sprintf("127.0.0.1:%d", proxy.port)))

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", proxy.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := conn.LocalAddr().(*net.TCPAddr).Port
	fmt.Fprintf(conn, "GET /api/v1/namespaces/%s/configmaps?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ns)

	// ConfigMaps of 8 KiB each, until the client's window is at 0 in the
	// capture: the watch's bytes wait in the proxy for the client.
	big := strings.Repeat("x", 8192)
	var names []string
	deadline := time.Now().Add(60 * time.Second)
	for !zeroWindowFrom(file, port) {
		if time.Now().After(deadline) {
			t.Fatalf("no zero window from the client after %d ConfigMaps", len(names))
		}
		name := fmt.Sprintf("zw-%03d", len(names))
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"k": big}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	// Now the client reads: every event, up to the last ConfigMap's.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := bufio.NewReader(resp.Body) // de-chunked
	for last := []byte(`"name":"` + names[len(names)-1] + `"`); ; {
		ev, err := body.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the watch: %v", err)
		}
		if bytes.Contains(ev, last) {
			break
		}
	}
	conn.Close()
	data := capture()

	var notes, added []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.ConnNote:
			if v.Kind == "tcp" && v.Conn.Client.Port() == uint16(port) {
				notes = append(notes, v.Message)
			}
		case *record.Event:
			if v.Type == "ADDED" && v.Conn.Client.Port() == uint16(port) {
				added = append(added, v.Name)
			}
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "zero-window.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	if len(notes) == 0 || !strings.HasPrefix(notes[0], "TCP zero window: the client's receive window was at 0 for ") ||
		!strings.HasSuffix(notes[0], ", holding back the server's bytes (the client did not read them)") {
		t.Errorf("notes of the client's connection: %q", notes)
	}
	if fmt.Sprint(added) != fmt.Sprint(names) {
		t.Errorf("decoded ADDED %v\ncreated %v", added, names)
	}
}

// zeroWindowFrom reports whether the pcap file tcpdump is writing holds a
// TCP packet from local port port that advertises a receive window of 0.
func zeroWindowFrom(file string, port int) bool {
	return capturedTCP(file, func(tcp *layers.TCP) bool {
		return int(tcp.SrcPort) == port && tcp.Window == 0 && !tcp.RST && !tcp.SYN
	})
}
