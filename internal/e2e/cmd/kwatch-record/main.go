// Command kwatch-record runs one recording scenario against the control plane
// of hack/cluster-up.sh and writes the ground truth for it. hack/record.sh
// runs it between starting and stopping tcpdump; run it through that script.
//
// The watch that gets captured is `curl -N` through kubectl proxy (plain
// HTTP on port 8001). The scenario's writes go straight to kube-apiserver
// (TLS on 6443, outside the capture filter), so the capture holds the watch
// alone. The events file is what that very curl received, decoded with
// client-go's decoders, and it is cross-checked against a second watch from
// the same resourceVersion opened with client-go directly on the API server:
// both must report the same ADDED/MODIFIED/DELETED events with the same names
// and resourceVersions.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kwatch/kwatch/internal/e2e"
)

const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf;stream=watch"
	// mediaCBOR is asked for; the server answers application/cbor-seq
	// (needs CBORServingAndStorage: make cluster-up has it on).
	mediaCBOR = "application/cbor"
	// mediaTable is what kubectl get -w asks for.
	mediaTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	// pause between a scenario's writes, so that each event travels on an
	// otherwise idle connection (the burst scenario has none).
	pause = 300 * time.Millisecond
)

// scenario is one recording.
type scenario struct {
	accept string // Accept header of the captured watch
	// object is the one ConfigMap the watch selects with a field selector;
	// empty means the watch covers the whole namespace.
	object string
	// extra query parameters of the captured watch.
	query url.Values
	// gzip asks for Accept-Encoding: gzip, as every Go client does.
	gzip bool
	// watchList makes the captured watch a streaming list
	// (sendInitialEvents=true), as client-go 0.37's informers do; the
	// objects in pre exist before it starts and come as its initial
	// events, followed by the initial-events-end bookmark.
	watchList bool
	pre       []string
	// selfEnding: the server ends the watch (timeoutSeconds), we do not.
	selfEnding bool
	// writes performs the scenario's changes and returns how many watch
	// events (other than bookmarks) they cause.
	writes func(ctx context.Context, cms typedcorev1.ConfigMapInterface) (int, error)
	// check validates the captured events beyond the cross-check.
	check func(events []e2e.Event) error
}

var scenarios = map[string]scenario{
	// A ConfigMap created, edited twice and deleted.
	"watch": {
		accept: mediaJSON,
		object: "watched",
		writes: createEditDelete("watched", 2, smallData),
		check:  wantTypes("ADDED", "MODIFIED", "MODIFIED", "DELETED"),
	},
	// The same with bookmarks allowed and a 5 s server-side timeout: the
	// server sends a BOOKMARK about 2 s before the deadline, then ends the
	// response (last-chunk).
	"bookmarks": {
		accept:     mediaJSON,
		object:     "bookmarked",
		query:      url.Values{"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"5"}},
		selfEnding: true,
		writes:     createEditDelete("bookmarked", 1, smallData),
		check: func(events []e2e.Event) error {
			if err := wantTypes("ADDED", "MODIFIED", "DELETED")(withoutBookmarks(events)); err != nil {
				return err
			}
			if len(events) == len(withoutBookmarks(events)) {
				return errors.New("no BOOKMARK event")
			}
			return nil
		},
	},
	// The "watch" scenario with protobuf framing (4-byte length prefixes).
	"proto": {
		accept: mediaProtobuf,
		object: "protobuf",
		writes: createEditDelete("protobuf", 2, smallData),
		check:  wantTypes("ADDED", "MODIFIED", "MODIFIED", "DELETED"),
	},
	// The "watch" scenario as CBOR (one self-described data item per
	// event, RFC 8742).
	"cbor": {
		accept: mediaCBOR,
		object: "cbor",
		writes: createEditDelete("cbor", 2, smallData),
		check:  wantTypes("ADDED", "MODIFIED", "MODIFIED", "DELETED"),
	},
	// A gzip'd streaming list, as a client-go 0.37 informer gets it: two
	// ConfigMaps as initial events, the initial-events-end bookmark, then a
	// ConfigMap created, edited and deleted; a gzip member per flush.
	"watchlist-gzip": {
		accept:    mediaJSON,
		gzip:      true,
		watchList: true,
		pre:       []string{"pre-a", "pre-b"},
		writes:    createEditDelete("later", 1, smallData),
		check: func(events []e2e.Event) error {
			// The initial-events-end bookmark comes right after the
			// initial events; the server may add other bookmarks.
			if len(events) < 3 || events[2].Type != "BOOKMARK" {
				return errors.New("no BOOKMARK right after the two initial events")
			}
			return wantTypes("ADDED", "ADDED", "ADDED", "MODIFIED", "DELETED")(withoutBookmarks(events))
		},
	},
	// What kubectl get -w asks for: Table rows (PartialObjectMetadata).
	"table": {
		accept: mediaTable,
		object: "table",
		writes: createEditDelete("table", 1, smallData),
		check:  wantTypes("ADDED", "MODIFIED", "DELETED"),
	},
	// A ~200 KB ConfigMap: each event spans many chunks and TCP segments.
	"big": {
		accept: mediaJSON,
		object: "big",
		writes: createEditDelete("big", 1, bigData),
		check:  wantTypes("ADDED", "MODIFIED", "DELETED"),
	},
	// 100 writes as fast as the server takes them: 50 creates (10 at a
	// time), then one deletecollection that deletes all 50.
	"burst": {
		accept: mediaJSON,
		writes: burst,
		check: func(events []e2e.Event) error {
			var added, deleted int
			for _, ev := range events {
				switch ev.Type {
				case "ADDED":
					added++
				case "DELETED":
					deleted++
				default:
					return fmt.Errorf("unexpected %s event", ev.Type)
				}
			}
			if added != burstSize || deleted != burstSize {
				return fmt.Errorf("got %d ADDED and %d DELETED, want %d of each", added, deleted, burstSize)
			}
			return nil
		},
	},
}

const burstSize = 50

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server (direct, for the writes and the cross-check)")
		proxyURL   = flag.String("proxy-url", os.Getenv("PROXY_URL"), "kubectl proxy base URL (the captured watch goes through it)")
		name       = flag.String("scenario", "", "scenario: "+strings.Join(scenarioNames(), ", "))
		out        = flag.String("out", "", "events file to write (JSON array of {type, name, resourceVersion})")
		bodyOut    = flag.String("body", "", "also keep the raw watch body curl received here (optional)")
		curl       = flag.String("curl", "curl", "curl binary")
	)
	flag.Parse()
	sc, ok := scenarios[*name]
	if !ok || *kubeconfig == "" || *proxyURL == "" || *out == "" {
		fmt.Fprintf(os.Stderr, "usage: kwatch-record -kubeconfig K -proxy-url U -scenario {%s} -out FILE\n", strings.Join(scenarioNames(), "|"))
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := record(ctx, *name, sc, *kubeconfig, strings.TrimRight(*proxyURL, "/"), *out, *bodyOut, *curl); err != nil {
		fmt.Fprintf(os.Stderr, "kwatch-record %s: %v\n", *name, err)
		os.Exit(1)
	}
}

func scenarioNames() []string {
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kwatch-record: "+format+"\n", args...)
}

func record(ctx context.Context, name string, sc scenario, kubeconfig, proxyURL, out, bodyOut, curl string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// A fixed namespace per scenario keeps the recorded URLs and names the
	// same from one recording to the next.
	ns := "kwatch-" + name
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	// Leftovers of an interrupted recording would add events.
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("emptying namespace %s: %w", ns, err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) != 0 {
		return fmt.Errorf("namespace %s still has %d configmaps", ns, len(list.Items))
	}
	for _, name := range sc.pre {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: smallData(0)}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
	}
	if len(sc.pre) > 0 {
		if list, err = cms.List(ctx, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	// Both watches start at this resourceVersion, so they must see exactly
	// the same events, whenever each connection is established (a
	// streaming list: the state at it or later, then the changes).
	rv := list.ResourceVersion
	fieldSelector := ""
	if sc.object != "" {
		fieldSelector = "metadata.name=" + sc.object
	}

	// The cross-check watch: client-go, directly on the API server.
	directOpts := metav1.ListOptions{ResourceVersion: rv, FieldSelector: fieldSelector}
	if sc.watchList {
		t := true
		directOpts.SendInitialEvents, directOpts.AllowWatchBookmarks = &t, true
		directOpts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	direct, err := cms.Watch(ctx, directOpts)
	if err != nil {
		return fmt.Errorf("cross-check watch: %w", err)
	}
	defer direct.Stop()
	var (
		mu           sync.Mutex
		directEvents []e2e.Event
	)
	directDone := make(chan struct{})
	go func() {
		defer close(directDone)
		for ev := range direct.ResultChan() {
			e := e2e.Event{Type: string(ev.Type)}
			if o, ok := ev.Object.(metav1.Object); ok {
				e.Name, e.ResourceVersion = o.GetName(), o.GetResourceVersion()
			}
			mu.Lock()
			directEvents = append(directEvents, e)
			mu.Unlock()
		}
	}()

	// The captured watch: curl -N through kubectl proxy.
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}}
	if fieldSelector != "" {
		q.Set("fieldSelector", fieldSelector)
	}
	for k, v := range sc.query {
		q[k] = v
	}
	if sc.watchList {
		q.Set("sendInitialEvents", "true")
		q.Set("resourceVersionMatch", "NotOlderThan")
		q.Set("allowWatchBookmarks", "true")
	}
	watchURL := proxyURL + "/api/v1/namespaces/" + ns + "/configmaps?" + q.Encode()
	tmp, err := os.MkdirTemp("", "kwatch-record-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	headerFile, bodyFile := filepath.Join(tmp, "headers"), filepath.Join(tmp, "body")
	args := []string{"-sS", "-N", "--http1.1", "-H", "Accept: " + sc.accept, "-D", headerFile, "-o", bodyFile, watchURL}
	if sc.gzip {
		// Not --compressed: curl would inflate the body it writes.
		args = append([]string{"-H", "Accept-Encoding: gzip"}, args...)
	}
	cmd := exec.CommandContext(ctx, curl, args...)
	var curlErr bytes.Buffer
	cmd.Stderr = &curlErr
	logf("watching %s (Accept: %s)", watchURL, sc.accept)
	if err := cmd.Start(); err != nil {
		return err
	}
	curlDone := make(chan error, 1)
	go func() { curlDone <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill() // no-op once it has exited
	}()
	curlExited := func() bool {
		select {
		case err := <-curlDone:
			curlDone <- err
			return true
		default:
			return false
		}
	}

	// Start writing only once the response headers are in, so that every
	// event crosses an established, idle watch connection in the capture.
	if err := poll(10*time.Second, func() (bool, error) {
		h, _ := os.ReadFile(headerFile)
		if bytes.Contains(h, []byte("\r\n\r\n")) {
			return true, nil
		}
		if curlExited() {
			return false, fmt.Errorf("curl exited before the response headers: %s", curlErr.String())
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("waiting for the watch response headers: %w", err)
	}
	time.Sleep(pause)

	want, err := sc.writes(ctx, cms)
	if err != nil {
		return fmt.Errorf("scenario writes: %w", err)
	}
	want += len(sc.pre)
	logf("%d writes done; waiting for %d events on both watches", want, want)

	if err := poll(30*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(withoutBookmarks(directEvents)) >= want, nil
	}); err != nil {
		return fmt.Errorf("cross-check watch: %w", err)
	}
	if err := poll(30*time.Second, func() (bool, error) {
		body, _ := os.ReadFile(bodyFile)
		evs, _ := decodeBody(sc, sc.accept, body)
		if len(withoutBookmarks(evs)) >= want {
			return true, nil
		}
		if curlExited() {
			return false, fmt.Errorf("curl exited after %d of %d events: %s", len(evs), want, curlErr.String())
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("captured watch: %w", err)
	}

	if sc.selfEnding {
		logf("waiting for the server to end the watch")
		select {
		case err := <-curlDone:
			if err != nil {
				return fmt.Errorf("curl: %v: %s", err, curlErr.String())
			}
		case <-time.After(30 * time.Second):
			return errors.New("the server did not end the watch within 30s")
		}
	} else {
		// Let the last ACKs cross, then hang up like a client that is done.
		time.Sleep(pause)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-curlDone:
		case <-time.After(10 * time.Second):
			return errors.New("curl did not exit within 10s of SIGTERM")
		}
	}
	// Take the cross-check events before stopping that watch: client-go
	// reports the hang-up itself as an ERROR event.
	mu.Lock()
	directSeen := append([]e2e.Event(nil), directEvents...)
	mu.Unlock()
	direct.Stop()
	<-directDone

	headers, err := os.ReadFile(headerFile)
	if err != nil {
		return err
	}
	status, contentType, chunked := parseHeaders(headers)
	if status != 200 || !chunked {
		return fmt.Errorf("watch response: status %d, chunked %v; headers:\n%s", status, chunked, headers)
	}
	if !strings.HasPrefix(contentType, strings.SplitN(sc.accept, ";", 2)[0]) || (sc.gzip && !gzipped(headers)) {
		return fmt.Errorf("watch response Content-Type %q, asked for %q", contentType, sc.accept)
	}
	body, err := os.ReadFile(bodyFile)
	if err != nil {
		return err
	}
	events, err := decodeBody(sc, contentType, body)
	if err != nil {
		return fmt.Errorf("decoding the %d-byte body curl received: %w", len(body), err)
	}
	if err := sameEvents(withoutBookmarks(events), withoutBookmarks(directSeen)); err != nil {
		return fmt.Errorf("captured watch and cross-check watch disagree: %w\ncaptured: %v\ndirect:   %v", err, events, directSeen)
	}
	if err := sc.check(events); err != nil {
		return fmt.Errorf("events %v: %w", events, err)
	}
	if bodyOut != "" {
		if err := os.WriteFile(bodyOut, body, 0o644); err != nil {
			return err
		}
	}
	if err := writeEvents(out, events); err != nil {
		return err
	}
	logf("%s: %d events (%d bytes of %s body), cross-checked against a direct client-go watch", out, len(events), len(body), contentType)
	return nil
}

// decodeBody decodes the body curl wrote: gzip members inflated when the
// scenario asked for gzip (a member cut short by curl's exit is read as far
// as it goes), a Table watch by its rows, anything else with client-go.
func decodeBody(sc scenario, contentType string, body []byte) ([]e2e.Event, error) {
	if sc.gzip && len(body) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		plain, err := io.ReadAll(zr)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		body = plain
	}
	if sc.accept == mediaTable {
		return e2e.DecodeTableWatch(bytes.NewReader(body))
	}
	return e2e.DecodeWatchStream(contentType, bytes.NewReader(body))
}

// gzipped reports whether curl's header dump says Content-Encoding: gzip.
func gzipped(h []byte) bool {
	for _, l := range strings.Split(string(h), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "content-encoding") && strings.TrimSpace(v) == "gzip" {
			return true
		}
	}
	return false
}

// poll calls f every 50 ms until it returns true or an error, or d passes.
func poll(d time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// parseHeaders reads the status code, Content-Type and whether the body was
// chunked from curl's -D dump (one response: no redirects are followed).
func parseHeaders(h []byte) (status int, contentType string, chunked bool) {
	lines := strings.Split(string(h), "\r\n")
	if len(lines) > 0 {
		_, _ = fmt.Sscanf(lines[0], "HTTP/1.1 %d", &status)
	}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-type":
			contentType = v
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	return status, contentType, chunked
}

func withoutBookmarks(events []e2e.Event) []e2e.Event {
	var out []e2e.Event
	for _, ev := range events {
		if ev.Type != "BOOKMARK" {
			out = append(out, ev)
		}
	}
	return out
}

func sameEvents(a, b []e2e.Event) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d events vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Errorf("event %d: %+v vs %+v", i+1, a[i], b[i])
		}
	}
	return nil
}

func wantTypes(types ...string) func([]e2e.Event) error {
	return func(events []e2e.Event) error {
		if len(events) != len(types) {
			return fmt.Errorf("got %d events, want %d (%v)", len(events), len(types), types)
		}
		for i, ev := range events {
			if ev.Type != types[i] {
				return fmt.Errorf("event %d is %s, want %s", i+1, ev.Type, types[i])
			}
		}
		return nil
	}
}

// writeEvents writes a JSON array with one event per line, so that diffs of
// re-recordings stay readable.
func writeEvents(path string, events []e2e.Event) error {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, ev := range events {
		line, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		b.WriteString("  ")
		b.Write(line)
		if i < len(events)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func smallData(step int) map[string]string {
	return map[string]string{"step": fmt.Sprint(step)}
}

// bigData is ~200 KB of printable, deterministic text that differs per step.
func bigData(step int) map[string]string {
	var b strings.Builder
	for i := 0; b.Len() < 200*1024; i++ {
		fmt.Fprintf(&b, "step %d line %05d: the quick brown fox jumps over the lazy dog\n", step, i)
	}
	return map[string]string{"step": fmt.Sprint(step), "blob": b.String()}
}

// createEditDelete creates ConfigMap name, updates it edits times and
// deletes it, pausing between writes.
func createEditDelete(name string, edits int, data func(step int) map[string]string) func(context.Context, typedcorev1.ConfigMapInterface) (int, error) {
	return func(ctx context.Context, cms typedcorev1.ConfigMapInterface) (int, error) {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data(0)}, metav1.CreateOptions{})
		if err != nil {
			return 0, err
		}
		for i := 1; i <= edits; i++ {
			time.Sleep(pause)
			cm.Data = data(i)
			if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				return 0, err
			}
		}
		time.Sleep(pause)
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return 0, err
		}
		return edits + 2, nil
	}
}

func burst(ctx context.Context, cms typedcorev1.ConfigMapInterface) (int, error) {
	names := make(chan string)
	errs := make(chan error, burstSize)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range names {
				_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}, Data: smallData(0)}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range burstSize {
		names <- fmt.Sprintf("burst-%03d", i)
	}
	close(names)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return 0, err
	}
	return 2 * burstSize, nil
}
