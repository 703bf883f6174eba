// Command kwatch-replay records watch traffic between real HTTP/2 and TLS
// implementations for kwatch's golden tests: net/http's server on loopback
// serves watch bodies with a flush per event, as kube-apiserver does, to
// net/http's client, while tcpdump captures the connection on -i any and
// -i lo. It writes DIR/NAME-any.pcap, DIR/NAME-lo.pcap and
// DIR/NAME.events.json: the events the client itself received, decoded
// with client-go's decoder (gzip members inflated first). A TLS scenario
// also writes DIR/NAME.keys.log, the client's key log (crypto/tls
// KeyLogWriter), and, when editcap is installed, DIR/NAME-keys-lo.pcapng:
// the -i lo capture with that key log inside (a Decryption Secrets Block).
//
// Scenarios:
//
//	h2c-watch   unencrypted HTTP/2 with prior knowledge (RFC 9113 §3.3):
//	            one watch: ADDED, a ~200 KB MODIFIED (many DATA frames),
//	            BOOKMARK, DELETED, then the server ends the stream
//	h2c-gzip    the same, Content-Encoding: gzip, a gzip member per flush
//	h2c-reset   two watches on one connection (streams 1 and 3): the
//	            server resets stream 3 after two events (RST_STREAM
//	            INTERNAL_ERROR), then shuts down gracefully (GOAWAY)
//	tls13-h2    h2c-gzip over TLS 1.3 (ALPN h2), as client-go talks to
//	            kube-apiserver
//	tls12-h1    h2c-watch's events over TLS 1.2
//	            (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384) and HTTP/1.1 chunks
//
// Needs root (tcpdump). Usage:
//
//	go run ./internal/e2e/cmd/kwatch-replay -scenario h2c-watch -dir testdata/captures
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/internal/testcert"
)

func main() {
	scenario := flag.String("scenario", "h2c-watch", "h2c-watch, h2c-gzip, h2c-reset, tls13-h2 or tls12-h1")
	dir := flag.String("dir", "testdata/captures", "folder for NAME-any.pcap, NAME-lo.pcap and NAME.events.json")
	name := flag.String("name", "", "file name prefix (default: the scenario)")
	port := flag.Int("port", 18443, "loopback port of the server")
	flag.Parse()
	if *name == "" {
		*name = *scenario
	}
	if err := run(*scenario, *dir, *name, *port); err != nil {
		fmt.Fprintf(os.Stderr, "kwatch-replay: %v\n", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "kwatch-replay: "+format+"\n", args...) }

// events returns the watch events of a scenario's watch, as kube-apiserver
// writes them for JSON (one line each). n names the objects.
func events(n string, big bool) [][]byte {
	cm := func(rv, data string) string {
		return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","uid":"6f1d0c5e-6c55-4a3f-9d7e-%012d","resourceVersion":%q,"creationTimestamp":"2026-12-01T12:00:00Z"},"data":{"k":%q}}`,
			n, len(n), rv, data)
	}
	blob := "v2"
	if big {
		var b strings.Builder
		for i := 0; b.Len() < 200*1024; i++ {
			fmt.Fprintf(&b, "line %05d: the quick brown fox jumps over the lazy dog\n", i)
		}
		blob = b.String()
	}
	line := func(typ, obj string) []byte {
		b, _ := json.Marshal(map[string]json.RawMessage{"type": json.RawMessage(fmt.Sprintf("%q", typ)), "object": json.RawMessage(obj)})
		// encoding/json sorts keys: "object" before "type"; the API
		// server writes "type" first.
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		_ = json.Unmarshal(b, &ev)
		out, _ := json.Marshal(ev)
		return append(out, '\n')
	}
	return [][]byte{
		line("ADDED", cm("101", "v1")),
		line("MODIFIED", cm("102", blob)),
		line("BOOKMARK", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"103","creationTimestamp":null}}`),
		line("DELETED", cm("104", blob)),
	}
}

// server serves the scenario's watches.
func server(scenario string, shutdown <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("fieldSelector")
		name = strings.TrimPrefix(name, "metadata.name=")
		evs := events(name, scenario != "h2c-reset")
		w.Header().Set("Content-Type", "application/json")
		gz := gzipped(scenario) && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
		if gz {
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i, ev := range evs {
			time.Sleep(100 * time.Millisecond)
			if scenario == "h2c-reset" && name == "second" && i == 2 {
				panic(http.ErrAbortHandler) // RST_STREAM INTERNAL_ERROR
			}
			if gz {
				// One complete member per flush, as kube-apiserver
				// writes a gzip'd watch.
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				_, _ = zw.Write(ev)
				_ = zw.Close()
				ev = b.Bytes()
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		if scenario == "h2c-reset" {
			<-shutdown // held open until the server shuts down
		}
	})
}

// gzipped reports whether a scenario's bodies are gzip'd.
func gzipped(scenario string) bool { return scenario == "h2c-gzip" || scenario == "tls13-h2" }

// tlsConfigs returns a TLS scenario's server and client configurations (nil
// for the h2c ones): a fresh self-signed certificate (ECDSA, or RSA for
// the ECDHE-RSA suite), and the client's keys logged to keyLog.
func tlsConfigs(scenario string, keyLog io.Writer) (server, client *tls.Config, err error) {
	var cert tls.Certificate
	switch scenario {
	case "tls13-h2":
		cert, err = testcert.New(testcert.ECDSA, "kwatch-replay")
	case "tls12-h1":
		cert, err = testcert.New(testcert.RSA, "kwatch-replay")
	default:
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}}
	client = &tls.Config{InsecureSkipVerify: true, KeyLogWriter: keyLog}
	if scenario == "tls12-h1" {
		server.MaxVersion = tls.VersionTLS12
		server.CipherSuites = []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}
	}
	return server, client, nil
}

func run(scenario, dir, name string, port int) error {
	switch scenario {
	case "h2c-watch", "h2c-gzip", "h2c-reset", "tls13-h2", "tls12-h1":
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		return errors.New("tcpdump is needed (apt-get install tcpdump)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var dumps []*exec.Cmd
	var logs []*bytes.Buffer
	for _, ifc := range []string{"any", "lo"} {
		out := filepath.Join(dir, name+"-"+ifc+".pcap")
		cmd := exec.Command(tcpdump, "-i", ifc, "-nn", "-U", "--immediate-mode", "-B", "65536", "-s", "0", "-Z", "root",
			"-w", out, fmt.Sprintf("tcp port %d", port))
		var log bytes.Buffer
		cmd.Stderr = &log
		if err := cmd.Start(); err != nil {
			return err
		}
		dumps, logs = append(dumps, cmd), append(logs, &log)
	}
	stop := func() {
		for _, d := range dumps {
			_ = d.Process.Signal(os.Interrupt)
			_ = d.Wait()
		}
	}
	defer stop()
	for i, l := range logs {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(l.String(), "listening on") {
			if time.Now().After(deadline) {
				return fmt.Errorf("tcpdump %d did not start: %s", i, l.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	shutdown := make(chan struct{})
	var keyLog bytes.Buffer
	serverTLS, clientTLS, err := tlsConfigs(scenario, &keyLog)
	if err != nil {
		return err
	}
	protos := new(http.Protocols)
	scheme := "https"
	switch scenario {
	case "tls13-h2":
		protos.SetHTTP2(true) // ALPN h2
	case "tls12-h1":
		protos.SetHTTP1(true)
	default:
		protos.SetUnencryptedHTTP2(true) // prior knowledge, no HTTP/1.1 upgrade
		scheme = "http"
	}
	srv := &http.Server{Handler: server(scenario, shutdown), Protocols: protos, TLSConfig: serverTLS}
	go func() {
		if serverTLS != nil {
			_ = srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig; ALPN from Protocols
			return
		}
		_ = srv.Serve(ln)
	}()

	tr := &http.Transport{Protocols: protos, DisableCompression: true, TLSClientConfig: clientTLS}
	client := &http.Client{Transport: tr}
	watches := []string{"first"}
	if scenario == "h2c-reset" {
		watches = append(watches, "second")
	}
	var (
		mu     sync.Mutex
		got    = map[string][]e2e.Event{}
		errs   []error
		wg     sync.WaitGroup
		opened sync.WaitGroup
	)
	for _, w := range watches {
		wg.Add(1)
		opened.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("%s://127.0.0.1:%d/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=100&fieldSelector=metadata.name%%3D%s", scheme, port, w)
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Accept", "application/json")
			if gzipped(scenario) {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			resp, err := client.Do(req)
			opened.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			body, _ := io.ReadAll(resp.Body) // a reset stream ends with an error: keep what came
			resp.Body.Close()
			if resp.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err == nil {
					body, _ = io.ReadAll(zr)
				}
			}
			evs, _ := e2e.DecodeWatchStream("application/json", bytes.NewReader(body))
			mu.Lock()
			got[w] = evs
			mu.Unlock()
		}()
		opened.Wait() // stream 1 first, then stream 3
		if scenario == "h2c-reset" {
			// Let the first watch's events all pass before the second
			// starts, so that the events file is in wire order.
			time.Sleep(700 * time.Millisecond)
		}
	}
	if scenario == "h2c-reset" {
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		go func() { time.Sleep(200 * time.Millisecond); close(shutdown) }()
		_ = srv.Shutdown(ctx) // GOAWAY, then the held stream ends
		cancel()
	}
	wg.Wait()
	tr.CloseIdleConnections() // the client closes its connection, as a process that exits does
	time.Sleep(100 * time.Millisecond)
	_ = srv.Close()
	time.Sleep(300 * time.Millisecond) // the last FIN/ACKs
	stop()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	var all []e2e.Event
	for _, w := range watches {
		logf("watch %s: %d events", w, len(got[w]))
		all = append(all, got[w]...)
	}
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, ev := range all {
		line, _ := json.Marshal(ev)
		b.WriteString("  ")
		b.Write(line)
		if i < len(all)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	if err := os.WriteFile(filepath.Join(dir, name+".events.json"), b.Bytes(), 0o644); err != nil {
		return err
	}
	if serverTLS == nil {
		return nil
	}
	keys := filepath.Join(dir, name+".keys.log")
	if err := os.WriteFile(keys, keyLog.Bytes(), 0o644); err != nil {
		return err
	}
	editcap, err := exec.LookPath("editcap")
	if err != nil {
		logf("editcap is not installed: no pcapng with the keys inside")
		return nil
	}
	out, err := exec.Command(editcap, "--inject-secrets", "tls,"+keys, filepath.Join(dir, name+"-lo.pcap"), filepath.Join(dir, name+"-keys-lo.pcapng")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("editcap: %v: %s", err, out)
	}
	return nil
}
