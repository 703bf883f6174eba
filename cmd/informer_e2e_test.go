package cmd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestPcapInformerWatchList captures, with tcpdump, what a client-go 0.37
// SharedInformerFactory with its default settings receives through kubectl
// proxy (a streaming list, gzip'd), with protobuf asked for as kubectl and
// controllers do, and checks that kwatch pcap decodes the events its
// handlers received: the initial adds as a set, then the changes in order,
// with the initial-events-end bookmark between them.
func TestPcapInformerWatchList(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	createConfigMaps(t, cs, ns, map[string]string{"k": strings.Repeat("v", 300)}, "pre-a", "pre-b", "pre-c")
	proxy := newProxy(t, env)

	capture := startCapture(t, proxy)

	// The informer: client-go's defaults (watch-list, gzip), protobuf.
	cfg := &rest.Config{Host: proxy.url, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf,
		AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log, _, stop := startConfigMapInformer(t, client, ns)
	changeConfigMaps(t, cs, ns)
	log.wait(t, 6)
	stop()
	data := capture()
	var got []string
	var problems []string
	var gzipped, initialEnd bool
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Response:
			if v.Watch && v.ContentEncoding == "gzip" && v.Format == "protobuf" {
				gzipped = true
			}
		case *record.Event:
			if v.InitialEventsEnd {
				initialEnd = true
				got = append(got, "BOOKMARK initial-events-end")
			}
			if v.Type != "BOOKMARK" {
				got = append(got, v.Type+" "+v.Name+" "+v.ResourceVersion)
			}
		case *record.Problem:
			if !v.Warning {
				problems = append(problems, v.Kind+": "+v.Detail)
			}
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "informer.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	if !gzipped || !initialEnd || len(problems) > 0 {
		t.Errorf("gzip'd protobuf watch %v, initial-events-end %v, problems %v; events %v", gzipped, initialEnd, problems, got)
	}
	checkInformerEvents(t, got, log.list())
}

// startConfigMapInformer starts a ConfigMap informer in ns with client-go's
// defaults (a streaming list) and returns what its handlers receive, in
// order ("ADDED NAME RV"), the informer once it synced, and what stops it.
func startConfigMapInformer(t *testing.T, client kubernetes.Interface, ns string) (*handlerLog, cache.SharedIndexInformer, func()) {
	t.Helper()
	log := &handlerLog{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	note := func(typ string, obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			log.add(typ + " " + cm.Name + " " + cm.ResourceVersion)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note("ADDED", o) },
		UpdateFunc: func(_, o any) { note("MODIFIED", o) },
		DeleteFunc: func(o any) { note("DELETED", o) },
	}); err != nil {
		t.Fatal(err)
	}
	return log, inf, runInformer(t, factory.Start, factory.Shutdown, inf)
}

// changeConfigMaps makes three changes in ns, after pre-a and pre-b were
// created: creates "later", patches pre-a, deletes pre-b.
// runInformer starts an informer factory (start, shutdown: its Start and
// Shutdown) and waits until inf has synced; the function it returns stops
// the factory.
func runInformer(t *testing.T, start func(<-chan struct{}), shutdown func(), inf cache.SharedIndexInformer) func() {
	t.Helper()
	stopCh := make(chan struct{})
	start(stopCh)
	if !cache.WaitForCacheSync(stopCh, inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	return func() {
		close(stopCh)
		shutdown()
	}
}

func changeConfigMaps(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "pre-a", "application/merge-patch+json", []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pre-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkInformerEvents compares the events kwatch decoded of an informer's
// streaming list of three objects (the initial-events-end bookmark as
// "BOOKMARK initial-events-end") with what its handlers saw: the initial
// adds as a set (the informer's order is its own), then the bookmark, then
// the changes in order.
func checkInformerEvents(t *testing.T, decoded, seen []string) {
	t.Helper()
	if k := slices.Index(decoded, "BOOKMARK initial-events-end"); k != 3 {
		t.Fatalf("decoded %v; want 3 initial ADDED, the bookmark, then the changes", decoded)
	}
	initialGot, initialSeen := slices.Clone(decoded[:3]), slices.Clone(seen[:3])
	slices.Sort(initialGot)
	slices.Sort(initialSeen)
	if fmt.Sprint(initialGot) != fmt.Sprint(initialSeen) || fmt.Sprint(decoded[4:]) != fmt.Sprint(seen[3:]) {
		t.Errorf("decoded %v\nthe informer's handlers saw %v", decoded, seen)
	}
}

// startCapture starts tcpdump on the port of the test's own kubectl proxy,
// so that the capture holds the test's connections alone, and returns a
// function that stops it and returns the capture (see tcpdumpCapture).
func startCapture(t *testing.T, proxy *testProxy) func() []byte {
	t.Helper()
	return tcpdumpCapture(t, fmt.Sprintf("tcp port %d", proxy.port), dialMarker(&net.Dialer{}, fmt.Sprintf("127.0.0.1:%d", proxy.port)))
}

// dialMarker returns a marker for tcpdumpCapture: a TCP connection to addr
// from d, opened and closed, named by its local port (0 when the dial
// failed).
func dialMarker(d *net.Dialer, addr string) func() int {
	return func() int {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return 0
		}
		defer c.Close()
		return c.LocalAddr().(*net.TCPAddr).Port
	}
}

// tcpdumpCapture starts tcpdump on lo with filter and returns a function
// that stops it and returns the capture. tcpdump says "listening" before it
// captures, and may hold packets back until it has processed them, in the
// order they came: it is known to capture once a packet of a marker
// connection (which the filter must match; marker returns its local port)
// is in its file (-U writes each packet), and to have written the test's
// traffic once a marker's packet made after it is.
func tcpdumpCapture(t *testing.T, filter string, marker func() (port int)) func() []byte {
	t.Helper()
	_, stop := tcpdumpFile(t, filter, marker)
	return stop
}

// tcpdumpFile is tcpdumpCapture, which also returns the file tcpdump
// writes, for a test to look into while it is written.
func tcpdumpFile(t *testing.T, filter string, marker func() (port int)) (string, func() []byte) {
	t.Helper()
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (.ci/run installs it)")
	}
	file := filepath.Join(t.TempDir(), "capture.pcap")
	var tdErr syncBuffer
	td := exec.Command(tcpdump, "-i", "lo", "-s", "0", "-U", "--immediate-mode", "-B", "65536", "-w", file, filter)
	td.Stderr = &tdErr
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = td.Process.Signal(syscall.SIGINT)
			_ = td.Wait()
		}
	}
	t.Cleanup(stop)
	mark := func(what string) {
		ports := map[int]bool{}
		deadline := time.Now().Add(20 * time.Second)
		for try := 0; ; try++ {
			if try%5 == 0 { // a new marker connection every 250 ms
				ports[marker()] = true
			}
			if capturedPort(file, ports) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tcpdump did not capture %s: %s", what, tdErr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mark("a first marker")
	return file, func() []byte {
		mark("a last marker")
		stop()
		if m := regexp.MustCompile(`(\d+) packets? dropped by kernel`).FindStringSubmatch(tdErr.String()); m != nil && m[1] != "0" {
			t.Logf("tcpdump: %s packets dropped by kernel: the capture misses some", m[1])
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
}

// capturedPort reports whether the pcap file tcpdump is writing holds a
// TCP packet from or to one of ports.
func capturedPort(file string, ports map[int]bool) bool {
	return capturedTCP(file, func(tcp *layers.TCP) bool { return ports[int(tcp.SrcPort)] || ports[int(tcp.DstPort)] })
}

// capturedTCP reports whether the pcap file tcpdump is writing holds a TCP
// packet for which match is true; a packet it is still writing ends the
// reading.
func capturedTCP(file string, match func(*layers.TCP) bool) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		return false
	}
	for {
		pkt, _, err := r.ReadPacketData()
		if err != nil {
			return false
		}
		p := gopacket.NewPacket(pkt, r.LinkType(), gopacket.NoCopy)
		if tcp, ok := p.TransportLayer().(*layers.TCP); ok && match(tcp) {
			return true
		}
	}
}

// TestPcapKubectlGetWatch captures `kubectl get -w --output-watch-events`
// through kubectl proxy: its watch asks for Table objects, and kwatch pcap
// names each watch event by its row's object: the names and event types
// kubectl printed for them.
func TestPcapKubectlGetWatch(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	createConfigMaps(t, cs, ns, nil, "pre-a", "pre-b")
	proxy := newProxy(t, env)
	capture := startCapture(t, proxy)
	var out syncBuffer
	kc := exec.Command(env.Kubectl, "--kubeconfig", os.DevNull, "-s", proxy.url, "get", "configmaps", "-n", ns,
		"-w", "--output-watch-events")
	kc.Stdout = &out
	if err := kc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kc.Process.Kill(); _ = kc.Wait() }()
	// waitOut waits for a whole line holding text: kubectl's tabwriter
	// may write a line's cells one by one.
	waitOut := func(text string) {
		line := regexp.MustCompile(`(?m)` + text + `.*\n`)
		deadline := time.Now().Add(30 * time.Second)
		for !line.MatchString(out.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("kubectl did not print %q:\n%s", text, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitOut("pre-b")
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitOut(`DELETED\s+later\s`)
	_ = kc.Process.Kill()
	_ = kc.Wait()
	data := capture()

	// What kubectl printed: EVENT and NAME columns, after the header.
	var printed []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 2 {
			printed = append(printed, f[0]+" "+f[1])
		}
	}
	var decoded []string
	var rowKinds []string
	sink := record.SinkFunc(func(r record.Record) {
		if v, ok := r.(*record.Event); ok && v.Type != "BOOKMARK" {
			decoded = append(decoded, v.Type+" "+v.Name)
			rowKinds = append(rowKinds, v.Kind+"/"+v.RowKind)
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "kubectl-get-w.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	// kubectl lists first (its two ADDED lines come from the LIST's
	// Table), then watches from the list's resourceVersion.
	if len(printed) < 2 || fmt.Sprint(printed[:2]) != "[ADDED pre-a ADDED pre-b]" || fmt.Sprint(decoded) != fmt.Sprint(printed[2:]) {
		t.Errorf("decoded watch events %v\nkubectl printed %v (the first two from its LIST)", decoded, printed)
	}
	for _, k := range rowKinds {
		if k != "Table/PartialObjectMetadata" {
			t.Errorf("event objects %v; want Tables of PartialObjectMetadata rows", rowKinds)
			break
		}
	}
}

// pythonWatch is a watch loop of Debian's python3-kubernetes, the way its
// users write one: it prints each event's type, name and resourceVersion,
// and stops after the number of events it is given. Arguments: host,
// namespace, events; and to go straight to the API server, a bearer token
// and a loopback source address.
const pythonWatch = `
import sys
if len(sys.argv) > 4:
    # Straight to the API server: a token, and a source address forced
    # through urllib3's connection factory (the client has no option for
    # it), so that a capture can hold this client's connection alone.
    import urllib3
    import urllib3.util.connection as uc
    _create = uc.create_connection
    def create(address, *a, **kw):
        kw["source_address"] = (sys.argv[5], 0)
        return _create(address, *a, **kw)
    uc.create_connection = create
    urllib3.disable_warnings()
from kubernetes import client, watch
cfg = client.Configuration()
cfg.host = sys.argv[1]
if len(sys.argv) > 4:
    cfg.verify_ssl = False
    cfg.api_key = {"authorization": "Bearer " + sys.argv[4]}
api = client.CoreV1Api(client.ApiClient(cfg))
w = watch.Watch()
n = 0
for ev in w.stream(api.list_namespaced_config_map, sys.argv[2], timeout_seconds=60):
    o = ev["object"]
    print(ev["type"], o.metadata.name, o.metadata.resource_version, flush=True)
    n += 1
    if n == int(sys.argv[3]):
        w.stop()
`

// pythonPath is Debian's python3, where python3-kubernetes is.
const pythonPath = "/usr/bin/python3"

// needPython skips the test when Debian's python3-kubernetes is not
// installed.
func needPython(t *testing.T) {
	t.Helper()
	if err := exec.Command(pythonPath, "-c", "import kubernetes").Run(); err != nil {
		t.Skip("Debian's python3-kubernetes is not installed (.ci/run installs it)")
	}
}

// createConfigMaps creates ConfigMaps with the given names and data in ns.
func createConfigMaps(t *testing.T, cs kubernetes.Interface, ns string, data map[string]string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}, Data: data},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// runPythonWatch runs pythonWatch with args (and env added to the
// environment) until its two initial events are printed, then creates and
// deletes the ConfigMap "later" in ns, and returns the lines the Python
// client printed once it stopped after its events.
func runPythonWatch(t *testing.T, cs kubernetes.Interface, ns string, env []string, args ...string) []string {
	t.Helper()
	var out, errOut syncBuffer
	py := exec.Command(pythonPath, append([]string{"-c", pythonWatch}, args...)...)
	py.Env = append(os.Environ(), env...)
	py.Stdout, py.Stderr = &out, &errOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "\n") < 2 {
		if time.Now().After(deadline) {
			_ = py.Process.Kill()
			_ = py.Wait()
			t.Fatalf("the Python watch printed %q; stderr %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := py.Wait(); err != nil {
		t.Fatalf("the Python watch: %v; stderr %s", err, errOut.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// TestPcapPythonWatch captures a python3-kubernetes watch loop through
// kubectl proxy and checks that kwatch pcap decodes exactly the events the
// Python client received, in order.
func TestPcapPythonWatch(t *testing.T) {
	env := e2e.Cluster(t)
	needPython(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	createConfigMaps(t, cs, ns, nil, "pre-a", "pre-b")
	proxy := newProxy(t, env)
	capture := startCapture(t, proxy)
	printed := runPythonWatch(t, cs, ns, nil, proxy.url, ns, "4")
	data := capture()
	var decoded []string
	sink := record.SinkFunc(func(r record.Record) {
		if v, ok := r.(*record.Event); ok && v.Type != "BOOKMARK" {
			decoded = append(decoded, v.Type+" "+v.Name+" "+v.ResourceVersion)
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "python-watch.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(decoded) != fmt.Sprint(printed) {
		t.Errorf("decoded %v\nthe Python client received %v", decoded, printed)
	}
}

// TestPcapMetadataInformer captures a client-go metadata informer (what
// garbage collectors and quota controllers use): its watch-list asks for
// PartialObjectMetadata, and kwatch pcap names each event's object as the
// informer saw it.
func TestPcapMetadataInformer(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pre-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy := newProxy(t, env)
	capture := startCapture(t, proxy)
	mc, err := metadata.NewForConfig(&rest.Config{Host: proxy.url})
	if err != nil {
		t.Fatal(err)
	}
	var log handlerLog
	factory := metadatainformer.NewFilteredSharedInformerFactory(mc, 0, ns, nil)
	inf := factory.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps")).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if m, ok := o.(*metav1.PartialObjectMetadata); ok {
				log.add("ADDED " + m.Name)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, factory.Start, factory.Shutdown, inf)
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log.wait(t, 2)
	stop()
	data := capture()
	var decoded []string
	sink := record.SinkFunc(func(r record.Record) {
		if v, ok := r.(*record.Event); ok && v.Type != "BOOKMARK" {
			if v.Kind != "PartialObjectMetadata" {
				t.Errorf("event of kind %q, want PartialObjectMetadata", v.Kind)
			}
			decoded = append(decoded, v.Type+" "+v.Name)
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "metadata-informer.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	if seen := log.list(); fmt.Sprint(decoded) != fmt.Sprint(seen) {
		t.Errorf("decoded %v\nthe metadata informer saw %v", decoded, seen)
	}
}

// handlerLog records what an informer's handlers received, in order; they
// run on the informer's goroutines.
type handlerLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *handlerLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, s)
}

func (l *handlerLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// wait returns once the handlers received n events, or fails after 30 s.
func (l *handlerLog) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(l.list()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the informer's handlers saw %v, want %d events", l.list(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
