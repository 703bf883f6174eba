package event

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"
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
		if k := keptAsSent(sec, obj, ev.Object); k != "" {
			t.Fatalf("printed object %s\nof %s\nholds %s as sent", ev.Object, obj, k)
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
			if k := keptAsSent(sec, []byte(table), tev.Object); k != "" {
				t.Fatalf("printed Table %s\nof %s\nholds %s as sent", tev.Object, table, k)
			}
		}
	})
}

// keptAsSent names a value of sec (data or stringData, as client-go read it
// from sent) that printed holds as sent, quoted, as many times as sent
// does (it may also be a key or a name elsewhere), or returns "".
func keptAsSent(sec *corev1.Secret, sent, printed []byte) string {
	kept := func(quoted []byte) bool {
		n := bytes.Count(sent, quoted)
		return n > 0 && bytes.Count(printed, quoted) >= n
	}
	for k, v := range sec.Data {
		if enc := base64.StdEncoding.EncodeToString(v); !isRedacted(enc) && kept([]byte(`"`+enc+`"`)) {
			return fmt.Sprintf("data[%q]", k)
		}
	}
	for k, v := range sec.StringData {
		if q, _ := json.Marshal(v); !isRedacted(v) && kept(q) {
			return fmt.Sprintf("stringData[%q]", k)
		}
	}
	return ""
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

// TestRedactEveryReadingOfKind: inputs a hostile-input trial made kwatch
// print a Secret's value with (c2VjcmV0): every reading of an object's kind
// (any key that reads as "kind", its value in any letter case) is redacted
// as what it says, Table, PartialObjectMetadata, Secret and list alike, and
// nested objects with them; decode errors do not quote the object.
func TestRedactEveryReadingOfKind(t *testing.T) {
	const value = "c2VjcmV0"
	secret := `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"password":"` + value + `"}}`
	lastApplied := `"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"` + value + `\"}}"}`
	for _, c := range []struct{ name, obj string }{
		{"Table kind, Secret Kind", `{"kind":"Table","apiVersion":"v1","Kind":"Secret","metadata":{"name":"s"},"data":{"password":"` + value + `"},"rows":[]}`},
		{"Table kind, Secret Kind, null rows", `{"kind":"Table","Kind":"Secret","data":{"password":"` + value + `"},"rows":null}`},
		{"PartialObjectMetadata under Kind", `{"Kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"s",` + lastApplied + `}}`},
		{"Table with ApiVersion", `{"kind":"Table","ApiVersion":"meta.k8s.io/v1","rows":[{"cells":["s"],"object":` + secret + `}]}`},
		{"Table under Kind", `{"Kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":["s"],"object":` + secret + `}]}`},
		{"List of Secrets", `{"kind":"List","apiVersion":"v1","metadata":{},"items":[` + secret + `]}`},
		{"SecretList, items twice", `{"kind":"SecretList","apiVersion":"v1","items":[` + secret + `],"Items":[` + secret + `]}`},
		{"Table in a Table row", `{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"object":` + secret + `}]}}]}`},
		{"Secret metadata not an object", `{"kind":"Secret","apiVersion":"v1","metadata":[{"name":"s",` + lastApplied + `}],"data":{"password":"` + value + `"}}`},
		// A second trial: items and row objects without a kind (a typed
		// list as JSON has none), a Table whose metadata does not read, a
		// kind that is not a string, an object that is not an object.
		{"SecretList, items without kind", `{"kind":"SecretList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"s"},"data":{"p":"` + value + `"}}]}`},
		{"PartialObjectMetadataList, items without kind", `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","items":[{"metadata":{"name":"s",` + lastApplied + `}}]}`},
		{"Table row object without kind", `{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"object":{"metadata":{"name":"s"},"data":{"p":"` + value + `"}}}]}`},
		{"Table whose metadata does not read", `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"name":1},"rows":[{"object":` + secret + `}]}`},
		{"kind not a string", `{"kind":["Secret"],"apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"` + value + `"}}`},
		{"object an array", `[` + secret + `]`},
		{"object a string", `"` + strings.ReplaceAll(secret, `"`, `\"`) + `"`},
		// A third trial: what a container makes its elements (client-go
		// decodes a SecretList's items as Secrets whatever they say, any
		// object with items as a list, a WatchEvent's object), and rows
		// that cannot be read.
		{"SecretList, an item that says ConfigMap", `{"kind":"SecretList","apiVersion":"v1","items":[{"kind":"ConfigMap","metadata":{"name":"s"},"data":{"p":"` + value + `"}}]}`},
		{"PartialObjectMetadataList, an item that says ConfigMap", `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","items":[{"kind":"ConfigMap","metadata":{"name":"s",` + lastApplied + `}}]}`},
		{"items under a ConfigMap", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"},"items":[` + secret + `]}`},
		{"WatchEvent", `{"kind":"WatchEvent","apiVersion":"v1","type":"ADDED","object":` + secret + `}`},
		{"Table rows an object", `{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":{"a":{"object":` + secret + `}}}`},
	} {
		ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+c.obj+`}`), DecodeOptions{})
		if ev == nil || strings.Contains(string(ev.Object), value) || !ev.Redacted || (err != nil && strings.Contains(err.Error(), value)) {
			t.Errorf("%s: printed %s (error %v)", c.name, ev.Object, err)
		}
		if !json.Valid(ev.Object) {
			t.Errorf("%s: printed invalid JSON %s", c.name, ev.Object)
		}
	}

	// apimachinery's "Object 'apiVersion' is missing in '…'" quotes the
	// object: a protobuf watch event whose object is such JSON, and a
	// CBOR one.
	we := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: []byte(`{"kind":"Secret","metadata":{"name":"s"},"data":{"password":"` + value + `"}}`)}}
	pb, err := we.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(FormatProtobuf, pb, DecodeOptions{}); err == nil || strings.Contains(err.Error(), value) || !strings.Contains(err.Error(), "apiVersion' is missing") {
		t.Errorf("protobuf: error %v", err)
	}
	// YAML in a protobuf watch: the YAML decoder quotes what it cannot read.
	for _, y := range []string{"kind: Secret\napiVersion: v1\nmetadata: {name: s}\ndata: {password: !!int " + value + "}",
		"kind: Secret\napiVersion: v1\ndata: {~: {password: " + value + "}}"} {
		pb, err := (&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: []byte(y)}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(FormatProtobuf, pb, DecodeOptions{}); err == nil || strings.Contains(err.Error(), value) {
			t.Errorf("protobuf, YAML object %q: error %v", y, err)
		}
	}
	// A typed SecretList from protobuf: client-go's JSON of it gives its
	// items no kind.
	list := &corev1.SecretList{TypeMeta: metav1.TypeMeta{Kind: "SecretList", APIVersion: "v1"},
		Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"p": []byte("secret")}}}}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), list)
	if err != nil {
		t.Fatal(err)
	}
	if pb, err = (&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: raw}}).Marshal(); err != nil {
		t.Fatal(err)
	}
	if ev, err := Decode(FormatProtobuf, pb, DecodeOptions{}); err != nil || strings.Contains(string(ev.Object), value) || !ev.Redacted {
		t.Errorf("protobuf SecretList: %v, printed %s", err, ev.Object)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"kind": "Secret", "metadata": map[string]any{"name": "s"}, "data": map[string]any{"password": value}}}
	var obj, ev bytes.Buffer
	if err := cbor.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(u, &obj); err != nil {
		t.Fatal(err)
	}
	if err := cbor.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: obj.Bytes()}}, &ev); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(FormatCBOR, ev.Bytes(), DecodeOptions{}); err == nil || strings.Contains(err.Error(), value) {
		t.Errorf("CBOR: error %v", err)
	}
}

// TestRedactAsSecret: the events of a watch of secrets (its path) are
// redacted as Secrets whatever their objects' kind says (a server could
// label one otherwise); SecretsPath reads the path as a server does.
func TestRedactAsSecret(t *testing.T) {
	cm := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}}`
	ev, err := Decode(FormatJSON, []byte(cm), DecodeOptions{AsSecret: true})
	if err != nil || strings.Contains(string(ev.Object), "c2VjcmV0") || !ev.Redacted || ev.Kind != "ConfigMap" {
		t.Errorf("as a Secret: %+v, %v: %s", ev, err, ev.Object)
	}
	if ev, _ := Decode(FormatJSON, []byte(cm), DecodeOptions{}); ev.Redacted {
		t.Errorf("a ConfigMap redacted: %s", ev.Object)
	}
	// A Table's rows too (kubectl get secrets -w from a server that
	// labels a row's object otherwise; found by a fourth trial).
	table := `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":["s"],"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}}]}}`
	if ev, err := Decode(FormatJSON, []byte(table), DecodeOptions{AsSecret: true}); err != nil || strings.Contains(string(ev.Object), "c2VjcmV0") || !ev.Redacted {
		t.Errorf("a Table of a watch of secrets: %v: %s", err, ev.Object)
	}
	for target, want := range map[string]bool{
		"/api/v1/namespaces/default/secrets?watch=1": true, "/api/v1/secrets": true, "/api/v1/watch/namespaces/a/secrets/s": true,
		"/api/v1/namespaces/default/%73ecrets?watch=1": true, "/api/v1/namespaces/default/x/../secrets": true, "%zz": true,
		"/api/v1/namespaces/default/configmaps?watch=1": false, "/api/v1/namespaces/secret/configmaps": false,
	} {
		if SecretsPath(target) != want {
			t.Errorf("SecretsPath(%q) = %v, want %v", target, !want, want)
		}
	}
}

// TestRedactDeepNesting: a Secret nested in lists deeper than
// maxRedactDepth is still not printed (the nesting past it is replaced
// whole), and no level is walked more than maxRedactDepth times over: a
// hostile trial's list 4990 deep took 2.9 s, its size times its depth.
func TestRedactDeepNesting(t *testing.T) {
	secret := `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}`
	for _, depth := range []int{3, maxRedactDepth + 2, 4900} {
		obj := strings.Repeat(`{"kind":"List","apiVersion":"v1","items":[`, depth) + secret + strings.Repeat(`]}`, depth)
		ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+obj+`}`), DecodeOptions{})
		if ev == nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		if err != nil || strings.Contains(string(ev.Object), "c2VjcmV0") || !ev.Redacted || !json.Valid(ev.Object) {
			t.Errorf("depth %d: %v, redacted %v, printed %.300s", depth, err, ev.Redacted, ev.Object)
		}
	}
}

// BenchmarkRedactDeepList measures redacting a list nested 4900 deep
// (about 210 KB) holding a Secret: bounded by maxRedactDepth, linear in
// the event's size.
func BenchmarkRedactDeepList(b *testing.B) {
	obj := strings.Repeat(`{"kind":"List","apiVersion":"v1","items":[`, 4900) + `{"kind":"Secret","data":{"p":"c2VjcmV0"}}` + strings.Repeat(`]}`, 4900)
	ev := []byte(`{"type":"ADDED","object":` + obj + `}`)
	b.SetBytes(int64(len(ev)))
	for i := 0; i < b.N; i++ {
		if _, err := Decode(FormatJSON, ev, DecodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRedactByPath: an object with no kind is redacted as a Secret unless
// the request's path names another resource (OtherResource, from
// OtherResourcePath); a kind that says Secret, or a path of secrets, still
// redacts it (kubernetes-client/python's watch tests send objects without
// a kind).
func TestRedactByPath(t *testing.T) {
	kindless := `{"type":"ADDED","object":{"metadata":{"name":"test1","resourceVersion":"1"},"data":{"k":"c2VjcmV0"}}}`
	secret := `{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"k":"c2VjcmV0"}}}`
	for _, tc := range []struct {
		name     string
		event    string
		opt      DecodeOptions
		redacted bool
	}{
		{"no kind, no path", kindless, DecodeOptions{}, true},
		{"no kind, configmaps path", kindless, DecodeOptions{OtherResource: true}, false},
		{"no kind, secrets path", kindless, DecodeOptions{AsSecret: true}, true},
		{"no kind, secrets path wins", kindless, DecodeOptions{AsSecret: true, OtherResource: true}, true},
		{"kind Secret, configmaps path", secret, DecodeOptions{OtherResource: true}, true},
		{"no kind, configmaps path, --show-secrets", kindless, DecodeOptions{OtherResource: true, ShowSecrets: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(FormatJSON, []byte(tc.event), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Redacted != tc.redacted || strings.Contains(string(ev.Object), "c2VjcmV0") == tc.redacted {
				t.Errorf("redacted %v, want %v: %s", ev.Redacted, tc.redacted, ev.Object)
			}
			if ev.Name != "test1" && ev.Name != "s" {
				t.Errorf("name %q", ev.Name)
			}
		})
	}
	for target, want := range map[string]bool{
		"/api/v1/namespaces/default/configmaps?watch=true": true,
		"/api/v1/namespaces?watch=true":                    true,
		"/api/v1/namespaces/default":                       true,
		"/api/v1/watch/namespaces/default/configmaps/cm":   true,
		"/apis/apps/v1/namespaces/default/deployments":     true,
		"/apis/test.com/v1beta1/foos":                      true,
		"/api/v1/nodes/n1":                                 true,
		"/api/v1/namespaces/default/secrets?watch=true":    false,
		"/api/v1/namespaces/secrets/configmaps":            false, // SecretsPath fails closed on any "secrets" segment
		"/api/v1/namespaces/default/%73ecrets":             false,
		"/api/v1/namespaces/default/pods/p/log":            false, // a subresource
		"/api/v1/namespaces/default/status":                false, // the namespace's subresource
		"/api/v1":                                          false,
		"/apis/apps/v1":                                    false,
		"/healthz":                                         false,
		"/":                                                false,
		"":                                                 false,
		"%zz":                                              false,
	} {
		if got := OtherResourcePath(target); got != want {
			t.Errorf("OtherResourcePath(%q) = %v, want %v", target, got, want)
		}
	}
}

// TestNotObject: an event whose object is not a JSON object (a number, a
// string, a boolean, an array: kubernetes-client/python's watch tests) is
// kept as the value it is, with its JSON type, and no error; the objects
// an array holds are redacted as objects are, and in a watch of secrets
// every value is.
func TestNotObject(t *testing.T) {
	kindless := `{"metadata":{"name":"a"},"data":{"k":"c2VjcmV0"}}`
	deep := strings.Repeat("[", 40) + kindless + strings.Repeat("]", 40)
	for _, tc := range []struct {
		name, object, typ string
		opt               DecodeOptions
		kept              bool
	}{
		{"number", `1`, "number", DecodeOptions{}, true},
		{"negative float", `-1.5e3`, "number", DecodeOptions{}, true},
		{"string", `"c2VjcmV0"`, "string", DecodeOptions{}, true},
		{"string holding a Secret's JSON", `"{\"kind\":\"Secret\",\"data\":{\"k\":\"c2VjcmV0\"}}"`, "string", DecodeOptions{}, false},
		{"string holding JSON of no Secret", `"{\"kind\":\"ConfigMap\",\"data\":{\"k\":\"dg==\"}}"`, "string", DecodeOptions{}, true},
		{"boolean", `true`, "boolean", DecodeOptions{}, true},
		{"array of strings", `["test1"]`, "array", DecodeOptions{}, true},
		{"array of a configmap", `[{"kind":"ConfigMap","data":{"k":"dg=="}}]`, "array", DecodeOptions{}, true},
		{"array of an object without kind", `[` + kindless + `]`, "array", DecodeOptions{}, false},
		{"array of an object without kind, configmaps path", `[1,[` + kindless + `]]`, "array", DecodeOptions{OtherResource: true}, false},
		{"deep array", deep, "array", DecodeOptions{}, false},
		{"string, secrets path", `"c2VjcmV0"`, "string", DecodeOptions{AsSecret: true}, false},
		{"array of a string, secrets path", `["c2VjcmV0"]`, "array", DecodeOptions{AsSecret: true}, false},
		{"string, --show-secrets", `"c2VjcmV0"`, "string", DecodeOptions{AsSecret: true, ShowSecrets: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+tc.object+`}`), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if ev.NotObject != tc.typ {
				t.Errorf("NotObject %q, want %q", ev.NotObject, tc.typ)
			}
			if kept := string(ev.Object) == tc.object; kept != tc.kept || ev.Redacted == tc.kept {
				t.Errorf("object %s (redacted %v), want it kept: %v", ev.Object, ev.Redacted, tc.kept)
			}
			if !tc.kept && strings.Contains(string(ev.Object), "c2VjcmV0") {
				t.Errorf("the value survives: %s", ev.Object)
			}
			if !json.Valid(ev.Object) {
				t.Errorf("not JSON: %s", ev.Object)
			}
		})
	}
}
