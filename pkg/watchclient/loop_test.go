package watchclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kwatch/kwatch/pkg/record"
)

// recordedObjects returns the ConfigMap objects of a real watch, as the API
// server sent them (from the golden output of a capture).
func recordedObjects(t testing.TB) []json.RawMessage {
	t.Helper()
	f, err := os.Open("../../testdata/pcap/watch-timeout-any.golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var objs []json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Record string          `json:"record"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Record == "event" {
			objs = append(objs, r.Object)
		}
	}
	if len(objs) != 4 {
		t.Fatalf("%d recorded objects, want 4", len(objs))
	}
	return objs
}

// fakeServer answers LIST and WATCH of configmaps the way kube-apiserver
// does through kubectl proxy, one scripted watch response after another.
type fakeServer struct {
	t       *testing.T
	mu      sync.Mutex
	list    []string // LIST bodies, in order; the last one repeats
	watches []func(w http.ResponseWriter, r *http.Request)
	seen    []string // watch resourceVersions asked for
	accepts []string // watch requests' Accept headers
	lists   int
	// rest answers the watch requests that come after watches; nil holds
	// them open.
	rest func(w http.ResponseWriter, r *http.Request)
	// noNamespace answers a GET of a namespace 404 Not Found.
	noNamespace bool
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ns, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/"); ok && !strings.Contains(ns, "/") {
		// The namespace watched exists unless noNamespace (kwatch asks
		// when a watch's first state is empty).
		w.Header().Set("Content-Type", "application/json")
		if f.noNamespace {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces %q not found","reason":"NotFound","details":{"name":%q,"kind":"namespaces"},"code":404}`, ns, ns)
			return
		}
		fmt.Fprintf(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":%q}}`, ns)
		return
	}
	f.mu.Lock()
	if r.URL.Query().Get("watch") == "" {
		body := f.list[min(f.lists, len(f.list)-1)]
		f.lists++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
		return
	}
	f.seen = append(f.seen, r.URL.Query().Get("resourceVersion"))
	f.accepts = append(f.accepts, r.Header.Get("Accept"))
	if len(f.watches) == 0 && f.rest != nil {
		f.mu.Unlock()
		f.rest(w, r)
		return
	}
	if len(f.watches) == 0 {
		f.mu.Unlock()
		// Hold the last watch open, as a quiet server does.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	next := f.watches[0]
	f.watches = f.watches[1:]
	f.mu.Unlock()
	next(w, r)
}

// events writes watch events, one chunk each (a Flush per event, as the API
// server does), then returns: the server ends the watch with the last-chunk.
func events(lines ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for _, l := range lines {
			fmt.Fprintln(w, l)
			w.(http.Flusher).Flush()
		}
	}
}

func listBody(rv string, names ...string) string {
	items := make([]string, len(names))
	for i, n := range names {
		items[i] = fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"kube-system","uid":"uid-%s","resourceVersion":%q}}`, n, n, rv)
	}
	return fmt.Sprintf(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(items, ","))
}

type collect struct {
	mu   sync.Mutex
	recs []record.Record
	// responses counts the Response records; changed is closed (and
	// replaced) when one comes.
	responses int
	changed   chan struct{}
}

func (c *collect) Emit(r record.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r)
	if _, ok := r.(*record.Response); ok {
		c.responses++
		if c.changed != nil {
			close(c.changed)
			c.changed = nil
		}
	}
}

// waitResponses returns true once n Response records have come, false if
// done is closed first. It has no deadline of its own: a hang is caught
// by go test's -timeout, so a slow machine never fails a test.
func (c *collect) waitResponses(n int, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		got := c.responses
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-done:
			c.mu.Lock()
			got = c.responses
			c.mu.Unlock()
			return got >= n
		}
	}
}

func (c *collect) snapshot() []record.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]record.Record(nil), c.recs...)
}

func configmaps() Resource {
	return Resource{Kind: "ConfigMap", Namespaced: true}
}

// TestLoopResumeAndRelist drives the list-watch loop against an httptest
// server serving recorded event bytes: the first watch ends after two
// events (resume from the last resourceVersion), the second watch gets an
// in-stream 410 ERROR (re-list, with what changed), the third stays open.
func TestLoopResumeAndRelist(t *testing.T) {
	objs := recordedObjects(t) // coredns at rv 151, 152, 153, 154 (deleted)
	ev := func(typ string, obj json.RawMessage) string {
		return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, obj)
	}
	gone := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 152 (160)","reason":"Expired","code":410}}`
	fs := &fakeServer{t: t, list: []string{listBody("150", "old", "coredns"), listBody("160", "coredns")}, watches: []func(http.ResponseWriter, *http.Request){
		events(ev("ADDED", objs[0]), ev("MODIFIED", objs[1])),
		events(gone),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "kube-system",
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}, 3, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fs.seen, ","); got != "150,152,160" {
		t.Errorf("watches asked for resourceVersions %s, want 150,152,160 (resume from the last event, then from the re-list)", got)
	}
	if stats.Lists != 2 || stats.Relists != 1 || stats.Watches != 3 {
		t.Errorf("stats %+v", stats)
	}
	var lines []string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Event:
			lines = append(lines, fmt.Sprintf("event %s %s rv %s chunks %d", v.Type, v.Name, v.ResourceVersion, len(v.Chunks)))
		case *record.List:
			lines = append(lines, fmt.Sprintf("list %d items rv %s: %s", v.Items, v.ResourceVersion, v.Reason))
		case *record.WatchStart:
			lines = append(lines, fmt.Sprintf("watch %d from %s: %s", v.Number, v.ResourceVersion, v.Reason))
		case *record.Relist:
			lines = append(lines, fmt.Sprintf("relist appeared %v disappeared %v changed %v unchanged %d", v.Appeared, v.Disappeared, v.Changed, v.Unchanged))
		case *record.End:
			how := v.How
			if how == "closed by the client" && len(lines) > 0 && strings.HasPrefix(lines[len(lines)-1], "event ERROR") {
				// kwatch stops a watch as soon as it reads the 410
				// ERROR: whether the server's last-chunk, written right
				// after it, was read first is a race either way.
				how = "last-chunk"
			}
			lines = append(lines, "end "+how)
		}
	}
	want := []string{
		"list 2 items rv 150: initial",
		"watch 1 from 150: after LIST",
		"event ADDED coredns rv 151 chunks 1",
		"event MODIFIED coredns rv 152 chunks 1",
		"end last-chunk",
		"watch 2 from 152: resume: the server ended the watch (last-chunk)",
		"event ERROR  rv  chunks 1",
		"end last-chunk",
		"list 1 items rv 160: re-list after 410 Gone",
		"relist appeared [] disappeared [kube-system/old] changed [kube-system/coredns] unchanged 0",
		"watch 3 from 160: after LIST",
		"end closed by the client",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoopResumeAfterBurst: a watch that ends right after a burst written
// without a flush between events (the tap's queue fills, the decoder runs
// behind the reader) still resumes from its last event's resourceVersion,
// with every event and the watch's end reported before the next watch
// starts.
func TestLoopResumeAfterBurst(t *testing.T) {
	const n = 20000
	burst := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"kube-system","resourceVersion":"%d"},"data":{"k":"a\nb\nc"}}}`+"\n", 1000+i)
		}
	}
	fs := &fakeServer{t: t, list: []string{listBody("1000")}, watches: []func(http.ResponseWriter, *http.Request){burst}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "kube-system",
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}, 2, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fs.seen, ","), fmt.Sprintf("1000,%d", 1000+n); got != want {
		t.Errorf("watches asked for resourceVersions %s, want %s", got, want)
	}
	if stats.Events != n {
		t.Errorf("the loop saw %d events, want %d", stats.Events, n)
	}
	// Every event, in order, then the end of the first watch, then the
	// second watch.
	events, next := 0, 1001
	var order []string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Event:
			if v.ResourceVersion != fmt.Sprint(next) {
				t.Fatalf("event %d has resourceVersion %s, want %d", events+1, v.ResourceVersion, next)
			}
			events++
			next++
		case *record.End:
			if !v.Request {
				order = append(order, fmt.Sprintf("end %s after %d events", v.How, events))
			}
		case *record.WatchStart:
			order = append(order, fmt.Sprintf("watch %d after %d events", v.Number, events))
		}
	}
	want := []string{"watch 1 after 0 events", fmt.Sprintf("end last-chunk after %d events", n), fmt.Sprintf("watch 2 after %d events", n)}
	if len(order) < 3 || strings.Join(order[:3], "; ") != strings.Join(want, "; ") {
		t.Errorf("records: %s; want %s", strings.Join(order, "; "), strings.Join(want, "; "))
	}
}

// TestLoopForbiddenIsFatal: a 403 on the watch stops the loop with the
// server's message instead of retrying forever.
func TestLoopForbiddenIsFatal(t *testing.T) {
	fs := &fakeServer{t: t, list: []string{listBody("1")}, watches: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps is forbidden: User \"x\" cannot watch resource \"configmaps\"","reason":"Forbidden","code":403}`)
		},
	}}
	err := runToEnd(t, fs, WatchOptions{Resource: withGVR(configmaps()), Namespace: "default"})
	if err == nil || !strings.Contains(err.Error(), "cannot watch resource") {
		t.Fatalf("Run = %v, want the 403 message", err)
	}
}

// runToEnd runs the list-watch loop through kubectl proxy's stand-in h
// until it ends on its own, and returns how it ended (no deadline of its
// own: a loop that never ends is caught by go test's -timeout).
func runToEnd(t *testing.T, h http.Handler, opt WatchOptions) error {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := Connect(ConnectOptions{ProxyURL: srv.URL}, &collect{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), c, opt)
	c.Close()
	return err
}

func TestDiffStates(t *testing.T) {
	old := map[string]record.Version{"a": {UID: "1", ResourceVersion: "1"}, "b": {UID: "2", ResourceVersion: "1"}, "c": {UID: "3", ResourceVersion: "1"}}
	fresh := map[string]record.Version{"a": {UID: "1", ResourceVersion: "1"}, "b": {UID: "2", ResourceVersion: "5"}, "d": {UID: "4", ResourceVersion: "6"}}
	r := diffStates(old, fresh)
	got := fmt.Sprint(r.Appeared, r.Disappeared, r.Changed, r.Unchanged)
	if got != "[d] [c] [b] 1" {
		t.Errorf("diff %s", got)
	}
}

func withGVR(r Resource) Resource {
	r.GVR.Version, r.GVR.Resource = "v1", "configmaps"
	return r
}

// TestLoopGoneStatus: a 410 as the HTTP status of the watch request (not an
// ERROR event in the stream) also makes the loop list again.
func TestLoopGoneStatus(t *testing.T) {
	fs := &fakeServer{t: t, list: []string{listBody("5", "a"), listBody("9", "a", "b")}, watches: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (8)","reason":"Expired","code":410}`)
		},
	}}
	sink, _, _ := runUntil(t, fs, WatchOptions{Namespace: "kube-system"}, 2, ConnectOptions{})
	if got := strings.Join(fs.seen, ","); got != "5,9" {
		t.Errorf("watches from %s, want 5,9", got)
	}
	var status, appeared string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.End:
			if v.Status != nil && status == "" {
				status = fmt.Sprint(v.Status.Code, " ", v.Status.Reason)
			}
		case *record.Relist:
			appeared = fmt.Sprint(v.Appeared)
		}
	}
	if status != "410 Expired" || appeared != "[kube-system/b]" {
		t.Errorf("status %q, appeared %q", status, appeared)
	}
}

// TestLoopIdleTimeout: a server that sends the response headers and then
// nothing is reported as stalled after IdleTimeout, and watched again.
func TestLoopIdleTimeout(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	fs := &fakeServer{t: t, list: []string{listBody("7")}, watches: []func(http.ResponseWriter, *http.Request){stall}}
	sink, _, _ := runUntil(t, fs, WatchOptions{Namespace: "default", IdleTimeout: 300 * time.Millisecond}, 2, ConnectOptions{})
	var stalled, resumed bool
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Problem:
			stalled = stalled || v.Kind == "watch stalled"
		case *record.WatchStart:
			resumed = resumed || (v.Number == 2 && strings.Contains(v.Reason, "stalled") && v.ResourceVersion == "7")
		}
	}
	if !stalled || !resumed {
		t.Errorf("stalled=%v resumed=%v; records %v", stalled, resumed, sink.snapshot())
	}
}

// TestLoopServerFaults: a 500 is retried; a watch answered with a
// Content-Length body holding one ERROR event (not chunked, as some servers
// do) still re-lists; a Status pretty-printed over several lines is read.
func TestLoopServerFaults(t *testing.T) {
	status500 := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"etcdserver: leader changed\",\n  \"code\": 500\n}\n")
	}
	goneCL := func(w http.ResponseWriter, r *http.Request) {
		body := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 3 (9)","reason":"Expired","code":410}}` + "\n"
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, body)
	}
	fs := &fakeServer{t: t, list: []string{listBody("3"), listBody("9")},
		watches: []func(http.ResponseWriter, *http.Request){status500, goneCL}}
	sink, _, _ := runUntil(t, fs, WatchOptions{Namespace: "default",
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}, 3, ConnectOptions{})
	if got := strings.Join(fs.seen, ","); got != "3,3,9" {
		t.Errorf("watches from %s, want 3,3,9 (retry after the 500, re-list after the 410)", got)
	}
	var status500Seen, retried, errEvent bool
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.End:
			status500Seen = status500Seen || (v.Status != nil && v.Status.Code == 500 && v.Status.Message == "etcdserver: leader changed")
		case *record.Retry:
			retried = true
		case *record.Event:
			errEvent = errEvent || (v.Type == "ERROR" && v.Status != nil && v.Status.Code == 410 && len(v.Chunks) == 0)
		}
	}
	if !status500Seen || !retried || !errEvent {
		t.Errorf("500 status shown %v, retried %v, 410 ERROR event from a Content-Length body %v", status500Seen, retried, errEvent)
	}
}

// runUntil runs the list-watch loop against fs until kwatch has decoded the
// responses to n watch requests, then stops it as kwatch stream does on
// Ctrl-C (Run, then Client.Close). It returns the records, the loop's stats
// and its error.
func runUntil(t *testing.T, fs *fakeServer, opt WatchOptions, n int, co ConnectOptions) (*collect, *Stats, error) {
	t.Helper()
	srv := httptest.NewServer(fs)
	defer srv.Close()
	sink := &collect{}
	co.ProxyURL = srv.URL
	c, err := Connect(co, sink)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Resource.GVR.Resource == "" && opt.Raw == "" {
		opt.Resource = withGVR(configmaps())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stats *Stats
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		stats, runErr = Run(ctx, c, opt)
	}()
	// Wait until kwatch has decoded the response to the nth watch request
	// (what the client saw, not what the server did: a watch cancelled
	// between the two has no response to show), or until Run ends.
	if !sink.waitResponses(n, done) {
		c.Close()
		t.Fatalf("Run ended (%v) before %d watch responses were decoded", runErr, n)
	}
	cancel()
	<-done
	c.Close()
	return sink, stats, runErr
}

// TestWireWatcherDeliversAfterStop: events decoded after Stop (the bytes
// already read when the watchdog or Ctrl-C stopped the watch) still reach
// the loop, so that it resumes from the last event printed; abandon ends
// the delivery when the loop reads no more.
func TestWireWatcherDeliversAfterStop(t *testing.T) {
	ww := newWireWatcher(func() {})
	for i := 1; i <= 1000; i++ {
		ww.push(toWatchEvent(&record.Event{Type: "MODIFIED", ResourceVersion: fmt.Sprint(i)}))
	}
	ww.Stop()
	for i := 1001; i <= 1500; i++ {
		ww.push(toWatchEvent(&record.Event{Type: "MODIFIED", ResourceVersion: fmt.Sprint(i)}))
	}
	ww.finish()
	n, last := 0, ""
	for ev := range ww.ResultChan() {
		n++
		last = ev.Object.(interface{ GetResourceVersion() string }).GetResourceVersion()
	}
	if n != 1500 || last != "1500" {
		t.Errorf("%d events, the last at resourceVersion %q; want 1500, \"1500\"", n, last)
	}

	ww = newWireWatcher(func() {})
	for i := 1; i <= 1000; i++ {
		ww.push(toWatchEvent(&record.Event{Type: "MODIFIED", ResourceVersion: fmt.Sprint(i)}))
	}
	<-ww.ResultChan()
	ww.abandon()
	<-drained(ww.ResultChan()) // a hang is caught by go test's -timeout
}

// drained reads c to its end and then closes the channel it returns.
func drained(c <-chan watch.Event) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range c {
		}
		close(done)
	}()
	return done
}

// TestConnectRefusesHTTP2ThroughProxy: kubectl proxy speaks HTTP/1.1, which
// the tap decodes; decoding the same body as HTTP/2 too showed every event
// twice (new-user trial, with the proxy picked by default).
func TestConnectRefusesHTTP2ThroughProxy(t *testing.T) {
	_, err := Connect(ConnectOptions{ProxyURL: "http://127.0.0.1:8001", HTTP2: true}, &collect{})
	if err == nil || !strings.Contains(err.Error(), "not to kubectl proxy") {
		t.Errorf("Connect with a proxy and HTTP2: %v, want a refusal", err)
	}
}

// TestLoopNotFoundNamesThePath: a --raw watch answered 404 ends with an
// error that names the path and where to look (new-user trial: it said
// only "the server could not find the requested resource").
func TestLoopNotFoundNamesThePath(t *testing.T) {
	err := runToEnd(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`)
	}), WatchOptions{Raw: "/api/v1/nonexistent?watch=1"})
	if err == nil || !strings.Contains(err.Error(), "watch /api/v1/nonexistent?watch=1: ") || !strings.Contains(err.Error(), "kubectl api-resources") {
		t.Fatalf("Run = %v, want the path and a hint", err)
	}
}

// gateSink holds up its first event until gate is closed, as a full pipe
// or a paused terminal holds up kwatch's output; blocked is closed when it
// starts holding (the decoder then holds the sink's lock).
type gateSink struct {
	collect
	gate, blocked chan struct{}
	once          sync.Once
}

func (g *gateSink) Emit(r record.Record) {
	if _, ok := r.(*record.Event); ok {
		g.once.Do(func() {
			close(g.blocked)
			<-g.gate
		})
	}
	g.collect.Emit(r)
}

func (g *gateSink) stalls() int {
	n := 0
	for _, r := range g.snapshot() {
		if p, ok := r.(*record.Problem); ok && p.Kind == "watch stalled" {
			n++
		}
	}
	return n
}

// TestLoopIdleTimeoutOutputBlocked: while kwatch's own output is held up
// for longer than IdleTimeout, the reads wait for the decoder and no byte
// comes in; that is not the server stalling, and the watch goes on. When
// the server then does stop sending, the stall is reported. The watchdog
// runs on a fake clock, so that a slow or loaded machine (a reader not
// scheduled for a while) cannot make a stall of its own.
func TestLoopIdleTimeoutOutputBlocked(t *testing.T) {
	quiet := make(chan struct{})
	busy := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := 0; ; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-quiet:
				<-r.Context().Done()
				return
			default:
			}
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"default","resourceVersion":"%d"}}}`+"\n", i, 10+i)
			w.(http.Flusher).Flush()
		}
	}
	fs := &fakeServer{t: t, list: []string{listBody("7")}, watches: []func(http.ResponseWriter, *http.Request){busy}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	sink := &gateSink{gate: make(chan struct{}), blocked: make(chan struct{})}
	c, err := Connect(ConnectOptions{ProxyURL: srv.URL}, sink)
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	c.sink.clock = clk
	trace := make(chan string, 16)
	c.sink.watchdogTrace = func(s string) {
		select {
		case trace <- s:
		default: // only the first judgement is read
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = Run(ctx, c, WatchOptions{Namespace: "default", IdleTimeout: 300 * time.Millisecond, Resource: withGVR(configmaps())})
	}()
	// The output is held up: the decoder waits with the sink's lock, the
	// reads wait for the decoder. Far more than IdleTimeout passes.
	<-sink.blocked
	for !clk.HasWaiters() { // the watchdog's ticker
		time.Sleep(time.Millisecond)
	}
	// Until the reads have filled the tap's queue and wait, a read may
	// come after a step: step until the watchdog sees a silence.
	for judging := false; !judging; {
		clk.Step(10 * time.Second)
		select {
		case s := <-trace:
			judging = s == "judging"
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The watchdog now waits for the lock the held-up output holds.
	close(sink.gate)
	if s := <-trace; s != "cleared" {
		t.Errorf("the watchdog %s a stall while only the output was held up", s)
	}
	// The server goes quiet: a real stall, reported once time passes.
	close(quiet)
	for sink.stalls() == 0 {
		clk.Step(time.Second)
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	c.Close()
	events := 0
	for _, r := range sink.snapshot() {
		if _, ok := r.(*record.Event); ok {
			events++
		}
	}
	fs.mu.Lock()
	first := fs.seen[0]
	fs.mu.Unlock()
	if first != "7" || events == 0 {
		t.Errorf("first watch from %q, %d events; want from 7, with events", first, events)
	}
}

// status answers a request with an error status and a Status body, as the
// API server does.
func status(code int, reason, message string, header ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
	}
}

// TestLoopPermanentErrors: an answer that retrying cannot change stops
// the loop at once, after one request, with the path and what to do.
func TestLoopPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(w http.ResponseWriter, r *http.Request)
		want string
	}{
		{"400", status(400, "BadRequest", "unable to parse requirement"), "check the selectors"},
		{"401", status(401, "Unauthorized", "Unauthorized"), "Unauthorized"},
		{"404", status(404, "NotFound", "the server could not find the requested resource"), "is the namespace right"},
		{"405", status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"), "cannot be watched"},
		{"406", status(406, "NotAcceptable", "only the following media types are accepted: application/json"), "media type"},
		{"422", status(422, "Invalid", `fieldSelector: Invalid value: "x"`), "check the selectors"},
		{"500 bad resourceVersion", status(500, "", `resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`),
			`resourceVersion "abc" is not valid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakeServer{t: t, list: []string{listBody("1")}, watches: []func(http.ResponseWriter, *http.Request){tc.h}}
			rv := ""
			if strings.HasPrefix(tc.name, "500") {
				rv = "abc"
			}
			err := runToEnd(t, fs, WatchOptions{Resource: withGVR(configmaps()), Namespace: "default", ResourceVersion: rv})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/api/v1/namespaces/default/configmaps") {
				t.Errorf("Run = %v, want the path and %q", err, tc.want)
			}
			if len(fs.seen) != 1 {
				t.Errorf("%d watch requests, want 1 (no retry)", len(fs.seen))
			}
		})
	}
}

// TestLoopTransientErrors: 503 and 429 with Retry-After are retried (the
// loop counts its own retries), and the watch then opens; a run that never opened a watch ends with
// ErrOnlyRetried.
func TestLoopTransientErrors(t *testing.T) {
	fast := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}
	fs := &fakeServer{t: t, list: []string{listBody("4")}, watches: []func(http.ResponseWriter, *http.Request){
		status(503, "ServiceUnavailable", "etcd is unavailable"),
		status(429, "TooManyRequests", "too many requests, please try again later", "Retry-After", "1"),
	}}
	sink, stats, _ := runUntil(t, fs, WatchOptions{Namespace: "default", Backoff: fast}, 3, ConnectOptions{})
	// client-go retries a 429 (or 5xx) that has Retry-After itself, after
	// that long: the loop counts the 503 only, and the 429 is still shown.
	// (Whether the loop had counted the third watch as opened when it was
	// stopped depends on timing: not asserted.)
	if stats.Retries != 1 || len(fs.seen) != 3 {
		t.Errorf("retries %d, requests %d; want 1 and 3", stats.Retries, len(fs.seen))
	}
	var codes []int
	for _, r := range sink.snapshot() {
		if v, ok := r.(*record.Response); ok {
			codes = append(codes, v.StatusCode)
		}
	}
	if fmt.Sprint(codes) != "[503 429 200]" {
		t.Errorf("responses shown %v, want [503 429 200]", codes)
	}

	// Every watch is refused, however many retries come before the
	// cancel lands.
	always := &fakeServer{t: t, list: []string{listBody("4")}, rest: status(503, "ServiceUnavailable", "etcd is unavailable")}
	_, stats, err := runUntil(t, always, WatchOptions{Namespace: "default", Backoff: fast}, 3, ConnectOptions{})
	if !errors.Is(err, ErrOnlyRetried) || !strings.Contains(err.Error(), "etcd is unavailable") || stats.Opened != 0 {
		t.Errorf("Run = %v (opened %d), want ErrOnlyRetried naming the last error", err, stats.Opened)
	}
}

// TestLoopProtoFallback: --proto on a resource served only as JSON (406,
// as for custom resources) watches again as JSON at once, and says so.
func TestLoopProtoFallback(t *testing.T) {
	fs := &fakeServer{t: t, list: []string{listBody("8")}, watches: []func(http.ResponseWriter, *http.Request){
		status(406, "NotAcceptable", "only the following media types are accepted: application/json, application/yaml"),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", Proto: true}, 2, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.accepts) != 2 || !strings.HasPrefix(fs.accepts[0], "application/vnd.kubernetes.protobuf") || fs.accepts[1] != "application/json" {
		t.Errorf("Accept headers %q, want protobuf then JSON", fs.accepts)
	}
	var warned bool
	var reasons []string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Problem:
			warned = warned || (v.Kind == "protobuf not served" && v.Warning)
		case *record.WatchStart:
			reasons = append(reasons, v.Reason)
		}
	}
	if !warned || stats.Retries != 0 || strings.Join(reasons, "; ") != "after LIST; as JSON: protobuf not served" {
		t.Errorf("warning %v, retries %d, watch reasons %q", warned, stats.Retries, reasons)
	}
}

// TestLoopRawGone: a --raw watch whose resourceVersion is too old cannot be
// listed again: it stops with what to do, whether the 410 comes as the
// request's status or as an ERROR event, and is not sent again.
func TestLoopRawGone(t *testing.T) {
	gone := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (90)","reason":"Expired","code":410}}`
	for name, h := range map[string]func(http.ResponseWriter, *http.Request){
		"status": status(410, "Expired", "too old resource version: 5 (90)"),
		"event":  events(gone),
		// As kube-apiserver does: the ERROR event, and the body left open.
		"event, body kept open": func(w http.ResponseWriter, r *http.Request) {
			events(gone)(w, r)
			<-r.Context().Done()
		},
	} {
		t.Run(name, func(t *testing.T) {
			fs := &fakeServer{t: t, list: []string{listBody("1")}, watches: []func(http.ResponseWriter, *http.Request){h}}
			err := runToEnd(t, fs, WatchOptions{Raw: "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=5"})
			if err == nil || !strings.Contains(err.Error(), "resourceVersion 5 is too old (410 Gone)") || len(fs.seen) != 1 {
				t.Errorf("Run = %v after %d requests, want one request and the 410 explained", err, len(fs.seen))
			}
		})
	}
}

// TestLoopRelistCounted: a run started from --resource-version that falls
// behind lists for the first time: that LIST is a re-list, and counted.
func TestLoopRelistCounted(t *testing.T) {
	fs := &fakeServer{t: t, list: []string{listBody("90", "a")}, watches: []func(http.ResponseWriter, *http.Request){
		status(410, "Expired", "too old resource version: 5 (90)"),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", ResourceVersion: "5"}, 2, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, r := range sink.snapshot() {
		if v, ok := r.(*record.List); ok {
			reasons = append(reasons, v.Reason)
		}
	}
	if stats.Relists != 1 || strings.Join(reasons, ",") != "re-list after 410 Gone" {
		t.Errorf("relists %d, lists %q", stats.Relists, reasons)
	}
}

// TestLoopWatchListFallback: a server that refuses a streaming list (an
// older one, or with the feature off: 400 or 422) is listed, then watched,
// with a warning, as client-go falls back.
func TestLoopWatchListFallback(t *testing.T) {
	fs := &fakeServer{t: t, list: []string{listBody("7", "a")}, watches: []func(http.ResponseWriter, *http.Request){
		status(422, "Invalid", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"),
		// The plain watch after the LIST ends as a server timeout does:
		// a resume, neither a retry nor a re-list.
		events(`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"8"}}}`),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", WatchList: true}, 3, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	var paths, reasons []string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Problem:
			warned = warned || v.Kind == "watch-list refused"
		case *record.WatchStart:
			paths, reasons = append(paths, v.Path), append(reasons, v.Reason)
		}
	}
	if !warned || stats.Lists != 1 || stats.Relists != 0 || stats.Retries != 0 || len(paths) < 3 || !strings.Contains(paths[0], "sendInitialEvents=true") ||
		strings.Contains(paths[1], "sendInitialEvents") || !strings.Contains(paths[1], "resourceVersion=7") ||
		!strings.Contains(paths[2], "resourceVersion=8") || !strings.HasPrefix(reasons[2], "resume: ") {
		t.Errorf("warned %v, lists %d, relists %d, retries %d, watches %q, reasons %q", warned, stats.Lists, stats.Relists, stats.Retries, paths, reasons)
	}
}

// TestLoopCBORFallback: --cbor on a server without CBOR (406) watches again
// as JSON at once, with the same streaming list, and says so.
func TestLoopCBORFallback(t *testing.T) {
	fs := &fakeServer{t: t, watches: []func(http.ResponseWriter, *http.Request){
		status(406, "NotAcceptable", "406: Not Acceptable Available representations: application/json, application/yaml, application/vnd.kubernetes.protobuf"),
		events(`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}`),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", WatchList: true, CBOR: true}, 2, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.accepts) < 2 || fs.accepts[0] != "application/cbor" || fs.accepts[1] != "application/json" {
		t.Errorf("Accept headers %q, want CBOR then JSON", fs.accepts)
	}
	var warned bool
	var paths, reasons []string
	for _, r := range sink.snapshot() {
		switch v := r.(type) {
		case *record.Problem:
			warned = warned || (v.Kind == "CBOR not served" && v.Warning)
		case *record.WatchStart:
			paths, reasons = append(paths, v.Path), append(reasons, v.Reason)
		}
	}
	if !warned || stats.Retries != 0 || stats.Lists != 0 || stats.Relists != 0 || len(paths) < 2 || !strings.Contains(paths[1], "sendInitialEvents=true") ||
		strings.Join(reasons[:2], "; ") != "initial (watch-list); as JSON: CBOR not served" {
		t.Errorf("warning %v, retries %d, lists %d, relists %d, watches %q, reasons %q", warned, stats.Retries, stats.Lists, stats.Relists, paths, reasons)
	}
}

// TestLoopWatchListRetried: a streaming list that fails before its
// initial-events-end bookmark (a 503 here) is asked for again as a
// streaming list, as client-go's reflector does, not resumed as a plain
// watch; the first one failing is no re-list.
func TestLoopWatchListRetried(t *testing.T) {
	fs := &fakeServer{t: t, watches: []func(http.ResponseWriter, *http.Request){
		status(503, "ServiceUnavailable", "the server is shutting down"),
		events(`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}`),
	}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", WatchList: true}, 2, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range sink.snapshot() {
		if v, ok := r.(*record.WatchStart); ok {
			paths = append(paths, v.Path)
		}
	}
	if len(paths) < 2 || !strings.Contains(paths[1], "sendInitialEvents=true") || stats.Relists != 0 || stats.Retries != 1 {
		t.Errorf("watches %q, relists %d, retries %d", paths, stats.Relists, stats.Retries)
	}
}

// TestLoopNameAbsent: RESOURCE/NAME whose object is not in the first state
// (a streaming list's initial events, or the LIST) is warned about once, and
// watched for; a present object, or no NAME, is not warned about. A first
// state that is empty because the namespace does not exist says so, NAME
// or not.
func TestLoopNameAbsent(t *testing.T) {
	initialEnd := `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}}`
	added := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"web","namespace":"default","resourceVersion":"9"}}}`
	for _, c := range []struct {
		name      string
		opt       WatchOptions
		list      string
		watches   []func(http.ResponseWriter, *http.Request)
		responses int
		want      string
		noNS      bool
	}{
		{"watch-list absent", WatchOptions{Name: "web", WatchList: true}, "",
			[]func(http.ResponseWriter, *http.Request){events(initialEnd), events(added)}, 2,
			`[object not found: no configmaps named "web" in namespace default]`, false},
		{"watch-list present", WatchOptions{Name: "web", WatchList: true}, "",
			[]func(http.ResponseWriter, *http.Request){events(added, initialEnd)}, 1, "[]", false},
		{"watch-list no name", WatchOptions{WatchList: true}, "",
			[]func(http.ResponseWriter, *http.Request){events(initialEnd), events(added)}, 2, "[]", false},
		{"list absent", WatchOptions{Name: "web"}, listBody("4"),
			[]func(http.ResponseWriter, *http.Request){events(added)}, 1,
			`[object not found: no configmaps named "web" in namespace default]`, false},
		{"list present", WatchOptions{Name: "web"}, listBody("4", "web"), nil, 1, "[]", false},
		{"watch-list no namespace", WatchOptions{WatchList: true}, "",
			[]func(http.ResponseWriter, *http.Request){events(initialEnd), events(added)}, 2,
			`[namespace not found: namespace "default" does not exist: no configmaps in it]`, true},
		{"list no namespace, name", WatchOptions{Name: "web"}, listBody("4"), nil, 1,
			`[namespace not found: namespace "default" does not exist: no configmaps in it]`, true},
		{"all namespaces", WatchOptions{WatchList: true, AllNamespaces: true}, "",
			[]func(http.ResponseWriter, *http.Request){events(initialEnd), events(added)}, 2, "[]", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &fakeServer{t: t, list: []string{c.list}, watches: c.watches, noNamespace: c.noNS}
			if !c.opt.AllNamespaces {
				c.opt.Namespace = "default"
			}
			sink, _, err := runUntil(t, fs, c.opt, c.responses, ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var warnings []string
			for _, r := range sink.snapshot() {
				if v, ok := r.(*record.Problem); ok {
					warnings = append(warnings, v.Kind+": "+v.Detail)
				}
			}
			if fmt.Sprint(warnings) != c.want {
				t.Errorf("problems %v, want %s", warnings, c.want)
			}
		})
	}
}

// TestLoopListErrorWithoutData: a LIST body client-go cannot decode for
// want of a kind is not quoted in the retry shown (apimachinery's error
// quotes it whole, and it may be a list of Secrets); found by a
// hostile-input trial.
func TestLoopListErrorWithoutData(t *testing.T) {
	bad := `{"apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}]}`
	fs := &fakeServer{t: t, list: []string{bad, listBody("4")}}
	sink, stats, err := runUntil(t, fs, WatchOptions{Namespace: "default", Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}, 1, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var retries []string
	for _, r := range sink.snapshot() {
		if v, ok := r.(*record.Retry); ok {
			retries = append(retries, v.Error)
		}
	}
	if stats.Retries != 1 || len(retries) != 1 || strings.Contains(retries[0], "c2VjcmV0") || !strings.Contains(retries[0], "is missing") {
		t.Errorf("retries %d: %q", stats.Retries, retries)
	}
}

// TestLoopListedSecretsRedacted: the objects a LIST of secrets gives are
// redacted as Secrets whatever their kind says (a hostile server's
// SecretList of items that say ConfigMap had them printed); a LIST of
// configmaps is shown as it came.
func TestLoopListedSecretsRedacted(t *testing.T) {
	body := `{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"4"},"items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s","namespace":"default"},"data":{"p":"c2VjcmV0"}}]}`
	for resource, redacted := range map[string]bool{"secrets": true, "configmaps": false} {
		fs := &fakeServer{t: t, list: []string{body}}
		res := Resource{Kind: "Secret", Namespaced: true, GVR: schema.GroupVersionResource{Version: "v1", Resource: resource}}
		sink, _, err := runUntil(t, fs, WatchOptions{Namespace: "default", Resource: res, ListObjects: true}, 1, ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var objs []string
		for _, r := range sink.snapshot() {
			if v, ok := r.(*record.List); ok {
				for _, o := range v.Objects {
					objs = append(objs, string(o.JSON))
				}
			}
		}
		if len(objs) != 1 || strings.Contains(objs[0], "c2VjcmV0") != !redacted {
			t.Errorf("a LIST of %s: listed %q; want redacted %v", resource, objs, redacted)
		}
	}
}

// TestLoopQuiet: a watch that asked for bookmarks and hears neither an
// event nor a bookmark for QuietAfter is said once, as a warning; when it
// watches from a resourceVersion ahead of the server's current one (an etcd
// reset: kwatch stream --resource-version 496 against a cluster at 23),
// the warning says so. A watch that hears bookmarks is not said.
func TestLoopQuiet(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	bookmarks := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for {
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"500"}}}`+"\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	for _, c := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		said   bool
	}{{"silent", stall, true}, {"bookmarks", bookmarks, false}} {
		t.Run(c.name, func(t *testing.T) {
			fs := &fakeServer{t: t, list: []string{listBody("23")}, rest: c.answer}
			srv := httptest.NewServer(fs)
			defer srv.Close()
			sink := &collect{}
			cl, err := Connect(ConnectOptions{ProxyURL: srv.URL}, sink)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = Run(ctx, cl, WatchOptions{Resource: withGVR(configmaps()), Namespace: "default", ResourceVersion: "496", QuietAfter: 300 * time.Millisecond})
			}()
			var quiet []*record.Problem
			deadline := time.Now().Add(30 * time.Second)
			for len(quiet) == 0 && time.Now().Before(deadline) && (c.said || len(sink.snapshot()) < 30) {
				time.Sleep(50 * time.Millisecond)
				quiet = quiet[:0]
				for _, r := range sink.snapshot() {
					if p, ok := r.(*record.Problem); ok && p.Kind == KindQuiet {
						quiet = append(quiet, p)
					}
				}
			}
			cancel()
			<-done
			switch {
			case !c.said && len(quiet) > 0:
				t.Errorf("said of a watch that hears bookmarks: %+v", quiet[0])
			case c.said && len(quiet) != 1:
				t.Fatalf("%d quiet warnings, want 1: %v", len(quiet), sink.snapshot())
			case c.said && (!quiet[0].Warning || !strings.Contains(quiet[0].Detail, "it watches from resourceVersion 496, ahead of the server's current 23") ||
				!strings.Contains(quiet[0].Hint, "etcd was restored or reset")):
				t.Errorf("warning %+v", quiet[0])
			}
		})
	}
}
