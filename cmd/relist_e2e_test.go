package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/rewatch"
)

// holdingRelay copies connections to addr as relayTo does, and can reset
// them: reset sends a TCP RST to every client connection open (SO_LINGER
// 0, RFC 9293 §3.10.7.1) and closes its upstream; until resume, new
// client connections are accepted but held, their bytes not read, so that
// a client that reconnects waits for resume, whatever its back-off.
type holdingRelay struct {
	addr    *net.TCPAddr
	mu      sync.Mutex
	conns   []*net.TCPConn // client sides open
	held    chan struct{}  // closed by resume
	holding bool
	nHeld   int // connections held since reset
}

func newHoldingRelay(t *testing.T, upstream string) *holdingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holdingRelay{addr: ln.Addr().(*net.TCPAddr), held: make(chan struct{})}
	var wg sync.WaitGroup
	var all []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		r.resume()
		r.mu.Lock()
		for _, c := range all {
			_ = c.Close()
		}
		r.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := nc.(*net.TCPConn)
			r.mu.Lock()
			all = append(all, c)
			held := r.held
			if !r.holding {
				held = nil
			}
			if held != nil {
				r.nHeld++
			}
			r.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if held != nil {
					<-held
				}
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				r.mu.Lock()
				r.conns = append(r.conns, c)
				all = append(all, up)
				r.mu.Unlock()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				_ = c.CloseWrite()
				<-done
			}()
		}
	}()
	return r
}

// reset resets every client connection open and holds the new ones until
// resume.
func (r *holdingRelay) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding, r.nHeld = true, 0
	r.held = make(chan struct{})
	for _, c := range r.conns {
		_ = c.SetLinger(0)
		_ = c.Close()
	}
	r.conns = nil
}

// waitHeld returns once a connection is held since reset, or fails after
// 60 s.
func (r *holdingRelay) waitHeld(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		n := r.nHeld
		r.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not connect again after the reset")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resume lets the connections held since reset through.
func (r *holdingRelay) resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holding {
		r.holding = false
		close(r.held)
	}
}

// informerLog records what a PodTemplate informer's handlers received:
// "ADDED name rv", "MODIFIED name oldRV newRV", "DELETED name".
type informerLog struct{ handlerLog }

func startLoggingInformer(t *testing.T, client kubernetes.Interface, ns string) (*informerLog, func()) {
	t.Helper()
	log := &informerLog{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().PodTemplates().Informer()
	cm := func(o any) *corev1.PodTemplate {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		c, _ := o.(*corev1.PodTemplate)
		return c
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if c := cm(o); c != nil {
				log.add("ADDED " + c.Name + " " + c.ResourceVersion)
			}
		},
		UpdateFunc: func(old, o any) {
			if a, b := cm(old), cm(o); a != nil && b != nil {
				log.add("MODIFIED " + b.Name + " " + a.ResourceVersion + " " + b.ResourceVersion)
			}
		},
		DeleteFunc: func(o any) {
			if c := cm(o); c != nil {
				log.add("DELETED " + c.Name)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	return log, runInformer(t, factory.Start, factory.Shutdown, inf)
}

// relistCapture is what kwatch pcap's decoder, with the links between
// watches of pkg/rewatch and health after them, made of a capture.
type relistCapture struct {
	restarts []*record.Restart
	relists  []*record.Relist
	health   []*record.Health
	problems []string
}

func decodeRelists(t *testing.T, data []byte, keys *keylog.Log) relistCapture {
	t.Helper()
	var c relistCapture
	sink := rewatch.New(health.New(record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Restart:
			c.restarts = append(c.restarts, v)
		case *record.Relist:
			c.relists = append(c.relists, v)
		case *record.Health:
			c.health = append(c.health, v)
		case *record.Problem:
			c.problems = append(c.problems, v.Location()+": "+v.Kind+": "+v.Detail)
		}
	})))
	if keys == nil {
		keys = keylog.New()
	}
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "relist.pcap", Keys: keys}, sink); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPcapInformerResetRelist captures a client-go 0.37 PodTemplate
// informer (client-go's defaults: a streaming list) whose connection is
// reset: through kubectl proxy over HTTP/1.1, and straight to the API
// server over HTTP/2 and TLS 1.3 with its key log. While it cannot reach
// the server, one PodTemplate is changed, one deleted and one created, and
// etcd is compacted past them: its resumed watch (PodTemplates have no
// watch cache in the test stack, so it reaches etcd) is told 410 Gone, and
// it re-lists. kwatch pcap links the resume to the watch before it (after
// a reset) and the re-list to the resume (after 410 Gone), and counts the
// objects sent again as the informer's handlers saw them: each unchanged
// one is an update whose old and new resourceVersions are the same.
//
// With KWATCH_SAVE_CAPTURES=DIR the captures are written there
// (informer-reset-lo.pcap: testdata/captures has it, with its goldens).
func TestPcapInformerResetRelist(t *testing.T) {
	t.Run("HTTP/1.1 through kubectl proxy", func(t *testing.T) { testInformerResetRelist(t, false) })
	t.Run("HTTP/2 over TLS", func(t *testing.T) { testInformerResetRelist(t, true) })
}

func podTemplate(name, v string) *corev1.PodTemplate {
	return &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"v": v}},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}
}

func testInformerResetRelist(t *testing.T, direct bool) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	names := []string{"pt-1", "pt-2", "pt-3", "pt-4", "pt-5", "pt-6", "pt-7", "pt-8", "pt-9", "pt-10"}
	pts := cs.CoreV1().PodTemplates(ns)
	for _, n := range names {
		if _, err := pts.Create(ctx, podTemplate(n, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch := func(name, v string) string {
		t.Helper()
		pt, err := pts.Patch(ctx, name, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"v":"`+v+`"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pt.ResourceVersion
	}

	var (
		relay   *holdingRelay
		client  *kubernetes.Clientset
		capture func() []byte
		keys    *keylog.Log
		keyFile string
		err     error
	)
	if direct {
		cfg := env.RESTConfig(t)
		relay = newHoldingRelay(t, apiServerAddr(t, cfg))
		keyFile = filepath.Join(t.TempDir(), "keys.log")
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
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		dc := rest.CopyConfig(cfg)
		dc.Host = "https://" + relay.addr.String()
		dc.TLSClientConfig = rest.TLSClientConfig{}
		dc.Transport = tr
		if client, err = kubernetes.NewForConfig(dc); err != nil {
			t.Fatal(err)
		}
	} else {
		proxy := newProxy(t, env)
		relay = newHoldingRelay(t, fmt.Sprintf("127.0.0.1:%d", proxy.port))
		if client, err = kubernetes.NewForConfig(&rest.Config{Host: "http://" + relay.addr.String()}); err != nil {
			t.Fatal(err)
		}
	}
	capture = tcpdumpCapture(t, fmt.Sprintf("tcp port %d", relay.addr.Port), dialMarker(&net.Dialer{}, relay.addr.String()))

	log, stop := startLoggingInformer(t, client, ns)
	log.wait(t, len(names))
	patch("pt-1", "2")
	log.wait(t, len(names)+1)

	relay.reset()
	// While the informer cannot reach the server: a change, a deletion
	// and a creation it will learn of from its re-list, and a compaction
	// that makes its resume too old.
	patch("pt-2", "2")
	if err := pts.Delete(ctx, "pt-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := pts.Create(ctx, podTemplate("pt-new", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	compactEtcd(t, env.EtcdURL, created.ResourceVersion)
	relay.waitHeld(t)
	relay.resume()
	// The re-list: an update for each of the 9 objects still there, an
	// add and a delete.
	relisted := log.waitFor(len(names) + 1 + 11)
	stop()
	data := capture()
	if dir := os.Getenv("KWATCH_SAVE_CAPTURES"); dir != "" {
		name := "informer-reset-lo.pcap"
		if direct {
			name = "informer-reset-h2.pcap"
			if err := os.WriteFile(filepath.Join(dir, "informer-reset-h2.keys.log"), mustRead(t, keyFile), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if !relisted {
		t.Fatalf("the informer's handlers saw %v, want %d events: a re-list after the reset", log.list(), len(names)+1+11)
	}
	// What the handlers saw after the reset: the re-list.
	seen := log.list()[len(names)+1:]
	var unchanged, changed, added, deleted int
	for _, s := range seen {
		f := strings.Fields(s)
		switch {
		case f[0] == "MODIFIED" && f[2] == f[3]:
			unchanged++
		case f[0] == "MODIFIED":
			changed++
		case f[0] == "ADDED":
			added++
		case f[0] == "DELETED":
			deleted++
		}
	}
	if unchanged != 8 || changed != 1 || added != 1 || deleted != 1 {
		t.Fatalf("the informer's handlers saw %v after the reset; want 8 updates with the same resourceVersion, 1 changed, 1 added, 1 deleted", seen)
	}

	if direct {
		keys = keylog.New()
		if err := keys.AddFile(keyFile); err != nil {
			t.Fatal(err)
		}
	}
	got := decodeRelists(t, data, keys)
	if len(got.problems) > 0 {
		t.Logf("problems:\n%s", strings.Join(got.problems, "\n"))
	}
	var whys []string
	for _, r := range got.restarts {
		whys = append(whys, r.Reason())
	}
	// The resume may be answered 410 itself, or with an ERROR event in
	// its stream; then a watch-list, with no resourceVersion (client-go
	// lists from the latest after 410).
	if len(got.restarts) != 2 || got.restarts[0].Why != record.WhyResume || got.restarts[0].After != record.AfterReset ||
		got.restarts[1].Why != record.WhyRelist || got.restarts[1].Relist != record.RelistWatchList || got.restarts[1].After != record.AfterGone {
		t.Errorf("restarts %q; want a resume after a reset, then a re-list (watch-list) after 410 Gone", whys)
	}
	if len(got.relists) != 1 {
		t.Fatalf("%d re-lists said, want 1: %+v", len(got.relists), got.relists)
	}
	rl := got.relists[0]
	if rl.Sent != 10 || rl.Unchanged != unchanged || rl.NChanged != changed || rl.NAppeared != added || rl.NDisappeared != deleted {
		t.Errorf("re-list %+v; the handlers saw %d unchanged, %d changed, %d added, %d deleted of 10 objects", rl, unchanged, changed, added, deleted)
	}
	if fmt.Sprint(rl.Changed, rl.Appeared, rl.Disappeared) != fmt.Sprintf("[%[1]s/pt-2] [%[1]s/pt-new] [%[1]s/pt-3]", ns) {
		t.Errorf("re-list names changed %v, appeared %v, disappeared %v", rl.Changed, rl.Appeared, rl.Disappeared)
	}
	all := got.health[len(got.health)-1]
	if all.Scope != "all" || all.Relists != 1 || all.ResentUnchanged != unchanged {
		t.Errorf("overall health %+v; want 1 re-list, %d objects sent again unchanged", all, unchanged)
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// waitFor reports whether the handlers received n events within 30 s.
func (l *handlerLog) waitFor(n int) bool {
	deadline := time.Now().Add(30 * time.Second)
	for len(l.list()) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
