package cmd

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestPcapCurlCBORWatch captures, with tcpdump, a CBOR watch-list that curl
// asks for through kubectl proxy with gzip, as a client-go informer with
// ClientsPreferCBOR would (Accept: application/cbor, Accept-Encoding: gzip,
// sendInitialEvents=true), and checks that kwatch pcap decodes exactly the
// events curl received, each with the gzip'd chunks that carried it. What
// curl received is decoded with client-go's own CBOR stream decoder.
func TestPcapCurlCBORWatch(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	cms := cs.CoreV1().ConfigMaps(ns)
	ctx := context.Background()
	for _, n := range []string{"pre-a", "pre-b"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}, Data: map[string]string{"k": n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	proxy := newProxy(t, env)
	capture := startCapture(t, proxy)
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "sendInitialEvents": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}}
	curl := startCurlWatch(t, "application/cbor-seq", nil, "-sS", "-N", "--http1.1", "-H", "Accept: application/cbor",
		"-H", "Accept-Encoding: gzip", proxy.url+"/api/v1/namespaces/"+ns+"/configmaps?"+q.Encode())
	curl.waitEvent("BOOKMARK", "") // pre-a, pre-b, then the initial-events-end bookmark
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "later", types.MergePatchType, []byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	curl.waitEvent("DELETED", "later")
	curl.stop()
	got := curl.received()
	h, _ := os.ReadFile(curl.headers)
	if !bytes.Contains(h, []byte("Content-Type: application/cbor-seq")) || !bytes.Contains(h, []byte("Content-Encoding: gzip")) {
		t.Fatalf("the server did not answer a gzip'd application/cbor-seq (is the stack's CBOR gate on? make cluster-up): %s", h)
	}
	data := capture()

	var decoded []string
	var evs []*record.Event
	var problems []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			if v.Type == "BOOKMARK" && !v.InitialEventsEnd {
				return // the API server may send one at any time
			}
			decoded = append(decoded, fmt.Sprintf("%s %s %s", v.Type, v.Name, v.ResourceVersion))
			evs = append(evs, v)
		case *record.Problem:
			problems = append(problems, v.Kind+": "+v.Detail)
		}
	})
	if _, err := pcap.Read(ctx, bytes.NewReader(data), pcap.Options{Name: "cbor-watch.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ev := range got {
		if ev.Type != "BOOKMARK" || ev.InitialEventsEnd {
			want = append(want, fmt.Sprintf("%s %s %s", ev.Type, ev.Name, ev.ResourceVersion))
		}
	}
	if fmt.Sprint(decoded) != fmt.Sprint(want) {
		t.Errorf("kwatch pcap decoded\n\t%v\ncurl received\n\t%v", decoded, want)
	}
	if len(problems) > 0 {
		t.Errorf("problems: %v", problems)
	}
	for i, ev := range evs {
		if ev.Format != "cbor" || len(ev.Chunks) == 0 || ev.Chunks[0].Inflated == 0 {
			t.Errorf("event %d (%s %s): format %q, chunks %+v; want cbor from gzip'd chunks", i+1, ev.Type, ev.Name, ev.Format, ev.Chunks)
		}
		wantInitial := i < 2
		if ev.Initial != wantInitial || ev.InitialEventsEnd != (i == 2) {
			t.Errorf("event %d (%s %s): initial %v, initial-events-end %v", i+1, ev.Type, ev.Name, ev.Initial, ev.InitialEventsEnd)
		}
	}
}

// curlWatch is a curl watch whose headers and gzip'd body go to files, and
// what it received decoded with client-go's decoders.
type curlWatch struct {
	t             *testing.T
	cmd           *exec.Cmd
	headers, body string
	mediaType     string
	stderr        syncBuffer
}

// startCurlWatch runs curl with args (the URL last) and env added to the
// environment, writing the response to files; the body is decoded as
// mediaType (after inflating gzip members).
func startCurlWatch(t *testing.T, mediaType string, env []string, args ...string) *curlWatch {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed (it is also needed by hack/cluster-up.sh)")
	}
	dir := t.TempDir()
	c := &curlWatch{t: t, headers: filepath.Join(dir, "headers"), body: filepath.Join(dir, "body"), mediaType: mediaType}
	url := args[len(args)-1]
	args = append(append(args[:len(args)-1:len(args)-1], "-D", c.headers, "-o", c.body), url)
	c.cmd = exec.Command(curl, args...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// received decodes what curl has written so far: gzip members inflated,
// then client-go's decoder for the media type.
func (c *curlWatch) received() []e2e.Event {
	raw, _ := os.ReadFile(c.body)
	if len(raw) == 0 {
		return nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil
	}
	plain, err := io.ReadAll(zr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		c.t.Fatalf("inflating what curl received: %v", err)
	}
	evs, _ := e2e.DecodeWatchStream(c.mediaType, bytes.NewReader(plain))
	return evs
}

// waitEvent returns once curl received an event of type typ for the object
// name ("" for a BOOKMARK), or fails after 30 s. It waits for a given event,
// not a count: the API server may add bookmarks at any time.
func (c *curlWatch) waitEvent(typ, name string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs := c.received()
		for _, ev := range evs {
			if ev.Type == typ && ev.Name == name {
				return
			}
		}
		if time.Now().After(deadline) {
			h, _ := os.ReadFile(c.headers)
			c.t.Fatalf("curl received %v, no %s %s; headers %q, stderr %s", evs, typ, name, h, c.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends curl as Ctrl-C would end a watch.
func (c *curlWatch) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}
