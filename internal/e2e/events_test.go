package e2e

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// encodeWatch builds a watch body the way kube-apiserver frames one, with
// apimachinery's own encoders.
func encodeWatch(t *testing.T, mediaType string, events []watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		t.Fatalf("no stream serializer for %s", mediaType)
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, schema.GroupVersion{Version: "v1"})
	var buf bytes.Buffer
	fw := info.StreamSerializer.Framer.NewFrameWriter(&buf)
	for _, ev := range events {
		obj, err := runtime.Encode(enc, ev.Object)
		if err != nil {
			t.Fatal(err)
		}
		we := &metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: obj}}
		if err := info.StreamSerializer.Encode(we, fw); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestDecodeWatchStream(t *testing.T) {
	cm := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv}}
	}
	in := []watch.Event{
		{Type: watch.Added, Object: cm("a", "10")},
		{Type: watch.Modified, Object: cm("a", "11")},
		{Type: watch.Bookmark, Object: cm("", "12")},
		{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "12",
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}},
		{Type: watch.Deleted, Object: cm("a", "13")},
		{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}},
	}
	want := []Event{
		{"ADDED", "a", "10", false}, {"MODIFIED", "a", "11", false}, {"BOOKMARK", "", "12", false}, {"BOOKMARK", "", "12", true},
		{"DELETED", "a", "13", false}, {"ERROR", "", "", false},
	}
	for _, mt := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(mt, func(t *testing.T) {
			body := encodeWatch(t, mt, in)
			got, err := DecodeWatchStream(mt+";stream=watch", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("DecodeWatchStream: %v", err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d events %v, want %v", len(got), got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
				}
			}
			// A body cut inside the last event yields the complete events
			// and an error.
			got, err = DecodeWatchStream(mt, bytes.NewReader(body[:len(body)-3]))
			if err == nil || len(got) != len(want)-1 {
				t.Errorf("truncated body: got %d events, err %v; want %d events and an error", len(got), err, len(want)-1)
			}
		})
	}
	if _, err := DecodeWatchStream("text/plain", strings.NewReader("")); err == nil {
		t.Error("text/plain: want an error")
	}
}

func TestParseEnv(t *testing.T) {
	env, err := parseEnv([]byte("KUBECONFIG=/run/kubeconfig\nPROXY_URL=http://127.0.0.1:8001/\n"))
	if err != nil {
		t.Fatal(err)
	}
	if env.Kubeconfig != "/run/kubeconfig" || env.ProxyURL != "http://127.0.0.1:8001" {
		t.Errorf("got %+v", env)
	}
	for _, bad := range []string{"", "KUBECONFIG=/k\n", "PROXY_URL=http://x\n", "KUBECONFIG=rel/k\nPROXY_URL=http://x\n"} {
		if _, err := parseEnv([]byte(bad)); err == nil {
			t.Errorf("parseEnv(%q): want an error", bad)
		}
	}
}
