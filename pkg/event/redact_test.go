package event

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// redactSeeds are Secrets written the ways that once made kwatch print
// their data (found by a hostile trial): a null duplicate kind, duplicate
// data, stringData and metadata, a metadata field of the wrong type, a kind
// key in another letter case, escaped keys.
var redactSeeds = []string{
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","kind":"Secret","kind":null,"metadata":{"name":"s","namespace":"default"},"data":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"password":"c3VwZXJzZWNyZXQ="},"data":{}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"password":"supersecret"},"stringData":{}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"supersecret"}},"metadata":{"name":"s2"}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"password":"c3VwZXJzZWNyZXQ="},"data":null}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":1},"data":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","Kind":"Secret","metadata":{"name":"s"},"data":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","KIND":"Secret","metadata":{"name":"s"},"data":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","k\u0069nd":"Secr\u0065t","metadata":{"name":"s"},"d\u0061ta":{"password":"c3VwZXJzZWNyZXQ="}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"Data":{"password":"c3VwZXJzZWNyZXQ="},"data":[1]}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`,
}

// isRedacted reports whether s is a redacted value: Redacted and a tag.
func isRedacted(s string) bool {
	return len(s) == len(Redacted)+8 && strings.HasPrefix(s, Redacted)
}

// leaks says what a Secret decoded by client-go from out still holds that
// is not redacted, or "".
func leaks(out []byte) string {
	obj, _, err := universal.Decode(out, nil, nil)
	if err != nil {
		return ""
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return ""
	}
	for k, v := range sec.Data {
		// client-go decodes data values from base64; a redacted one is
		// base64 text too.
		if !isRedacted(base64.StdEncoding.EncodeToString(v)) {
			return fmt.Sprintf("data[%q] = %q", k, v)
		}
	}
	for k, v := range sec.StringData {
		if !isRedacted(v) {
			return fmt.Sprintf("stringData[%q] = %q", k, v)
		}
	}
	for _, a := range secretAnnotations {
		if v, ok := sec.Annotations[a]; ok && !isRedacted(v) {
			return fmt.Sprintf("annotation %s = %q", a, v)
		}
	}
	return ""
}

// FuzzRedact: whenever client-go would read an object as a Secret
// (universal deserializer: kind found case-insensitively, then typed
// decoding), the object kwatch prints for it must hold no Secret value:
// decoded by client-go it has only REDACTED values, and no data value of
// the original appears in it.
func FuzzRedact(f *testing.F) {
	for _, s := range redactSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		orig, _, err := universal.Decode(obj, nil, nil)
		if err != nil {
			return
		}
		sec, ok := orig.(*corev1.Secret)
		if !ok {
			return
		}
		data := append([]byte(`{"type":"ADDED","object":`), obj...)
		ev, _ := Decode(FormatJSON, append(data, '}'), DecodeOptions{})
		if ev == nil {
			return // not shown at all
		}
		if l := leaks(ev.Object); l != "" {
			t.Fatalf("printed object %s\nof %s\nholds %s", ev.Object, obj, l)
		}
		// A value as sent, quoted, must appear fewer times in the printed
		// object than in the one sent (it may also be a key or a name).
		kept := func(quoted []byte) bool {
			n := bytes.Count(obj, quoted)
			return n > 0 && bytes.Count(ev.Object, quoted) >= n
		}
		for k, v := range sec.Data {
			if enc := base64.StdEncoding.EncodeToString(v); !isRedacted(enc) && kept([]byte(`"`+enc+`"`)) {
				t.Fatalf("printed object %s\nof %s\nholds data[%q] as sent", ev.Object, obj, k)
			}
		}
		for k, v := range sec.StringData {
			if q, _ := json.Marshal(v); !isRedacted(v) && kept(q) {
				t.Fatalf("printed object %s\nof %s\nholds stringData[%q] as sent", ev.Object, obj, k)
			}
		}
		if got := RedactObject(obj); leaks(got) != "" {
			t.Fatalf("RedactObject(%s) = %s holds %s", obj, got, leaks(got))
		}
		// The same object as a Table's row (kubectl get secrets -w with
		// whole objects), alone or as the earlier copy of a duplicated
		// "object" that a client does not read but the output shows: no
		// value as sent survives in the printed Table.
		for _, row := range []string{`{"cells":[],"object":%s}`, `{"cells":[],"object":%s,"object":null}`} {
			table := fmt.Sprintf(`{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"rows":[`+row+`]}}`, obj)
			tev, _ := Decode(FormatJSON, []byte(table), DecodeOptions{})
			if tev == nil {
				continue
			}
			keptIn := func(quoted []byte) bool {
				n := bytes.Count(obj, quoted)
				return n > 0 && bytes.Count(tev.Object, quoted) >= n
			}
			for k, v := range sec.Data {
				if enc := base64.StdEncoding.EncodeToString(v); !isRedacted(enc) && keptIn([]byte(`"`+enc+`"`)) {
					t.Fatalf("printed Table %s\nof %s\nholds data[%q] as sent", tev.Object, table, k)
				}
			}
			for k, v := range sec.StringData {
				if q, _ := json.Marshal(v); !isRedacted(v) && keptIn(q) {
					t.Fatalf("printed Table %s\nof %s\nholds stringData[%q] as sent", tev.Object, table, k)
				}
			}
		}
	})
}

func TestRedactSeeds(t *testing.T) {
	for _, s := range redactSeeds[:len(redactSeeds)-1] {
		ev, _ := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+s+`}`), DecodeOptions{})
		if ev == nil || !ev.Redacted || bytes.Contains(ev.Object, []byte("c3VwZXJzZWNyZXQ=")) || bytes.Contains(ev.Object, []byte("supersecret")) {
			t.Errorf("%s\nprinted as %s", s, ev.Object)
		}
	}
	cm := redactSeeds[len(redactSeeds)-1]
	if ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+cm+`}`), DecodeOptions{}); err != nil || ev.Redacted || string(ev.Object) != cm {
		t.Errorf("a ConfigMap: %s, %v", ev.Object, err)
	}
}

// TestRedactTags: a redacted value's tag is the same for the same value and
// differs for another, so that --diff can say a Secret's value changed.
func TestRedactTags(t *testing.T) {
	decode := func(pw string) string {
		ev, err := Decode(FormatJSON, []byte(`{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"password":"`+pw+`"}}}`), DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(ev.Object)
	}
	a, a2, b := decode("aHVudGVyMg=="), decode("aHVudGVyMg=="), decode("bmV3cGFzcw==")
	if a != a2 || a == b || !strings.Contains(a, `"password":"REDACTED`) || strings.Contains(a, "aHVudGVyMg") {
		t.Errorf("same value: %s and %s; another: %s", a, a2, b)
	}
}
