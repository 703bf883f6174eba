package cmd

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (.ci/run installs it)")
	}
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	for _, n := range []string{"pre-a", "pre-b", "pre-c"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n},
			Data: map[string]string{"k": strings.Repeat("v", 300)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	proxy := newProxy(t, env)

	// tcpdump on the test's own proxy port: the capture holds the
	// informer's connections alone.
	file := filepath.Join(t.TempDir(), "informer.pcap")
	var tdErr syncBuffer
	td := exec.Command(tcpdump, "-i", "lo", "-s", "0", "-U", "--immediate-mode", "-w", file, fmt.Sprintf("tcp port %d", proxy.port))
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
	defer stop()
	// tcpdump says "listening" before it captures: it is ready once a
	// request to the proxy shows up in its file (-U writes each packet).
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(proxy.url + "/version"); err == nil {
			resp.Body.Close()
		}
		if fi, err := os.Stat(file); err == nil && fi.Size() > 24 { // more than the file header
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump captured nothing: %s", tdErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The informer: client-go's defaults (watch-list, gzip), protobuf.
	cfg := &rest.Config{Host: proxy.url, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf,
		AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string // what the handlers received, in order
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	note := func(typ string, obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			mu.Lock()
			seen = append(seen, typ+" "+cm.Name+" "+cm.ResourceVersion)
			mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note("ADDED", o) },
		UpdateFunc: func(_, o any) { note("MODIFIED", o) },
		DeleteFunc: func(o any) { note("DELETED", o) },
	}); err != nil {
		t.Fatal(err)
	}
	stopCh := make(chan struct{})
	factory.Start(stopCh)
	if !cache.WaitForCacheSync(stopCh, inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "pre-a", "application/merge-patch+json", []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pre-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informer's handlers saw %v", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stopCh)
	factory.Shutdown()
	// tcpdump writes packets in order: once a request made now is in
	// its file, everything before it is too.
	written := func() int64 {
		fi, err := os.Stat(file)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	before := written()
	if resp, err := http.Get(proxy.url + "/version"); err == nil {
		resp.Body.Close()
	}
	deadline = time.Now().Add(20 * time.Second)
	for written() < before+1000 { // the marker exchange: about 1.5 KB
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump wrote %d bytes after the marker request", written()-before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
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
	// The initial adds as a set (the informer's order is its own), then
	// the bookmark, then the changes in order.
	mu.Lock()
	defer mu.Unlock()
	k := slices.Index(got, "BOOKMARK initial-events-end")
	if k != 3 {
		t.Fatalf("decoded %v; want 3 initial ADDED, the bookmark, then the changes", got)
	}
	initialGot, initialSeen := slices.Clone(got[:3]), slices.Clone(seen[:3])
	slices.Sort(initialGot)
	slices.Sort(initialSeen)
	if fmt.Sprint(initialGot) != fmt.Sprint(initialSeen) || fmt.Sprint(got[4:]) != fmt.Sprint(seen[3:]) {
		t.Errorf("decoded %v\nthe informer saw %v", got, seen)
	}
}
