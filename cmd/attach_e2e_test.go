package cmd

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kwatch/kwatch/internal/e2e"
)

// needAttach skips where kwatch attach cannot run at all: not root, or a
// kernel without uprobes. Never here: CI runs as root on a kernel with BPF
// and uprobes, and these tests must run there.
func needAttach(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kwatch attach needs root (CAP_SYS_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE)")
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil {
		t.Skip("the kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe)")
	}
}

// buildWatcher builds internal/e2e/cmd/kwatch-watcher with extra go build
// flags into a folder of the test's own.
func buildWatcher(t *testing.T, flags ...string) string {
	t.Helper()
	return buildWatcherWith(t, nil, flags...)
}

// buildWatcherWith is buildWatcher with env added to go build's
// environment (GOTOOLCHAIN=go1.27.3: another Go release than kwatch's).
func buildWatcherWith(t *testing.T, env []string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kwatch-watcher")
	args := append([]string{"build", "-o", bin}, flags...)
	args = append(args, "../internal/e2e/cmd/kwatch-watcher")
	cmd := exec.Command("go", args...)
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// watcher is a running kwatch-watcher.
type watcher struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *syncBuffer
}

// startWatcher runs bin on namespace ns, with flags, and waits until it is
// ready (its informer synced, its Watch open).
func startWatcher(t *testing.T, env *e2e.Env, bin, ns string, flags ...string) *watcher {
	t.Helper()
	w := &watcher{out: &syncBuffer{}}
	w.cmd = exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig, "--namespace", ns}, flags...)...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.stop() })
	waitText(t, "kwatch-watcher ready", w.out, "ready\n")
	return w
}

// stop closes the watcher's stdin, which ends it.
func (w *watcher) stop() {
	w.stdin.Close()
	_ = w.cmd.Wait()
}

// waitText polls buf until it holds text, or fails after 60 s.
func waitText(t *testing.T, what string, buf *syncBuffer, text string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(buf.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%q); got:\n%s", what, text, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchedEvent is one watch event as a client or kwatch saw it.
type watchedEvent struct{ Type, Name, RV string }

func (e watchedEvent) String() string { return e.Type + " " + e.Name + " rv " + e.RV }

// waitEvents waits until each of sources has received n events, or fails
// after 60 s; it returns the events by source.
func (w *watcher) waitEvents(t *testing.T, n int, sources ...string) map[string][]watchedEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := w.clientEvents(t)
		if !slices.ContainsFunc(sources, func(s string) bool { return len(got[s]) < n }) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program's handlers got %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clientEvents returns the events kwatch-watcher received, by source
// ("informer", "watch").
func (w *watcher) clientEvents(t *testing.T) map[string][]watchedEvent {
	t.Helper()
	out := map[string][]watchedEvent{}
	sc := bufio.NewScanner(strings.NewReader(w.out.String()))
	for sc.Scan() {
		var l struct{ Source, Type, Name, ResourceVersion string }
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("kwatch-watcher line %q: %v", sc.Text(), err)
		}
		out[l.Source] = append(out[l.Source], watchedEvent{l.Type, l.Name, l.ResourceVersion})
	}
	return out
}

// kwatchEvents returns the ADDED, MODIFIED and DELETED events of namespace ns
// in kwatch's JSON records, by connection and exchange (one watch each),
// and checks that every one was carried by DATA frames when h2 is set.
func kwatchEvents(t *testing.T, recs []map[string]any, ns string, h2 bool) map[string][]watchedEvent {
	t.Helper()
	out := map[string][]watchedEvent{}
	for _, r := range recs {
		if r["record"] != "event" || r["namespace"] != ns {
			continue
		}
		typ, _ := r["type"].(string)
		if typ != "ADDED" && typ != "MODIFIED" && typ != "DELETED" {
			continue
		}
		if frames, _ := r["frames"].([]any); h2 && len(frames) == 0 {
			t.Errorf("event %s %v carried by no DATA frame", typ, r["name"])
		}
		key := fmt.Sprintf("%v #%v", r["connection"], r["exchange"])
		out[key] = append(out[key], watchedEvent{typ, fmt.Sprint(r["name"]), fmt.Sprint(r["resourceVersion"])})
	}
	return out
}

// sameWatches reports whether two sets of watches hold the same event
// sequences, whatever their names.
func sameWatches(a, b map[string][]watchedEvent) bool {
	seqs := func(m map[string][]watchedEvent) []string {
		var s []string
		for _, evs := range m {
			s = append(s, fmt.Sprint(evs))
		}
		slices.Sort(s)
		return s
	}
	return slices.Equal(seqs(a), seqs(b))
}

// holdsWatches reports whether the watches of got hold those of want, each
// as its own watch (got may have more: other clients' watches of the same
// objects, e.g. kube-controller-manager's, on the API server's side).
func holdsWatches(got, want map[string][]watchedEvent) bool {
	have := map[string]int{}
	for _, evs := range got {
		have[fmt.Sprint(evs)]++
	}
	for _, evs := range want {
		k := fmt.Sprint(evs)
		if have[k] == 0 {
			return false
		}
		have[k]--
	}
	return true
}

// churn creates, changes and deletes ConfigMap name in ns: three events.
func churn(t *testing.T, env *e2e.Env, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := env.Clientset(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"step": "1"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"step":"2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAttachExe attaches to a client-go program's executable before the
// program starts, the program writing no key log: kwatch's events of its
// informer's watch and of its plain Watch (HTTP/2 over TLS 1.3) equal
// those its handlers received, each carried by DATA frames. The program is
// built as Go builds it, stripped (-s -w: found by .gopclntab) and as PIE.
func TestAttachExe(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	for _, b := range []struct {
		name   string
		flags  []string
		method string
	}{
		{"plain", nil, "symbol table"},
		{"stripped", []string{"-ldflags=-s -w"}, ".gopclntab"},
		{"pie", []string{"-buildmode=pie", "-ldflags=-s -w"}, ".gopclntab"},
	} {
		t.Run(b.name, func(t *testing.T) {
			bin := buildWatcher(t, b.flags...)
			ns := env.Namespace(t)
			s := startKwatch(t, "attach", "--exe", bin, "-o", "json")
			waitText(t, "kwatch attached", s.errOut, "crypto/tls found by "+b.method)
			w := startWatcher(t, env, bin, ns)
			churn(t, env, ns, "attached")
			// Both watches of the program have their three events.
			want := w.waitEvents(t, 3, "informer", "watch")
			var got map[string][]watchedEvent
			s.waitFor(t, 60*time.Second, fmt.Sprintf("kwatch's events of both watches, as the program's: %v", want), func(recs []map[string]any) bool {
				got = kwatchEvents(t, recs, ns, true)
				return sameWatches(got, want)
			})
			w.stop()
			waitText(t, "the program's end", s.errOut, "exited")
			if code := s.stop(t); code != ExitOK && code != ExitProblems {
				t.Errorf("exit %d", code)
			}
			for _, r := range s.records(t) {
				if r["record"] == "note" && r["kind"] == "tls-decrypted" && !strings.Contains(fmt.Sprint(r["message"]), "kwatch-watcher (pid") {
					t.Errorf("decrypted with keys from another source: %v", r["message"])
				}
			}
			if !strings.Contains(s.errOut.String(), "TLS secrets taken: 4 from kwatch-watcher (pid") {
				t.Errorf("stderr says nothing of the secrets taken:\n%s", s.errOut.String())
			}
			// Started after attach: every handshake seen, so no probe
			// on its crypto/tls Read and Write.
			if strings.Contains(s.errOut.String(), "(*Conn).Read") {
				t.Errorf("a process started after attach got the connections probe:\n%s", s.errOut.String())
			}
		})
	}
}

// startStopped starts cmd stopped at its first instruction (ptrace: a
// traced child stops at exec), so that kwatch can attach to it by PID or
// by name before it opens a connection; resume lets it run. It locks the
// calling goroutine to its thread until resume (ptrace requests come from
// the tracer's thread).
func startStopped(t *testing.T, cmd *exec.Cmd) (resume func()) {
	t.Helper()
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		runtime.UnlockOSThread()
		t.Fatalf("%s did not stop at exec: %v, %v", cmd.Path, ws, err)
	}
	return func() {
		if err := syscall.PtraceDetach(cmd.Process.Pid); err != nil {
			t.Errorf("ptrace detach: %v", err)
		}
		runtime.UnlockOSThread()
	}
}

// TestAttachKubectlByName attaches by name to the stack's own kubectl (a
// stripped Kubernetes release build) running `kubectl get configmaps -w`:
// a Table watch over HTTP/2 and TLS. kwatch shows the rows kubectl printed.
func TestAttachKubectlByName(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	kubectl := filepath.Join(filepath.Dir(env.Kubeconfig), "bin", "kubectl")
	var out syncBuffer
	k := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "-n", ns, "get", "configmaps", "-w", "--output-watch-events")
	k.Stdout, k.Stderr = &out, &out
	resume := startStopped(t, k)
	s := startKwatch(t, "attach", "kubectl", "-o", "json")
	waitText(t, "kwatch attached", s.errOut, fmt.Sprintf("attached to kubectl (pid %d", k.Process.Pid))
	resume()
	t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
	// The churn follows kubectl's watch request, decrypted.
	s.waitFor(t, 60*time.Second, "kubectl's watch request", func(recs []map[string]any) bool {
		for _, r := range recs {
			if r["record"] == "request" && strings.Contains(fmt.Sprint(r["target"]), "watch=true") {
				return true
			}
		}
		return false
	})
	churn(t, env, ns, "by-name")
	waitText(t, "kubectl's DELETED row", &out, "DELETED")
	want := []watchedEvent{}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[1] == "by-name" {
			want = append(want, watchedEvent{Type: f[0], Name: f[1]})
		}
	}
	recs := s.waitFor(t, 60*time.Second, "kwatch's rows", func(recs []map[string]any) bool {
		n := 0
		for _, evs := range kwatchEvents(t, recs, ns, true) {
			for _, e := range evs {
				if e.Name == "by-name" {
					n++
				}
			}
		}
		return n >= len(want)
	})
	var got []watchedEvent
	for _, evs := range kwatchEvents(t, recs, ns, true) {
		for _, e := range evs {
			if e.Name == "by-name" {
				got = append(got, watchedEvent{Type: e.Type, Name: e.Name})
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("kwatch shows %v; kubectl printed %v\nkubectl:\n%s", got, want, out.String())
	}
}

// curlTLSWatch runs curl (HTTP/1.1 over TLS, OpenSSL: no Go, no uprobe of its
// own) watching ConfigMaps in ns straight on the API server, and returns
// its output, and a function that stops it.
func curlTLSWatch(t *testing.T, env *e2e.Env, ns string) (*syncBuffer, func()) {
	t.Helper()
	cfg := env.RESTConfig(t)
	var out syncBuffer
	c := exec.Command("curl", "-sk", "-N", "--http1.1", "-H", "Authorization: Bearer "+cfg.BearerToken,
		cfg.Host+"/api/v1/namespaces/"+ns+"/configmaps?watch=1")
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() { _ = c.Process.Kill(); _ = c.Wait() }
	t.Cleanup(stop)
	return &out, stop
}

// curlEvents parses the watch events curl printed.
func curlEvents(t *testing.T, out string) []watchedEvent {
	t.Helper()
	var evs []watchedEvent
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var ev struct {
			Type   string
			Object corev1.ConfigMap
		}
		if err := dec.Decode(&ev); err != nil {
			break // a line still being written
		}
		evs = append(evs, watchedEvent{ev.Type, ev.Object.Name, ev.Object.ResourceVersion})
	}
	return evs
}

// TestAttachAPIServer attaches to kube-apiserver itself (a stripped
// Kubernetes build; the server side of every handshake gives its secrets)
// while curl (HTTP/1.1 over TLS) and the client-go program (HTTP/2) watch:
// kwatch shows both clients' events, each on its own connection, noted as
// served by kube-apiserver.
func TestAttachAPIServer(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := buildWatcher(t)
	s := startKwatch(t, "attach", "kube-apiserver", "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kube-apiserver (pid")
	curlOut, stopCurl := curlTLSWatch(t, env, ns)
	w := startWatcher(t, env, bin, ns)
	// curl's watch is open once kwatch has seen its response.
	s.waitFor(t, 60*time.Second, "curl's watch response", func(recs []map[string]any) bool {
		for _, r := range recs {
			if r["record"] == "response" && r["proto"] == "HTTP/1.1" && r["watch"] == true {
				return true
			}
		}
		return false
	})
	churn(t, env, ns, "served")
	deadline := time.Now().Add(60 * time.Second)
	for len(curlEvents(t, curlOut.String())) < 3 || len(w.clientEvents(t)["watch"]) < 3 || len(w.clientEvents(t)["informer"]) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the clients got: curl %v, program %v", curlEvents(t, curlOut.String()), w.clientEvents(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopCurl()
	want := w.clientEvents(t)
	want["curl"] = curlEvents(t, curlOut.String())
	var got map[string][]watchedEvent
	recs := s.waitFor(t, 60*time.Second, fmt.Sprintf("kwatch's events of the three watches, as the clients': %v", want), func(recs []map[string]any) bool {
		got = kwatchEvents(t, recs, ns, false)
		return holdsWatches(got, want)
	})
	// Only the clients' watches count below: those of connections open
	// before attach (kube-controller-manager's, joined) may be there too.
	before := map[string]bool{}
	for _, r := range recs {
		if r["record"] == "note" && r["kind"] == "process" && strings.Contains(fmt.Sprint(r["message"]), "open before kwatch attached") {
			before[fmt.Sprint(r["connection"])] = true
		}
	}
	for k := range got {
		if before[strings.Split(k, " #")[0]] {
			delete(got, k)
		}
	}
	if !sameWatches(got, want) {
		t.Errorf("the watches of connections opened after attach: %v, want the clients' %v", got, want)
	}
	// curl's watch and the program's two are on two connections, each
	// noted as served by kube-apiserver.
	conns := map[string]bool{}
	for k := range got {
		conns[strings.Split(k, " #")[0]] = true
	}
	if len(conns) != 2 {
		t.Errorf("the watches are on %d connections, want 2 (curl's, the program's): %v", len(conns), got)
	}
	for c := range conns {
		noted := false
		for _, r := range recs {
			if r["record"] == "note" && r["kind"] == "process" && r["connection"] == c {
				noted = strings.Contains(fmt.Sprint(r["message"]), "server kube-apiserver (pid")
			}
		}
		if !noted {
			t.Errorf("connection %s has no note of kube-apiserver as its server", c)
		}
	}
}

// TestAttachRecord records an attach session (--record): TShark decrypts
// the file with no key log of its own (the secrets are in it) and lists
// the watch's DATA frames, and kwatch pcap decodes the same events from it
// as kwatch attach showed live.
func TestAttachRecord(t *testing.T) {
	needAttach(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Fatal("tshark is needed (apt-get install tshark)")
	}
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := buildWatcher(t)
	file := filepath.Join(t.TempDir(), "session.pcapng")
	s := startKwatch(t, "attach", "--exe", bin, "--record", file, "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to every process of")
	// Its handshakes over net.Pipe first: secrets of connections the
	// capture cannot hold, which must stay out of the key store and the
	// recording.
	pipes := filepath.Join(t.TempDir(), "pipe-randoms")
	w := startWatcher(t, env, bin, ns, "--pipe-handshakes", pipes)
	churn(t, env, ns, "recorded")
	var live map[string][]watchedEvent
	s.waitFor(t, 60*time.Second, "kwatch's events of both watches", func(recs []map[string]any) bool {
		live = kwatchEvents(t, recs, ns, true)
		n := 0
		for _, evs := range live {
			n += len(evs)
		}
		return n == 6
	})
	w.stop()
	waitText(t, "the program's end", s.errOut, "exited")
	s.stop(t)
	// 50 handshakes, 8 secrets each (4 a side, one process): not kept.
	waitText(t, "the summary", s.errOut, "; 400 of them for connections not captured, not kept")
	rec, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	randoms, err := os.ReadFile(pipes)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range strings.Fields(string(randoms)) {
		if bytes.Contains(rec, []byte(r)) {
			t.Fatalf("the recording holds a secret of handshake %s over net.Pipe, which it does not hold", r)
		}
	}

	recs, _, _ := pcapJSON(t, file)
	if got := kwatchEvents(t, recs, ns, true); !sameWatches(got, live) {
		t.Errorf("kwatch pcap of the recording: %v; kwatch attach showed %v", got, live)
	}
	// The recording holds the program's connections only: not the
	// test's own, which made the changes; and names their processes as
	// kwatch attach did.
	liveConns := map[any]bool{}
	processes := func(recs []map[string]any) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			if r["record"] == "note" && r["kind"] == "process" {
				m[fmt.Sprint(r["connection"])] = fmt.Sprint(r["message"], " ", r["processes"])
			}
		}
		return m
	}
	for _, r := range s.records(t) {
		if r["record"] == "connection" {
			liveConns[r["connection"]] = true
		}
	}
	for _, r := range recs {
		if r["record"] == "connection" && !liveConns[r["connection"]] {
			t.Errorf("the recording holds connection %v, which is not the program's", r["connection"])
		}
	}
	if live, read := processes(s.records(t)), processes(recs); len(live) == 0 || !maps.Equal(live, read) {
		t.Errorf("kwatch pcap of the recording names the connections' processes\n%v\nkwatch attach named\n%v", read, live)
	}
	ts, err := exec.Command("tshark", "-r", file, "-Y", "http2.type == 0").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, ts)
	}
	if n := strings.Count(string(ts), "DATA"); n < 6 {
		t.Errorf("tshark lists %d DATA frames of the recording, want 6 or more (decrypted with its secrets):\n%s", n, ts)
	}
}

// TestPcapInterface captures live with kwatch pcap -i lo --port <proxy
// port> while curl watches through kubectl proxy: kwatch shows the events
// curl received.
func TestPcapInterface(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	u, err := url.Parse(env.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	s := startKwatch(t, "pcap", "-i", "lo", "--port", u.Port(), "-o", "json", "--all-http")
	// The capture is open once kwatch sees a request of the test's own.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(env.ProxyURL + "/healthz"); err == nil {
			resp.Body.Close()
		}
		if strings.Contains(s.out.String(), `"target":"/healthz"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kwatch pcap -i lo saw no connection to %s:\n%s", u.Host, s.errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out syncBuffer
	c := exec.Command("curl", "-s", "-N", env.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps?watch=1")
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	s.waitFor(t, 60*time.Second, "curl's watch response", func(recs []map[string]any) bool {
		for _, r := range recs {
			if r["record"] == "response" && r["watch"] == true {
				return true
			}
		}
		return false
	})
	churn(t, env, ns, "captured")
	for len(curlEvents(t, out.String())) < 3 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("curl got %v", curlEvents(t, out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := map[string][]watchedEvent{"curl": curlEvents(t, out.String())}
	var got map[string][]watchedEvent
	s.waitFor(t, 60*time.Second, fmt.Sprintf("kwatch's events, as curl's: %v", want), func(recs []map[string]any) bool {
		got = kwatchEvents(t, recs, ns, false)
		return sameWatches(got, want)
	})
	for _, r := range s.records(t) {
		if r["record"] == "event" && r["namespace"] == ns && len(r["chunks"].([]any)) == 0 {
			t.Errorf("event %v %v: no chunk", r["type"], r["name"])
		}
	}
}

// TestAttachUnprivileged runs kwatch attach and kwatch pcap -i as the user
// nobody (setpriv): each says in one line what it lacks, and exits 2.
func TestAttachUnprivileged(t *testing.T) {
	needAttach(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv is needed (util-linux)")
	}
	dir, err := os.MkdirTemp("", "kwatch-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kwatch")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attach", "1"}, "kwatch attach needs root: it loads a BPF program, places uprobes, opens packet sockets and reads other processes' /proc files; this process runs as uid 65534"},
		{[]string{"pcap", "-i", "lo"}, "-i lo: not permitted to capture packets: a packet socket needs CAP_NET_RAW (run as root)"},
	} {
		c := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", bin}, tc.args...)...)
		var stdout, stderr strings.Builder
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != ExitUsage || stderr.String() != "kwatch: "+tc.want+"\n" || stdout.Len() != 0 {
			t.Errorf("kwatch %s as nobody: exit %d, stdout %q, stderr %q; want exit 2 and one line %q",
				strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), "kwatch: "+tc.want)
		}
	}
}

// TestAttachOpenedBefore attaches by PID to a client-go program whose
// connections were opened before: their handshakes are gone, and kwatch
// reads each connection's TLS state from the process's memory when it next
// uses it. Over HTTP/2 (client-go's default: one connection, joined between
// its frames) the events of both watches after attach equal those the
// handlers received, with their DATA frames; over HTTP/1.1 with JSON
// (-http1) those of the plain Watch. The program is built as Go builds it
// (DWARF gives the layout), stripped (its type descriptors give it), and
// stripped by another Go release than kwatch's (go1.27.3, whose
// crypto/tls.Conn has a field more), the latter also over TLS 1.2 (where
// the master secret and randoms are read from the closure crypto/tls
// keeps for ExportKeyingMaterial, at the offsets kwatch knows for that
// release).
func TestAttachOpenedBefore(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	for _, b := range []struct {
		name  string
		env   []string
		flags []string
		http2 bool
		tls12 bool
		// runFor is how long the program runs before kwatch attaches.
		runFor time.Duration
	}{
		{"plain", nil, nil, false, false, 0},
		{"stripped", nil, []string{"-ldflags=-s -w"}, false, false, 0},
		{"http2", nil, nil, true, false, 30 * time.Second}, // as a controller that has been running
		{"http2-stripped", nil, []string{"-ldflags=-s -w"}, true, false, 0},
		{"http2-go1.27-stripped", []string{"GOTOOLCHAIN=go1.27.3"}, []string{"-ldflags=-s -w"}, true, false, 0},
		{"http2-go1.27-stripped-tls12", []string{"GOTOOLCHAIN=go1.27.3"}, []string{"-ldflags=-s -w"}, true, true, 0},
	} {
		t.Run(b.name, func(t *testing.T) {
			bin := buildWatcherWith(t, b.env, b.flags...)
			ns := env.Namespace(t)
			var flags []string
			if !b.http2 {
				flags = append(flags, "--http1")
			}
			if b.tls12 {
				flags = append(flags, "-tls12")
			}
			w := startWatcher(t, env, bin, ns, flags...)
			time.Sleep(b.runFor) // not a bound on anything: the program's age at attach
			s := startKwatch(t, "attach", fmt.Sprint(w.cmd.Process.Pid), "-o", "json")
			waitText(t, "kwatch attached", s.errOut, "attached to kwatch-watcher (pid")
			churn(t, env, ns, "before")
			w.waitEvents(t, 3, "watch", "informer")
			// Both watches' events, with their DATA frames or chunks:
			// over HTTP/2 the streams of the connection joined between
			// frames; over HTTP/1.1 each watch's connection joined
			// inside its chunked body, the plain Watch's JSON and the
			// informer's gzip'd watch-list (a member per chunk).
			var recs []map[string]any
			want := w.clientEvents(t)
			recs = s.waitFor(t, 60*time.Second, fmt.Sprintf("both watches' events, as the handlers': %v", want), func(recs []map[string]any) bool {
				return sameWatches(kwatchEvents(t, recs, ns, b.http2), want)
			})
			for _, r := range recs {
				if chunks, _ := r["chunks"].([]any); !b.http2 && r["record"] == "event" && r["namespace"] == ns && len(chunks) == 0 {
					t.Errorf("event %v %v: carried by no chunk", r["type"], r["name"])
				}
			}
			joined := 0
			version := "TLS 1.3"
			if b.tls12 {
				version = "TLS 1.2"
			}
			for _, r := range recs {
				if msg := fmt.Sprint(r["message"]); r["record"] == "note" && r["kind"] == "tls-decrypted" && strings.Contains(msg, "joined mid-connection") &&
					strings.Contains(msg, "the memory of kwatch-watcher (pid") {
					joined++
					if !strings.HasPrefix(msg, version) {
						t.Errorf("a connection joined: %q, want %s", msg, version)
					}
				}
			}
			if joined == 0 {
				t.Errorf("no connection noted as joined mid-connection with the state read from the program's memory")
			}
			// The probes on crypto/tls's Read and Write were placed for
			// the connections open at attach, and go once each of them
			// is settled (read, closed, or not crypto/tls's).
			waitText(t, "the connections probe placed", s.errOut, "open at attach: the TLS state of each is read from its memory at its next use")
			if b.http2 {
				waitText(t, "the connections probe removed", s.errOut, "settled: the probes on crypto/tls's (*Conn).Read and Write are removed")
			}
		})
	}
}

// TestAttachControllerManager attaches to the stack's kube-controller-manager
// (a stripped Kubernetes build, running since make cluster-up: its one
// HTTP/2 connection to the API server, with dozens of informers on it, was
// opened long before): ConfigMap changes made after attach are on it, as
// the garbage collector's informer receives them, decrypted with the state
// read from its memory and joined between its HTTP/2 frames.
func TestAttachControllerManager(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	kcm, err := env.ControllerManager()
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	s := startKwatch(t, "attach", fmt.Sprint(kcm.PID), "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kube-controller-manager (pid")
	churn(t, env, ns, "controlled")
	want := []watchedEvent{{"ADDED", "controlled", ""}, {"MODIFIED", "controlled", ""}, {"DELETED", "controlled", ""}}
	var got [][]watchedEvent
	recs := s.waitFor(t, 60*time.Second, fmt.Sprintf("the changes on kube-controller-manager's connection: %v", want), func(recs []map[string]any) bool {
		got = nil
		for _, evs := range kwatchEvents(t, recs, ns, true) {
			var mine []watchedEvent
			for _, e := range evs {
				if e.Name == "controlled" {
					mine = append(mine, watchedEvent{e.Type, e.Name, ""})
				}
			}
			got = append(got, mine)
			// An informer of ConfigMaps in kube-controller-manager
			// (the garbage collector's) has the three, in order.
			if slices.Equal(mine, want) {
				return true
			}
		}
		return false
	})
	joined := false
	for _, r := range recs {
		joined = joined || r["record"] == "note" && r["kind"] == "tls-decrypted" &&
			strings.Contains(fmt.Sprint(r["message"]), "joined mid-connection") && strings.Contains(fmt.Sprint(r["message"]), "the memory of kube-controller-manager")
	}
	if !joined {
		t.Error("kube-controller-manager's connection is not noted as joined with the state read from its memory")
	}
}

// TestAttachJoinedKubectl attaches by PID to kubectl while `kubectl get
// configmaps -w` has been watching for a while (its HTTP/2 connection to
// the API server opened before, TLS 1.3), then ConfigMaps are created,
// changed and deleted: kwatch shows the changes made after attach as
// kubectl printed them. The stack's own kubectl (a stripped Kubernetes
// release build of kwatch's Go release) prints Table rows; the Google
// Cloud SDK's kubectl releases built by Go 1.22, 1.23 and 1.24 (stripped,
// with no .go.module: their module data found by its pointer to the
// function table; the Go 1.22 one also as a copy with no section headers
// at all) print `-o json --output-watch-events`, whose events kwatch's
// must equal, resourceVersion included.
func TestAttachJoinedKubectl(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	type kubectl struct {
		name, path string
		noSections bool
	}
	kubectls := []kubectl{{"stack", filepath.Join(filepath.Dir(env.Kubeconfig), "bin", "kubectl"), false}}
	for _, release := range []string{"go1.22", "go1.23", "go1.24"} {
		path, version := gcloudKubectl(t, release)
		kubectls = append(kubectls, kubectl{filepath.Base(path) + "-" + version, path, false})
		if release == "go1.22" {
			kubectls = append(kubectls, kubectl{filepath.Base(path) + "-" + version + "-no-section-headers", path, true})
		}
	}
	for _, kc := range kubectls {
		t.Run(kc.name, func(t *testing.T) {
			if kc.noSections {
				kc.path = withoutSections(t, kc.path)
			}
			ns := env.Namespace(t)
			table := kc.name == "stack"
			args := []string{"--kubeconfig", env.Kubeconfig, "-n", ns, "get", "configmaps", "-w", "--output-watch-events"}
			if !table {
				args = append(args, "-o", "json")
			}
			k, out, errOut := startKubectlWatch(t, env, ns, kc.path, args...)
			s := startKwatch(t, "attach", fmt.Sprint(k.Process.Pid), "-o", "json")
			waitText(t, "kwatch attached", s.errOut, fmt.Sprintf("(pid %d, ", k.Process.Pid))
			churn(t, env, ns, "later")
			var want []watchedEvent
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if table {
					want = kubectlRows(out.String(), "later")
				} else {
					want = kubectlJSON(out.String(), "later")
				}
				if len(want) > 0 && want[len(want)-1].Type == "DELETED" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("kubectl printed no DELETED event of later:\n%s\n%s", out.String(), errOut.String())
				}
			}
			var got []watchedEvent
			recs := s.waitFor(t, 60*time.Second, fmt.Sprintf("kwatch's events, as kubectl's: %v", want), func(recs []map[string]any) bool {
				got = nil
				for _, evs := range kwatchEvents(t, recs, ns, true) {
					for _, e := range evs {
						if e.Name == "later" {
							if table {
								e.RV = "" // the rows do not say it
							}
							got = append(got, e)
						}
					}
				}
				return slices.Equal(got, want)
			})
			joined := false
			for _, r := range recs {
				msg := fmt.Sprint(r["message"])
				joined = joined || r["record"] == "note" && r["kind"] == "tls-decrypted" && strings.Contains(msg, "joined mid-connection") &&
					strings.Contains(msg, fmt.Sprintf("the memory of %s (pid %d)", filepath.Base(kc.path), k.Process.Pid))
			}
			if !joined {
				t.Errorf("kubectl's connection is not noted as joined with the state read from its memory:\n%s", s.errOut.String())
			}
		})
	}
}

// TestAttachJoinedQuiet attaches to kubectl (the Google Cloud SDK's
// kubectl.1.30) while `kubectl get configmaps -w` has been watching, then
// makes ONE change: kwatch shows its event with nothing else happening on
// the connection (no second change, no more frames to make a chain of):
// the record that carried it is enough to find the server's frames. No
// timing is asserted: the test waits for the event's line, and kubectl's
// own output says it got it.
func TestAttachJoinedQuiet(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	kc := "/usr/lib/google-cloud-sdk/bin/kubectl.1.30"
	if _, err := os.Stat(kc); err != nil {
		path, _ := gcloudKubectl(t, "go1.22")
		kc = filepath.Join(filepath.Dir(path), "kubectl.1.30")
	}
	ns := env.Namespace(t)
	k, out, _ := startKubectlWatch(t, env, ns, kc, "--kubeconfig", env.Kubeconfig, "-n", ns, "get", "configmaps", "-w", "--output-watch-events", "-o", "json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := env.Clientset(t)
	s := startKwatch(t, "attach", fmt.Sprint(k.Process.Pid))
	waitText(t, "kwatch attached", s.errOut, fmt.Sprintf("(pid %d, ", k.Process.Pid))
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitText(t, "kubectl's event of the one change", out, `"only"`)
	waitText(t, "kwatch's line of the one change", s.out, "ADDED     ConfigMap "+ns+"/only")
	// Detached with kubectl's watch open: said so, not as a capture's
	// end; the count at attach and the closing count say what they
	// count; bytes skipped before a first frame are no warning, so
	// the exit status is 0.
	code := s.stop(t)
	for _, want := range []string{"kwatch detached (the connection was still open)", "kwatch detached with the connection still open"} {
		if !strings.Contains(s.out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, s.out.String())
		}
	}
	if strings.Contains(s.out.String(), "capture ended") {
		t.Errorf("output says a capture ended:\n%s", s.out.String())
	}
	if !strings.Contains(s.errOut.String(), "TCP connection open at attach: ") || !regexp.MustCompile(`; ([1-9][0-9]* of the [1-9][0-9]* TCP connections|the TCP connection) open at attach carried packets since`).MatchString(s.errOut.String()) {
		t.Errorf("the counts of connections open at attach:\n%s", s.errOut.String())
	}
	if code != 0 {
		t.Errorf("exit status %d; stdout:\n%s\nstderr:\n%s", code, s.out.String(), s.errOut.String())
	}
}

// withoutSections writes a copy of the executable at path, of the same
// name, in a folder of the test's own, with no section headers (e_shoff,
// e_shnum and e_shstrndx 0): only its program headers say what is where.
func withoutSections(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[0x28:0x30])
	clear(b[0x3c:0x40])
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlRows returns the Table rows of kubectl get -w --output-watch-events
// (EVENT NAME DATA AGE) of the object name, as events without a
// resourceVersion.
func kubectlRows(out, name string) []watchedEvent {
	var evs []watchedEvent
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[1] == name {
			evs = append(evs, watchedEvent{Type: f[0], Name: f[1]})
		}
	}
	return evs
}

// kubectlJSON returns the events of the object name that kubectl get -w
// -o json --output-watch-events printed (one JSON object per event: type,
// object).
func kubectlJSON(out, name string) []watchedEvent {
	var evs []watchedEvent
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var ev struct {
			Type   string
			Object metav1.PartialObjectMetadata
		}
		if err := dec.Decode(&ev); err != nil {
			return evs // the end, or an event still being written
		}
		if ev.Object.Name == name {
			evs = append(evs, watchedEvent{ev.Type, ev.Object.Name, ev.Object.ResourceVersion})
		}
	}
}

// gcloudKubectl returns a kubectl release of the Google Cloud SDK built by
// Go release (go1.22: its build information says go1.22.x), and the Go
// version that built it: the SDK's folder is the one `kubectl` on PATH
// resolves to, whose kubectl.1.NN files are Kubernetes releases as their
// release pipeline built them (stripped, with almost no section headers).
// A machine without them fails the test, saying what to install.
func gcloudKubectl(t *testing.T, release string) (string, string) {
	t.Helper()
	const install = "kwatch attach's tests run the Google Cloud SDK's kubectl releases (kubectl.1.27 … kubectl.1.33): install the Debian package kubectl from Google Cloud's apt repository (deb https://packages.cloud.google.com/apt cloud-sdk main), or gcloud components install kubectl"
	k, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("no kubectl on PATH: %s", install)
	}
	if k, err = filepath.EvalSymlinks(k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(k), "kubectl.1.*"))
	if len(files) == 0 {
		t.Fatalf("%s has no kubectl.1.NN beside it: %s", k, install)
	}
	var seen []string
	for _, f := range files {
		bi, err := buildinfo.ReadFile(f)
		if err != nil {
			continue
		}
		seen = append(seen, filepath.Base(f)+" "+bi.GoVersion)
		if strings.HasPrefix(bi.GoVersion, release+".") {
			return f, bi.GoVersion
		}
	}
	t.Fatalf("none of the SDK's kubectl releases was built by %s (%s): %s", release, strings.Join(seen, ", "), install)
	return "", ""
}

// TestAttachJoinedAPIServer attaches to kube-apiserver while the client-go
// program's watches are open already: the server side's state of that
// connection is read from kube-apiserver's memory, and both watches' events
// after attach equal the handlers'.
func TestAttachJoinedAPIServer(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := buildWatcher(t)
	w := startWatcher(t, env, bin, ns)
	s := startKwatch(t, "attach", "kube-apiserver", "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kube-apiserver (pid")
	churn(t, env, ns, "served-joined")
	w.waitEvents(t, 3, "watch", "informer")
	want := w.clientEvents(t)
	var got map[string][]watchedEvent
	s.waitFor(t, 60*time.Second, fmt.Sprintf("both watches' events, as the handlers': %v", want), func(recs []map[string]any) bool {
		got = kwatchEvents(t, recs, ns, true)
		return holdsWatches(got, want)
	})
}

// TestAttachRewatch: the client-go program's HTTP/2 connection was opened
// before attach, and its plain Watch is opened again after (a new stream):
// its events equal the handler's (and its HEADERS decode as far as HPACK
// allows, when its request reaches the HTTP/2 follower first: logged).
func TestAttachRewatch(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := buildWatcher(t)
	w := startWatcher(t, env, bin, ns)
	s := startKwatch(t, "attach", fmt.Sprint(w.cmd.Process.Pid), "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kwatch-watcher (pid")
	if _, err := io.WriteString(w.stdin, "rewatch\n"); err != nil {
		t.Fatal(err)
	}
	waitText(t, "the program's new watch", w.out, "rewatched\n")
	churn(t, env, ns, "rewatched")
	w.waitEvents(t, 3, "rewatch")
	want := w.clientEvents(t)["rewatch"]
	recs := s.waitFor(t, 60*time.Second, fmt.Sprintf("the new watch's events, as its handler's: %v", want), func(recs []map[string]any) bool {
		for _, evs := range kwatchEvents(t, recs, ns, true) {
			if slices.Equal(evs, want) {
				return true
			}
		}
		return false
	})
	// Its request, on the connection joined mid-way: its HEADERS decode
	// as far as HPACK allows. Its path is known when it is a new literal;
	// the same path as the first watch's (no change in between) is a
	// reference to an entry from before the join, said unknown.
	// The new watch's stream is the newest with the events (the
	// informer's, opened before, has them too).
	var exchange float64
	for _, r := range recs {
		if e, ok := r["exchange"].(float64); ok && r["record"] == "event" && r["namespace"] == ns && r["name"] == "rewatched" {
			exchange = max(exchange, e)
		}
	}
	var req map[string]any
	for deadline := time.Now().Add(10 * time.Second); req == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, r := range s.records(t) {
			if r["record"] == "request" && r["exchange"] == exchange {
				req = r
			}
		}
	}
	switch {
	case req == nil:
		t.Logf("no request of the new watch's stream %v (its HEADERS came before the join)", exchange)
	case req["target"] == "" || req["target"] == nil:
		if u, _ := req["unknownFields"].([]any); len(u) == 0 {
			t.Errorf("the new watch's request has no path and says no field unknown: %v", req)
		}
	case !strings.Contains(fmt.Sprint(req["target"]), "/namespaces/"+ns+"/configmaps?"):
		t.Errorf("the new watch's request is for %v", req["target"])
	}
}

// TestAttachRecordJoined: kwatch attach --record to a client-go program
// whose connection was open before (joined with the state read from its
// memory): the recording carries that state (a kwatch-joined comment line
// in a Decryption Secrets Block, since a key log names connections by a
// client random such a connection never showed), and kwatch pcap of the
// file decodes the same events, HTTP/2 joined between frames, noted as
// read from the recording.
func TestAttachRecordJoined(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	w := startWatcher(t, env, buildWatcher(t), ns)
	file := filepath.Join(t.TempDir(), "session.pcapng")
	s := startKwatch(t, "attach", fmt.Sprint(w.cmd.Process.Pid), "--record", file, "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kwatch-watcher (pid")
	churn(t, env, ns, "joined")
	w.waitEvents(t, 3, "watch", "informer")
	want := w.clientEvents(t)
	var live map[string][]watchedEvent
	s.waitFor(t, 60*time.Second, fmt.Sprintf("both watches' events, as the handlers': %v", want), func(recs []map[string]any) bool {
		live = kwatchEvents(t, recs, ns, true)
		return sameWatches(live, want)
	})
	w.stop()
	waitText(t, "the program's end", s.errOut, "exited")
	s.stop(t)
	recs, out, errOut := pcapJSON(t, file)
	if got := kwatchEvents(t, recs, ns, true); !sameWatches(got, live) {
		t.Errorf("kwatch pcap of the recording: %v; kwatch attach showed %v\n%s", got, live, errOut)
	}
	noted := false
	for _, n := range ofRecord(recs, "note") {
		if n["kind"] == "tls-decrypted" && strings.Contains(fmt.Sprint(n["message"]), "joined mid-connection") &&
			strings.Contains(fmt.Sprint(n["message"]), "kwatch attach's recording of it") {
			noted = true
		}
	}
	if !noted {
		t.Errorf("no note of a connection joined with the state from the recording:\n%s", out)
	}
	// The state's line is a comment to other readers of the secrets.
	if ts, err := exec.Command("tshark", "-r", file).CombinedOutput(); err != nil || strings.Contains(strings.ToLower(string(ts)), "keylog") {
		t.Errorf("tshark -r: %v\n%s", err, ts)
	}
}

// TestAttachJoinedNotWatches attaches to a client-go program whose HTTP/2
// connection was open before, while it reads and writes besides its
// watches (a protobuf GET, LIST, create and delete every 300 ms, on the
// same connection): on the connection joined mid-way, whose HPACK entries
// from before are not known, those responses are exchanges (shown with
// --all-http, no watch), never problems, and every response taken for a
// watch whose request was not seen has events.
func TestAttachJoinedNotWatches(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := buildWatcher(t)
	w := startWatcher(t, env, bin, ns, "--crud-every", "300ms")
	s := startKwatch(t, "attach", fmt.Sprint(w.cmd.Process.Pid), "--all-http", "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to kwatch-watcher (pid")
	// Ten rounds of the program's requests seen after the join: their
	// DELETE responses, and the informer's events of their ConfigMaps.
	s.waitFor(t, 90*time.Second, "ten rounds of GET, LIST, create and delete after the join", func(recs []map[string]any) bool {
		deleted := 0
		for _, evs := range kwatchEvents(t, recs, ns, true) {
			n := 0
			for _, e := range evs {
				if e.Type == "DELETED" && strings.HasPrefix(e.Name, "crud-") {
					n++
				}
			}
			deleted = max(deleted, n)
		}
		return deleted >= 10
	})
	w.stop()
	s.stop(t)
	recs := s.records(t)
	exchanges, watchResp := 0, map[string]bool{}
	events := map[string]int{}
	for _, r := range recs {
		key := fmt.Sprintf("%v #%v", r["connection"], r["exchange"])
		switch r["record"] {
		case "problem":
			t.Errorf("problem: %v", r["message"])
		case "response":
			// Not the content type: after the join, the server's HPACK
			// encoder may name it by a dynamic table entry made before,
			// which kwatch never saw (how many depends on when it joined).
			if r["watch"] == true {
				watchResp[key] = r["inferred"] == true
			} else {
				exchanges++
			}
		case "event":
			events[key]++
		}
	}
	for key := range watchResp {
		if events[key] == 0 {
			var req bool
			for _, r := range recs {
				req = req || r["record"] == "request" && fmt.Sprintf("%v #%v", r["connection"], r["exchange"]) == key && r["watch"] == true
			}
			if !req {
				t.Errorf("%s: a response taken for a watch with no request seen and no event", key)
			}
		}
	}
	if exchanges < 10 {
		t.Errorf("%d responses shown as exchanges, want the GETs, LISTs, creates and DELETEs of ten rounds", exchanges)
	}
}

// buildGet builds internal/e2e/cmd/kwatch-get (one HTTPS GET, then exit)
// into a folder of the test's own.
func buildGet(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kwatch-get")
	cmd := exec.Command("go", "build", "-o", bin, "../internal/e2e/cmd/kwatch-get")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build kwatch-get: %v\n%s", err, out)
	}
	return bin
}

// shortLived runs kwatch attach --exe on kwatch-get (with the environment
// env), then kwatch-get five times against a TLS server of the test's, each
// a process that lives a few milliseconds (a connection, a handshake, one
// GET); it returns kwatch's records once it shows the five responses, its
// stderr, and the five processes' PIDs.
func shortLived(t *testing.T, env map[string]string) ([]map[string]any, string, []int) {
	t.Helper()
	bin := buildGet(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "short-lived\n")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := startKwatchEnv(t, env, "attach", "--exe", bin, "--all-http", "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to every process of")
	var pids []int
	for i := range 5 {
		cmd := exec.Command(bin, fmt.Sprintf("%s/short/%d", srv.URL, i))
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "200 12" {
			t.Fatalf("kwatch-get: %q, %v", out, err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	recs := s.waitFor(t, 60*time.Second, "the five responses", func(recs []map[string]any) bool {
		n := 0
		for _, r := range recs {
			if r["record"] == "response" && r["statusCode"] == float64(200) {
				n++
			}
		}
		return n >= 5
	})
	s.stop(t)
	return recs, s.errOut.String(), pids
}

// TestAttachShortLived attaches to an executable (--exe) that then runs
// five times as a process living a few milliseconds (it connects, sends one
// GET over TLS 1.3 and exits, as kubectl create does): the kernel tells
// which process owns each connection, so every GET and its response are
// shown, decrypted with the keys of that very process, each connection
// noted as its process's from its first packet (its SYN: not joined
// mid-stream).
func TestAttachShortLived(t *testing.T) {
	needAttach(t)
	recs, errOut, pids := shortLived(t, nil)
	if strings.Contains(errOut, "kwatch: connection owners come from /proc") {
		t.Fatalf("the kernel cannot tell connection owners here:\n%s", errOut)
	}
	byConn := map[string][]map[string]any{}
	for _, r := range recs {
		if c, ok := r["connection"].(string); ok {
			byConn[c] = append(byConn[c], r)
		}
	}
	for i, pid := range pids {
		who := fmt.Sprintf("client kwatch-get (pid %d)", pid)
		var conn string
		for c, rs := range byConn {
			for _, r := range rs {
				if r["kind"] == "process" && r["message"] == who {
					conn = c
				}
			}
		}
		if conn == "" {
			t.Errorf("run %d (pid %d): no connection noted %q", i, pid, who)
			continue
		}
		var target string
		var decrypted, status bool
		for _, r := range byConn[conn] {
			switch {
			case r["record"] == "request":
				target = fmt.Sprint(r["target"])
			case r["record"] == "response":
				status = r["statusCode"] == float64(200)
			case r["kind"] == "tls-decrypted":
				decrypted = strings.Contains(fmt.Sprint(r["message"]), fmt.Sprintf("the uprobe on kwatch-get (pid %d)", pid))
			case r["kind"] == "no-syn" || r["kind"] == "mid-stream":
				t.Errorf("run %d: %s: %v", i, r["kind"], r["message"])
			}
		}
		if target != fmt.Sprintf("/short/%d", i) || !status || !decrypted {
			t.Errorf("run %d (pid %d) on %s: request %q, 200 OK %v, decrypted with its keys %v", i, pid, conn, target, status, decrypted)
		}
	}
}

// TestAttachAPIServerClients attaches to kube-apiserver while
// kube-controller-manager's connection (opened long before) carries its
// informers' events and `kubectl get configmaps -w` (started after attach)
// watches: the "process" notes name both clients, from the kernel's events
// and from the /proc walk at start, in JSON (message and processes) and in
// the pretty output.
func TestAttachAPIServerClients(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	kcm, err := env.ControllerManager()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(filepath.Dir(env.Kubeconfig), "bin", "kubectl")
	js := startKwatch(t, "attach", "kube-apiserver", "-o", "json")
	pretty := startKwatch(t, "attach", "kube-apiserver")
	waitText(t, "kwatch attached (JSON)", js.errOut, "attached to kube-apiserver (pid")
	waitText(t, "kwatch attached (pretty)", pretty.errOut, "attached to kube-apiserver (pid")
	var out syncBuffer
	k := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "-n", ns, "get", "configmaps", "-w", "--output-watch-events")
	k.Stdout, k.Stderr = &out, &out
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
	// kubectl's watch is open once kwatch shows its request.
	js.waitFor(t, 60*time.Second, "kubectl's watch request", func(recs []map[string]any) bool {
		for _, r := range recs {
			if target := fmt.Sprint(r["target"]); r["record"] == "request" && strings.Contains(target, "/namespaces/"+ns+"/") && strings.Contains(target, "watch=true") {
				return true
			}
		}
		return false
	})
	churn(t, env, ns, "clients")
	waitText(t, "kubectl's DELETED row", &out, "DELETED")
	wants := []struct {
		pid  int
		name string
	}{{kcm.PID, "kube-controller-manager"}, {k.Process.Pid, "kubectl"}}
	js.waitFor(t, 60*time.Second, "process notes naming kube-controller-manager and kubectl as clients", func(recs []map[string]any) bool {
		for _, w := range wants {
			found := false
			for _, r := range recs {
				if r["kind"] != "process" || !strings.HasPrefix(fmt.Sprint(r["message"]), fmt.Sprintf("client %s (pid %d) · server kube-apiserver (pid", w.name, w.pid)) {
					continue
				}
				procs, _ := r["processes"].([]any)
				if len(procs) != 2 {
					continue
				}
				c, _ := procs[0].(map[string]any)
				s, _ := procs[1].(map[string]any)
				found = found || c["role"] == "client" && c["pid"] == float64(w.pid) && c["name"] == w.name && c["attached"] == false &&
					s["role"] == "server" && s["name"] == "kube-apiserver" && s["attached"] == true
			}
			if !found {
				return false
			}
		}
		return true
	})
	deadline := time.Now().Add(60 * time.Second)
	for _, w := range wants {
		text := fmt.Sprintf(" client %s (pid %d) · server kube-apiserver (pid", w.name, w.pid)
		for !strings.Contains(pretty.out.String(), text) {
			if time.Now().After(deadline) {
				t.Fatalf("the pretty output has no line with %q:\n%s", text, pretty.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestAttachProcOwners runs kwatch attach --exe with /proc scans telling
// which process owns each connection (KWATCH_ATTACH_OWNERS=proc: the
// fallback where the kernel cannot tell), said in one line: the program's
// two watches are shown as its handlers received them, as with the kernel.
func TestAttachProcOwners(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	bin := buildWatcher(t)
	ns := env.Namespace(t)
	s := startKwatchEnv(t, map[string]string{"KWATCH_ATTACH_OWNERS": "proc"}, "attach", "--exe", bin, "-o", "json")
	waitText(t, "kwatch attached", s.errOut, "attached to every process of")
	if n := strings.Count(s.errOut.String(), "kwatch: connection owners come from /proc"); n != 1 {
		t.Errorf("the fallback is said %d times, want once:\n%s", n, s.errOut.String())
	}
	w := startWatcher(t, env, bin, ns)
	churn(t, env, ns, "proc-owners")
	want := w.waitEvents(t, 3, "informer", "watch")
	s.waitFor(t, 60*time.Second, fmt.Sprintf("kwatch's events of both watches, as the program's: %v", want), func(recs []map[string]any) bool {
		return sameWatches(kwatchEvents(t, recs, ns, true), want)
	})
}

// TestAttachRecordKeptOnError: a run that cannot attach (no such process,
// an executable that is not a Go program) leaves an earlier recording as
// it was, and says nothing of keys it will not write.
func TestAttachRecordKeptOnError(t *testing.T) {
	needAttach(t)
	file := filepath.Join(t.TempDir(), "session.pcapng")
	before := []byte("an earlier recording")
	if err := os.WriteFile(file, before, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"999999999"}, {"--exe", "/bin/sh"}, {"--exe", "kwatch-no-such-program"}} {
		_, errOut, code := run(t, nil, nil, append([]string{"attach", "--record", file}, args...)...)
		if code != ExitUsage || strings.Contains(errOut, "holds the TLS keys") {
			t.Errorf("attach --record %s %v: exit %d\n%s", file, args, code, errOut)
		}
		if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, before) {
			t.Errorf("attach --record %s %v: the file is now %q (%v)", file, args, got, err)
		}
		// --exe takes a path; a bare name is a running process's.
		if want := "kwatch: --exe kwatch-no-such-program: no such file; --exe takes the executable's path, and a running process is named without it (kwatch attach kwatch-no-such-program)\n"; args[len(args)-1] == "kwatch-no-such-program" && errOut != want {
			t.Errorf("attach --exe kwatch-no-such-program: %q, want %q", errOut, want)
		}
	}
}

// startKubectlWatch starts kubectl (the executable path, with args: a
// watch of namespace ns's ConfigMaps) and returns once its watch is open:
// it has printed the ConfigMap "earlier", made in ns after it started
// (before any attach), with what it prints on stdout and stderr. kubectl
// is killed when the test ends.
func startKubectlWatch(t *testing.T, env *e2e.Env, ns, path string, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	k := exec.Command(path, args...)
	k.Stdout, k.Stderr = out, errOut
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Clientset(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "earlier"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitText(t, "kubectl's event of a change before attach", out, "earlier")
	return k, out, errOut
}
