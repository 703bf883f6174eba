package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConfigMapThroughAPIAndProxy is the first end-to-end test: an object
// written through the API server (client-go, TLS, token) is read back through
// kubectl proxy (plain HTTP), and a watch opened through the proxy reports
// its create, update and delete with the resourceVersions the server gave.
func TestConfigMapThroughAPIAndProxy(t *testing.T) {
	env := Cluster(t)
	if env.Kubectl == "" {
		t.Errorf("Env.Kubectl is empty; want the stack's kubectl in %s/bin", env.runDir)
	}
	if env.EtcdURL == "" {
		t.Errorf("Env.EtcdURL is empty; want the URL in %s/etcd-endpoint", env.runDir)
	} else {
		var health struct{ Health string }
		getJSON(t, context.Background(), env.EtcdURL+"/health", &health)
		if health.Health != "true" {
			t.Errorf("GET %s/health: health=%q, want \"true\"", env.EtcdURL, health.Health)
		}
	}
	cs := env.Clientset(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "kwatch-e2e"
	cms := cs.CoreV1().ConfigMaps(ns)

	// Watch from the (empty) namespace's current resourceVersion, so that the
	// ADDED event is the create itself, not a synthetic initial event.
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing configmaps in %s: %v", ns, err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("new namespace %s already has %d configmaps", ns, len(list.Items))
	}
	q := url.Values{
		"watch":           {"1"},
		"fieldSelector":   {"metadata.name=" + name},
		"resourceVersion": {list.ResourceVersion},
	}
	watchURL := env.ProxyURL + "/api/v1/namespaces/" + ns + "/configmaps?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, watchURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("opening the watch through the proxy: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", watchURL, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("watch Content-Type = %q, want application/json", ct)
	}
	if te := resp.TransferEncoding; len(te) != 1 || te[0] != "chunked" {
		t.Errorf("watch Transfer-Encoding = %v, want [chunked]", te)
	}
	events := make(chan watchEvent)
	decodeErr := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				decodeErr <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	next := func(what string) watchEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case err := <-decodeErr:
			t.Fatalf("watch ended before %s: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no watch event for %s within 30s", what)
		}
		panic("unreachable")
	}

	// Create through the API server, read back through the proxy.
	created, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"step": "created"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating configmap %s/%s: %v", ns, name, err)
	}
	var got corev1.ConfigMap
	getJSON(t, ctx, env.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps/"+name, &got)
	if got.Name != name || got.Namespace != ns || got.UID != created.UID ||
		got.ResourceVersion != created.ResourceVersion || got.Data["step"] != "created" {
		t.Errorf("through the proxy got %s/%s uid=%s rv=%s data=%v; want %s/%s uid=%s rv=%s data[step]=created",
			got.Namespace, got.Name, got.UID, got.ResourceVersion, got.Data,
			ns, name, created.UID, created.ResourceVersion)
	}

	added := next("the create")
	checkEvent(t, added, "ADDED", ns, name, created.ResourceVersion, "created")

	created.Data["step"] = "updated"
	updated, err := cms.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating configmap %s/%s: %v", ns, name, err)
	}
	modified := next("the update")
	checkEvent(t, modified, "MODIFIED", ns, name, updated.ResourceVersion, "updated")

	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting configmap %s/%s: %v", ns, name, err)
	}
	deleted := next("the delete")
	// The delete's resourceVersion is not returned by Delete; the event
	// carries the last state with the deletion's revision.
	checkEvent(t, deleted, "DELETED", ns, name, "", "updated")

	// resourceVersions are opaque to clients, but on etcd they are revisions:
	// strictly increasing integers.
	var prev uint64
	for _, ev := range []watchEvent{added, modified, deleted} {
		rv, err := strconv.ParseUint(ev.Object.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatalf("%s resourceVersion %q: %v", ev.Type, ev.Object.ResourceVersion, err)
		}
		if rv <= prev {
			t.Errorf("%s resourceVersion %d does not increase (previous %d)", ev.Type, rv, prev)
		}
		prev = rv
	}

	// Nothing else is expected on this watch.
	select {
	case ev := <-events:
		t.Errorf("unexpected extra event %s %s rv=%s", ev.Type, ev.Object.Name, ev.Object.ResourceVersion)
	case err := <-decodeErr:
		t.Errorf("watch ended early: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
}

// watchEvent is a JSON watch event of a ConfigMap, decoded with
// encoding/json alone (not with client-go, nor with kwatch's decoder).
type watchEvent struct {
	Type   string           `json:"type"`
	Object corev1.ConfigMap `json:"object"`
}

func checkEvent(t *testing.T, ev watchEvent, typ, ns, name, rv, step string) {
	t.Helper()
	o := ev.Object
	if ev.Type != typ || o.Kind != "ConfigMap" || o.APIVersion != "v1" || o.Namespace != ns || o.Name != name || o.Data["step"] != step {
		t.Errorf("event %s %s %s/%s data=%v; want %s v1/ConfigMap %s/%s data[step]=%s",
			ev.Type, o.APIVersion+"/"+o.Kind, o.Namespace, o.Name, o.Data, typ, ns, name, step)
	}
	if rv != "" && o.ResourceVersion != rv {
		t.Errorf("%s event resourceVersion = %s, want %s (from the API call)", typ, o.ResourceVersion, rv)
	}
}

func getJSON(t *testing.T, ctx context.Context, u string, into any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", u, resp.Status, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("GET %s: %v in %s", u, err, body)
	}
}
