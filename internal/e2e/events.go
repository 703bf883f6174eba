package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restwatch "k8s.io/client-go/rest/watch"
)

// Event is one watch event reduced to what ground-truth files record: the
// event type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR), the object's name
// (empty for BOOKMARK and ERROR) and its resourceVersion (empty for ERROR).
//
// InitialEventsEnd is true for the BOOKMARK that ends a watch-list's initial
// events (annotation k8s.io/initial-events-end); the ground-truth files do
// not record it: a test tells that bookmark from the others the API server
// may send at any time.
type Event struct {
	Type             string `json:"type"`
	Name             string `json:"name"`
	ResourceVersion  string `json:"resourceVersion"`
	InitialEventsEnd bool   `json:"-"`
}

// codecs is client-go's scheme codecs with CBOR, as rest.Config builds them.
var codecs = serializer.NewCodecFactory(scheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))

// DecodeWatchStream decodes a whole watch response body (after HTTP
// de-chunking) of the given media type, "application/json",
// "application/vnd.kubernetes.protobuf" or "application/cbor-seq"
// (parameters such as ";stream=watch" are ignored), with client-go's own framers and decoders, so that it is
// independent of kwatch's code. It returns the events decoded before the
// first error; the error is nil only if the body ended cleanly between two
// events.
func DecodeWatchStream(mediaType string, body io.Reader) ([]Event, error) {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return nil, fmt.Errorf("media type %q: %w", mediaType, err)
	}
	if mt == "application/cbor-seq" {
		// As client-go's rest client does: a CBOR Sequence is read with
		// the application/cbor serializer's stream framer.
		mt = "application/cbor"
	}
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt)
	if !ok || info.StreamSerializer == nil {
		return nil, fmt.Errorf("media type %q has no stream serializer", mt)
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(body))
	dec := restwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), info.Serializer)
	var events []Event
	for {
		typ, obj, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, fmt.Errorf("event %d: %w", len(events)+1, err)
		}
		ev := Event{Type: string(typ)}
		if st, ok := obj.(*metav1.Status); ok {
			ev.ResourceVersion = st.ResourceVersion
		} else {
			acc, err := meta.Accessor(obj)
			if err != nil {
				return events, fmt.Errorf("event %d (%s): %w", len(events)+1, typ, err)
			}
			ev.Name = acc.GetName()
			ev.ResourceVersion = acc.GetResourceVersion()
			ev.InitialEventsEnd = typ == watch.Bookmark && acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		}
		events = append(events, ev)
	}
}

// DecodeTableWatch decodes a whole watch body of meta.k8s.io Table events
// (what kubectl get -w asks for: "application/json;as=Table;v=v1;g=meta.k8s.io")
// with apimachinery's JSON framer and encoding/json into metav1.Table: each
// event is named by its first row's object (a PartialObjectMetadata unless
// the rows include whole objects), a BOOKMARK by the Table's
// resourceVersion. client-go's scheme does not know Table, so this is the
// way kubectl's own printer reads the rows.
func DecodeTableWatch(body io.Reader) ([]Event, error) {
	frames := kjson.Framer.NewFrameReader(io.NopCloser(body))
	var events []Event
	buf := make([]byte, 1<<20)
	for {
		var frame []byte
		for {
			n, err := frames.Read(buf)
			frame = append(frame, buf[:n]...)
			if errors.Is(err, io.ErrShortBuffer) {
				continue
			}
			if errors.Is(err, io.EOF) && len(frame) == 0 {
				return events, nil
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return events, fmt.Errorf("event %d: %w", len(events)+1, err)
			}
			break
		}
		var we struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(frame, &we); err != nil {
			return events, fmt.Errorf("event %d: %w", len(events)+1, err)
		}
		ev := Event{Type: we.Type}
		var table metav1.Table
		if err := json.Unmarshal(we.Object, &table); err != nil {
			return events, fmt.Errorf("event %d (%s): %w", len(events)+1, we.Type, err)
		}
		ev.ResourceVersion = table.ResourceVersion
		if len(table.Rows) > 0 {
			var meta metav1.PartialObjectMetadata
			if err := json.Unmarshal(table.Rows[0].Object.Raw, &meta); err != nil {
				return events, fmt.Errorf("event %d (%s): row object: %w", len(events)+1, we.Type, err)
			}
			ev.Name, ev.ResourceVersion = meta.Name, meta.ResourceVersion
		}
		events = append(events, ev)
	}
}
