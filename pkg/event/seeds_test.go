package event

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz/")

// protoFrame frames a protobuf watch event of a ConfigMap as
// kube-apiserver does: a 4-byte big-endian length, then the WatchEvent.
func protoFrame(typ, name, rv string) string {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv}}
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), cm)
	if err != nil {
		panic(err)
	}
	payload, err := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}).Marshal()
	if err != nil {
		panic(err)
	}
	return string(binary.BigEndian.AppendUint32(nil, uint32(len(payload)))) + string(payload)
}

const (
	evA = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"data":{"k":"[{\"}]"}}}`
	evB = `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}`
	evE = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410}}`
)

// framerSeeds is FuzzFramer's seed corpus, written to
// testdata/fuzz/FuzzFramer by TestFramerSeeds -update.
var framerSeeds = []struct {
	name          string
	data          string
	proto         bool
	seed          int64
	max           uint8
	gapAt, gapLen uint16
}{
	{"json-events", evA + "\n" + evB + "\n" + evE + "\n", false, 1, 0, 0, 0},
	{"json-no-newlines", evA + evB + evE, false, 2, 0, 0, 0},
	{"json-junk", "xx " + evA + "\n]]\n" + evB + "\n", false, 3, 0, 0, 0},
	{"json-small-limit", evA + "\n" + `{"type":"ADDED"}` + "\n", false, 4, 40, 0, 0},
	{"json-gap-in-event", evA + "\n" + evB + "\n" + evE + "\n", false, 5, 0, 20, 30},
	{"json-gap-across-events", evA + "\n" + evB + "\n" + evE + "\n", false, 6, 0, 100, uint16(len(evA))},
	{"json-unclosed", `{"type":"ADDED","object":{"kind":"ConfigMap"` + "\n" + evB + "\n", false, 7, 0, 0, 0},
	{"json-deep", strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n" + evA + "\n", false, 8, 0, 0, 0},
	{"json-escapes", `{"type":"ADDED","object":{"a":"\\\"}{\\\\","b":"\u007b"}}` + "\n", false, 9, 0, 0, 0},
	{"proto-events", protoFrame("ADDED", "a", "5") + protoFrame("DELETED", "a", "6"), true, 10, 0, 0, 0},
	{"proto-small-limit", protoFrame("ADDED", "a", "5") + protoFrame("DELETED", "a", "6"), true, 11, 30, 0, 0},
	{"proto-gap-in-frame", protoFrame("ADDED", "a", "5") + protoFrame("DELETED", "a", "6"), true, 12, 0, 10, 5},
	{"proto-gap-in-prefix", protoFrame("ADDED", "a", "5") + protoFrame("DELETED", "a", "6"), true, 13, 0, 2, 1},
	{"proto-zero-length", "\x00\x00\x00\x00" + protoFrame("ADDED", "a", "5"), true, 14, 0, 0, 0},
	{"proto-4gib", "\xff\xff\xff\xff" + protoFrame("ADDED", "a", "5"), true, 15, 0, 0, 0},
	{"proto-truncated", protoFrame("ADDED", "a", "5")[:20], true, 16, 0, 0, 0},
}

// fuzzFile formats one seed in the "go test fuzz v1" corpus format.
func fuzzFile(values ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		default:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		}
	}
	return b.Bytes()
}

// TestFramerSeeds keeps testdata/fuzz/FuzzFramer in step with framerSeeds;
// other files there (crashers kept as regression tests) are left alone.
func TestFramerSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzFramer")
	for _, s := range framerSeeds {
		want := fuzzFile([]byte(s.data), s.proto, s.seed, s.max, s.gapAt, s.gapLen)
		path := filepath.Join(dir, s.name)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not the seed the table makes (%v); run go test ./pkg/event -run TestFramerSeeds -update", path, err)
		}
	}
}
