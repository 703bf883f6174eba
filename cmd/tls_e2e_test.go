package cmd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// loopbackN numbers the loopback source addresses tests take.
var loopbackN atomic.Int32

// sourceAddr returns a loopback address of this test's own (127.X.Y.Z, not
// 127.0.0.1), for a client to connect to the API server from: a capture
// filtered on it holds that client's connections alone, not those of the
// test's other clients or of anything else on the stack.
func sourceAddr() string {
	n := loopbackN.Add(1)
	pid := os.Getpid()
	return fmt.Sprintf("127.%d.%d.%d", 1+pid%200, 1+(pid/200)%250, 1+int(n)%250)
}

// apiServerAddr returns the API server's host:port from the stack's kubeconfig.
func apiServerAddr(t *testing.T, cfg *rest.Config) string {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Port() == "" {
		t.Fatalf("API server URL %q", cfg.Host)
	}
	return u.Host
}

// startTLSCapture starts tcpdump on lo for the TCP connections between src
// and the API server's address api, and returns a function that stops it
// and returns the capture; the marker is a connection from src (its
// handshake and close, about 300 bytes of the file).
func startTLSCapture(t *testing.T, api, src string) func() []byte {
	t.Helper()
	_, port, _ := net.SplitHostPort(api)
	return tcpdumpCapture(t, fmt.Sprintf("host %s and tcp port %s", src, port),
		dialMarker(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}, api))
}

// relayTo listens on a port of its own on 127.0.0.1 and copies each
// connection's bytes to and from a connection to addr as they come,
// unchanged, until either side closes: a client pointed at the relay talks
// TLS with addr's server itself (whose certificate names 127.0.0.1 whatever
// the port), and a capture filtered on the relay's port holds that
// client's connections alone. It stops with the test.
func relayTo(t *testing.T, addr string) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	keep := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			keep(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				keep(up)
				defer up.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				_ = c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}

// decodedWatch is what kwatch pcap decoded of one watch exchange.
type decodedWatch struct {
	target string
	events []string // TYPE NAME RV, bookmarks as "BOOKMARK initial-events-end" or left out
	frames int      // DATA frames that carried events
	chunks int      // chunks that carried events
	http2  bool
	gzip   bool
}

// decodeTLS runs kwatch pcap's decoder on a capture with a key log (nil:
// none, the keys are in the capture) and returns its watches by connection
// and exchange, the suites decrypted, and the problems.
func decodeTLS(t *testing.T, data []byte, keyFile string) (watches []*decodedWatch, suites []string, problems []string) {
	t.Helper()
	keys := keylog.New()
	if keyFile != "" {
		if err := keys.AddFile(keyFile); err != nil {
			t.Fatal(err)
		}
	}
	byKey := map[[2]int]*decodedWatch{}
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.ConnNote:
			if v.Kind == "tls-decrypted" {
				suites = append(suites, v.Suite)
			}
		case *record.Response:
			if v.Watch {
				w := &decodedWatch{http2: v.Conn.HTTP2, gzip: v.ContentEncoding == "gzip"}
				if v.Request != nil {
					w.target = v.Request.Target
				}
				byKey[[2]int{v.Conn.ID, v.Exchange}] = w
				watches = append(watches, w)
			}
		case *record.Event:
			w := byKey[[2]int{v.Conn.ID, v.Exchange}]
			if w == nil {
				t.Errorf("event %s %s outside a watch", v.Type, v.Name)
				return
			}
			w.frames += len(v.Frames)
			w.chunks += len(v.Chunks)
			switch {
			case v.InitialEventsEnd:
				w.events = append(w.events, "BOOKMARK initial-events-end")
			case v.Type != "BOOKMARK":
				w.events = append(w.events, v.Type+" "+v.Name+" "+v.ResourceVersion)
			}
		case *record.Problem:
			problems = append(problems, v.Location()+": "+v.Kind+": "+v.Detail)
		}
	})
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "tls.pcap", Keys: keys}, sink); err != nil {
		t.Fatal(err)
	}
	return watches, suites, problems
}

// TestPcapTLSClientGo captures, with tcpdump on the API server's TLS port, a
// client-go program talking straight to kube-apiserver: a ConfigMap
// informer (a streaming list, gzip'd) and a plain Watch sharing one HTTP/2
// connection, its TLS keys written by tls.Config.KeyLogWriter; once with
// TLS 1.3 and once forced to TLS 1.2. kwatch pcap --tls-keylog decodes
// exactly the events the informer's handlers and the Watch received, each
// with its DATA frames.
func TestPcapTLSClientGo(t *testing.T) {
	for _, c := range []struct {
		name  string
		max   uint16
		suite string
	}{
		{"TLS 1.3", tls.VersionTLS13, "TLS 1.3 TLS_AES_128_GCM_SHA256"},
		{"TLS 1.2", tls.VersionTLS12, "TLS 1.2 TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
	} {
		t.Run(c.name, func(t *testing.T) { testPcapTLSClientGo(t, c.max, c.suite) })
	}
}

func testPcapTLSClientGo(t *testing.T, maxVersion uint16, suite string) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	createConfigMaps(t, cs, ns, map[string]string{"k": strings.Repeat("v", 300)}, "pre-a", "pre-b", "pre-c")
	cfg := env.RESTConfig(t)
	api, src := apiServerAddr(t, cfg), sourceAddr()
	keyFile := filepath.Join(t.TempDir(), "keys.log")
	kf, err := os.Create(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.KeyLogWriter = kf
	tlsCfg.MaxVersion = maxVersion
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DialContext: dialer.DialContext, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	direct := rest.CopyConfig(cfg)
	direct.TLSClientConfig = rest.TLSClientConfig{}
	direct.Transport = tr
	client, err := kubernetes.NewForConfig(direct)
	if err != nil {
		t.Fatal(err)
	}

	capture := startTLSCapture(t, api, src)

	log, inf, stop := startConfigMapInformer(t, client, ns)
	// The plain Watch, from the informer's resourceVersion: changes only.
	rv := inf.LastSyncResourceVersion()
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var plain handlerLog
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type != watch.Bookmark {
				plain.add(string(ev.Type) + " " + cm.Name + " " + cm.ResourceVersion)
			}
		}
	}()
	changeConfigMaps(t, cs, ns)
	log.wait(t, 6)
	plain.wait(t, 3)
	w.Stop()
	<-done
	stop()
	tr.CloseIdleConnections()
	data := capture()

	watches, suites, problems := decodeTLS(t, data, keyFile)
	if len(problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(problems, "\n"))
	}
	if len(suites) != 1 || suites[0] != suite {
		t.Errorf("decrypted %v, want one connection of %s (HTTP/2 carries both watches)", suites, suite)
	}
	if len(watches) != 2 {
		t.Fatalf("%d watches decoded, want the informer's and the plain one", len(watches))
	}
	for _, dw := range watches {
		if !dw.http2 || dw.frames == 0 || dw.chunks != 0 {
			t.Errorf("watch %s: HTTP/2 %v, %d frames, %d chunks; want events with DATA frames", dw.target, dw.http2, dw.frames, dw.chunks)
		}
	}
	// The informer's streaming list: the initial adds as a set, the
	// initial-events-end bookmark, then the changes in order.
	il, pw := watches[0], watches[1]
	if !strings.Contains(il.target, "sendInitialEvents=true") {
		il, pw = pw, il
	}
	checkInformerEvents(t, il.events, log.list())
	if fmt.Sprint(pw.events) != fmt.Sprint(plain.list()) {
		t.Errorf("the plain watch decoded as %v\nits ResultChan gave %v", pw.events, plain.list())
	}
}

// TestPcapTLSCurl captures curl's watch straight to the API server, over
// HTTP/2 and over HTTP/1.1, with its keys in SSLKEYLOGFILE (OpenSSL's key
// log), and checks that kwatch pcap --tls-keylog decodes exactly the events
// curl received. The same capture with the keys injected into a pcapng by
// editcap, and with that Decryption Secrets Block moved between packets,
// decodes the same with no key log given.
func TestPcapTLSCurl(t *testing.T) {
	for _, proto := range []string{"--http2", "--http1.1"} {
		t.Run(proto, func(t *testing.T) { testPcapTLSCurl(t, proto) })
	}
}

func testPcapTLSCurl(t *testing.T, proto string) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps(ns)
	createConfigMaps(t, cs, ns, nil, "pre-a", "pre-b")
	cfg := env.RESTConfig(t)
	if cfg.BearerToken == "" {
		t.Skip("the stack's kubeconfig has no bearer token for curl")
	}
	api, src := apiServerAddr(t, cfg), sourceAddr()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.log")
	capture := startTLSCapture(t, api, src)
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "sendInitialEvents": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}}
	curl := startCurlWatch(t, "application/json", []string{"SSLKEYLOGFILE=" + keyFile}, "-sS", "-N", proto, "-k",
		"--interface", src, "-H", "Authorization: Bearer "+cfg.BearerToken, "-H", "Accept-Encoding: gzip",
		cfg.Host+"/api/v1/namespaces/"+ns+"/configmaps?"+q.Encode())
	curl.waitEvent("BOOKMARK", "") // pre-a, pre-b, then the initial-events-end bookmark
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	curl.waitEvent("DELETED", "later")
	curl.stop()
	var want []string
	for _, ev := range curl.received() {
		if ev.Type != "BOOKMARK" {
			want = append(want, ev.Type+" "+ev.Name+" "+ev.ResourceVersion)
		}
	}
	data := capture()

	check := func(what string, data []byte, keys string) {
		t.Helper()
		watches, suites, problems := decodeTLS(t, data, keys)
		if len(suites) != 1 || !strings.HasPrefix(suites[0], "TLS 1.3 ") {
			t.Errorf("%s: decrypted %v, want one TLS 1.3 connection", what, suites)
		}
		if len(watches) != 1 {
			t.Fatalf("%s: %d watches decoded, want 1; problems %v", what, len(watches), problems)
		}
		dw := watches[0]
		var got []string
		for _, e := range dw.events {
			if e != "BOOKMARK initial-events-end" {
				got = append(got, e)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: decoded %v\ncurl received %v", what, got, want)
		}
		if !dw.gzip || dw.http2 != (proto == "--http2") || (dw.http2 && dw.frames == 0) || (!dw.http2 && dw.chunks == 0) {
			t.Errorf("%s: gzip %v, HTTP/2 %v, %d frames, %d chunks", what, dw.gzip, dw.http2, dw.frames, dw.chunks)
		}
		// curl is killed in the middle of its watch: the end of the
		// exchange is all a problem may be about.
		for _, p := range problems {
			t.Errorf("%s: problem %s", what, p)
		}
	}
	check("with --tls-keylog", data, keyFile)

	editcap, err := exec.LookPath("editcap")
	if err != nil {
		t.Log("editcap is not installed (.ci/run installs tshark's tools): the pcapng with the keys inside is not tried")
		return
	}
	in, out := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "with-keys.pcapng")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(editcap, "--inject-secrets", "tls,"+keyFile, in, out).CombinedOutput(); err != nil {
		t.Fatalf("editcap: %v: %s", err, b)
	}
	ng, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	check("pcapng from editcap --inject-secrets", ng, "")
	check("pcapng with the Decryption Secrets Block between packets", moveSecretsBlock(t, ng, 4), "")
}

// moveSecretsBlock returns a pcapng (little-endian, one section, as
// editcap writes it) whose Decryption Secrets Blocks come after its first
// n packet blocks, where ecapture writes them, instead of before them.
func moveSecretsBlock(t *testing.T, ng []byte, n int) []byte {
	t.Helper()
	var head, secrets, packets [][]byte
	for p := ng; len(p) > 0; {
		if len(p) < 12 {
			t.Fatal("pcapng cut short")
		}
		typ, l := binary.LittleEndian.Uint32(p), int(binary.LittleEndian.Uint32(p[4:]))
		if l < 12 || l > len(p) {
			t.Fatalf("pcapng block of %d bytes", l)
		}
		b := p[:l]
		p = p[l:]
		switch typ {
		case 0x0A:
			secrets = append(secrets, b)
		case 0x06, 0x03:
			packets = append(packets, b)
		default:
			if len(packets) > 0 {
				packets = append(packets, b)
			} else {
				head = append(head, b)
			}
		}
	}
	if len(secrets) == 0 || len(packets) <= n {
		t.Fatalf("%d secrets blocks, %d packets", len(secrets), len(packets))
	}
	out := bytes.Join(head, nil)
	out = append(out, bytes.Join(packets[:n], nil)...)
	out = append(out, bytes.Join(secrets, nil)...)
	return append(out, bytes.Join(packets[n:], nil)...)
}

// TestPcapTLSPython captures Debian's python3-kubernetes watch loop straight
// to the API server (HTTP/1.1 over TLS, keys in SSLKEYLOGFILE) and checks
// that kwatch pcap --tls-keylog decodes exactly the events the client
// received, in order, with their chunks.
func TestPcapTLSPython(t *testing.T) {
	env := e2e.Cluster(t)
	needPython(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	createConfigMaps(t, cs, ns, nil, "pre-a", "pre-b")
	cfg := env.RESTConfig(t)
	if cfg.BearerToken == "" {
		t.Skip("the stack's kubeconfig has no bearer token for the Python client")
	}
	api, src := apiServerAddr(t, cfg), sourceAddr()
	keyFile := filepath.Join(t.TempDir(), "keys.log")
	capture := startTLSCapture(t, api, src)
	printed := runPythonWatch(t, cs, ns, []string{"SSLKEYLOGFILE=" + keyFile}, cfg.Host, ns, "4", cfg.BearerToken, src)
	data := capture()
	watches, suites, problems := decodeTLS(t, data, keyFile)
	if len(suites) != 1 || len(watches) != 1 {
		t.Fatalf("decrypted %v, %d watches; want one connection with one watch; problems %v", suites, len(watches), problems)
	}
	if dw := watches[0]; dw.http2 || dw.chunks == 0 {
		t.Errorf("HTTP/2 %v, %d chunks; want HTTP/1.1 chunks", dw.http2, dw.chunks)
	}
	if fmt.Sprint(watches[0].events) != fmt.Sprint(printed) {
		t.Errorf("decoded %v\nthe Python client received %v", watches[0].events, printed)
	}
	for _, p := range problems {
		t.Errorf("problem %s", p)
	}
}

// TestStreamRecordTLS: kwatch stream straight to the API server with
// --record FILE.pcapng records the TLS bytes as they travelled, with their
// keys in Decryption Secrets Blocks ahead of the records they decrypt, and
// --tls-keylog writes the same keys to a key log: kwatch pcap decodes the
// recording to the live session's events with no option, and TShark
// decrypts it with no key log of its own.
func TestStreamRecordTLS(t *testing.T) {
	for _, mode := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(strings.ReplaceAll(mode, "/", ""), func(t *testing.T) {
			env := e2e.Cluster(t)
			ns := env.Namespace(t)
			dir := t.TempDir()
			file, keyFile := filepath.Join(dir, "session.pcapng"), filepath.Join(dir, "keys.log")
			args := []string{"stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--record", file, "--tls-keylog", keyFile, "-o", "json"}
			var key func(ev map[string]any) string
			if mode == "HTTP/2" {
				args = append(args, "--http2")
				key = func(ev map[string]any) string {
					return fmt.Sprintf("%v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], ev["frames"])
				}
			} else {
				key = func(ev map[string]any) string {
					return fmt.Sprintf("%v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], ev["chunks"])
				}
			}
			s := startKwatch(t, args...)
			if mode == "HTTP/2" {
				writeAndCheckFrames(t, env, s, ns, "tls-h2")
			} else {
				writeAndCheck(t, env, s, ns, "tls-h1")
			}
			if code := s.stop(t); code != ExitOK {
				t.Fatalf("exit %d: %s", code, s.errOut.String())
			}
			rec := sameAsRecording(t, s, file, key)
			notes := ofRecord(rec.records(t), "note")
			decrypted := 0
			for _, n := range notes {
				if n["kind"] == "tls-decrypted" {
					decrypted++
				}
			}
			if decrypted == 0 {
				t.Errorf("kwatch pcap decrypted no connection of the recording: %v", notes)
			}
			for _, f := range []string{file, keyFile} {
				if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
				}
			}
			kl, err := os.ReadFile(keyFile)
			if err != nil || !bytes.Contains(kl, []byte("CLIENT_TRAFFIC_SECRET_0 ")) {
				t.Errorf("--tls-keylog wrote %q (%v); want TLS 1.3 traffic secrets", kl, err)
			}
			tshark, err := exec.LookPath("tshark")
			if err != nil {
				t.Log("tshark is not installed (.ci/run installs it): its decryption is not tried")
				return
			}
			_, port, _ := net.SplitHostPort(apiServerAddr(t, env.RESTConfig(t)))
			filter, field := "http.request", "http.request.uri"
			if mode == "HTTP/2" {
				filter, field = "http2.type == 1", "http2.headers.path"
			}
			out, err := exec.Command(tshark, "-r", file, "-d", "tcp.port=="+port+",tls", "-Y", filter, "-T", "fields", "-e", field).Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			if !strings.Contains(string(out), "/api/v1/namespaces/"+ns+"/configmaps?") {
				t.Errorf("TShark did not decrypt the watch request from the recording; it shows %q", out)
			}
		})
	}
}

// TestStreamTLSKeylogCapture: tcpdump captures the API server's port while
// kwatch stream watches straight to it with --tls-keylog; kwatch pcap
// --tls-keylog decrypts kwatch's watch connection from that capture and
// decodes the events the live session showed, with the same chunks. The
// capture also holds connections whose keys are not in the key log
// (kwatch's LIST, the test's own writes, anything else on the stack): they
// are said to be undecryptable, and are not this test's business.
func TestStreamTLSKeylogCapture(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	// kwatch connects through a relay of this test's own, so that the
	// capture holds its connections alone: on the API server's port it
	// held every other test's traffic too, and tcpdump dropped packets of
	// kwatch's when the machine was busy.
	relay := relayTo(t, apiServerAddr(t, env.RESTConfig(t)))
	keyFile := filepath.Join(t.TempDir(), "keys.log")
	capture := tcpdumpCapture(t, fmt.Sprintf("tcp port %d", relay.Port), dialMarker(&net.Dialer{}, relay.String()))
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--server", "https://"+relay.String(),
		"--tls-keylog", keyFile, "-o", "json")
	writeAndCheck(t, env, s, ns, "keylog")
	if code := s.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, s.errOut.String())
	}
	file := filepath.Join(t.TempDir(), "api.pcap")
	if err := os.WriteFile(file, capture(), 0o600); err != nil {
		t.Fatal(err)
	}
	key := func(ev map[string]any) string {
		return fmt.Sprintf("%v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], ev["chunks"])
	}
	// A bookmark the API server sent as kwatch stopped may be in the
	// capture and not shown live: only the initial-events-end one counts.
	stray := func(ev map[string]any) bool { return ev["type"] == "BOOKMARK" && ev["initialEventsEnd"] != true }
	var live []string
	for _, ev := range events(s.records(t), "") {
		if !stray(ev) {
			live = append(live, key(ev))
		}
	}
	recs, _, _ := pcapJSON(t, "--tls-keylog", keyFile, file)
	var decoded []string
	for _, ev := range events(recs, "") {
		if !stray(ev) && (strings.HasPrefix(fmt.Sprint(ev["namespace"]), ns) || ev["type"] == "BOOKMARK") {
			decoded = append(decoded, key(ev))
		}
	}
	t.Logf("%d events live, %d decoded from the capture", len(live), len(decoded))
	if len(live) < 3 || strings.Join(live, "\n") != strings.Join(decoded, "\n") {
		t.Errorf("live:\n%s\nfrom the capture:\n%s", strings.Join(live, "\n"), strings.Join(decoded, "\n"))
	}
	// Only the watch's connection is this test's: the capture stops
	// while others (kwatch's discovery on HTTP/2, anything else on the
	// stack) may be in the middle of a frame, or have no key.
	watchConn := map[any]bool{}
	for _, ev := range events(recs, "") {
		watchConn[ev["connection"]] = true
	}
	for _, p := range ofRecord(recs, "problem") {
		if watchConn[p["connection"]] {
			t.Errorf("problem on the watch's connection: %v", p)
		}
	}
}

// TestStreamTLSKeylogLateCapture: tcpdump starts after kwatch stream's
// watch connection to the API server opened (its handshake not captured),
// as a capture taken on a node while a client runs; kwatch stream writes
// the key log. kwatch pcap finds the connection's secrets by trying the key
// log's (no client random in the capture) and its events after the capture
// began equal those kwatch stream showed live, with their chunks (HTTP/1.1:
// joined inside the chunked body) or DATA frames (--http2: joined between
// frames), and the note says how the secrets were found.
func TestStreamTLSKeylogLateCapture(t *testing.T) {
	env := e2e.Cluster(t)
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			ns := env.Namespace(t)
			relay := relayTo(t, apiServerAddr(t, env.RESTConfig(t)))
			keyFile := filepath.Join(t.TempDir(), "keys.log")
			args := []string{"stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--server", "https://" + relay.String(),
				"--tls-keylog", keyFile, "-o", "json"}
			if http2 {
				args = append(args, "--http2")
			}
			s := startKwatch(t, args...)
			write := writeAndCheck
			if http2 {
				write = writeAndCheckFrames
			}
			write(t, env, s, ns, "before")
			// The watch is open, its handshake long done: capture now.
			capture := tcpdumpCapture(t, fmt.Sprintf("tcp port %d", relay.Port), dialMarker(&net.Dialer{}, relay.String()))
			write(t, env, s, ns, "after")
			if code := s.stop(t); code != ExitOK {
				t.Fatalf("exit %d: %s", code, s.errOut.String())
			}
			file := filepath.Join(t.TempDir(), "api.pcap")
			if err := os.WriteFile(file, capture(), 0o600); err != nil {
				t.Fatal(err)
			}
			carrier := "chunks"
			if http2 {
				carrier = "frames"
			}
			key := func(ev map[string]any) string {
				return fmt.Sprintf("%v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], len(ev[carrier].([]any)) > 0)
			}
			var live, decoded []string
			for _, ev := range events(s.records(t), "after") {
				live = append(live, key(ev))
			}
			recs, out, _ := pcapJSON(t, "--tls-keylog", keyFile, file)
			for _, ev := range events(recs, "after") {
				decoded = append(decoded, key(ev))
			}
			if len(live) != 3 || strings.Join(live, "\n") != strings.Join(decoded, "\n") {
				t.Errorf("live:\n%s\nfrom the capture that began after the handshake:\n%s\n%s", strings.Join(live, "\n"), strings.Join(decoded, "\n"), out)
			}
			found := false
			for _, n := range ofRecord(recs, "note") {
				if n["kind"] == "tls-decrypted" && strings.Contains(fmt.Sprint(n["message"]), "joined mid-connection") && strings.Contains(fmt.Sprint(n["message"]), "found by trying them") {
					found = true
				}
			}
			if !found {
				t.Errorf("no note of secrets found by trying:\n%s", out)
			}
		})
	}
}
