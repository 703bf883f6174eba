package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// errNotObject is returned by eachField for a value that is not a JSON
// object.
var errNotObject = errors.New("not a JSON object")

// errMalformed is returned by eachField for an object that is not valid
// JSON (readMeta only sees validated objects; this is its guard).
var errMalformed = errors.New("malformed JSON object")

// readMeta reads apiVersion, kind and metadata (name, namespace, uid,
// resourceVersion and the InitialEventsEndAnnotation) of the JSON object
// raw the way apimachinery decodes them into an object (keys matched
// case-sensitively after undoing escapes, the last of duplicate keys wins,
// null leaves a string as it was). raw has been validated as JSON with its
// watch event; readMeta walks its keys and skips the values it does not
// need (an object's data, which may be megabytes, is passed over at
// bytes.IndexByte speed, not unmarshalled). It returns an error for a raw
// that is not an object or a field of the wrong JSON type; the fields read
// before the error are kept.
func readMeta(raw []byte, m *objectMeta) error {
	return eachField(raw, func(key, v []byte) error {
		if bytes.EqualFold(key, []byte("kind")) {
			// client-go's typed decoding finds the kind with a
			// case-insensitive reading (json.DefaultMetaFactory); any
			// key that could be the kind can make the object a Secret.
			var k string
			_ = stringField(&k, v, "kind")
			if strings.EqualFold(k, "Secret") {
				m.MaybeSecret = true
			}
		}
		switch string(key) {
		case "apiVersion":
			return stringField(&m.APIVersion, v, "apiVersion")
		case "kind":
			return stringField(&m.Kind, v, "kind")
		case "metadata":
			if string(v) == "null" {
				return nil
			}
			return eachField(v, func(key, v []byte) error {
				switch string(key) {
				case "name":
					return stringField(&m.Name, v, "metadata.name")
				case "namespace":
					return stringField(&m.Namespace, v, "metadata.namespace")
				case "uid":
					return stringField(&m.UID, v, "metadata.uid")
				case "resourceVersion":
					return stringField(&m.ResourceVersion, v, "metadata.resourceVersion")
				case "annotations":
					if string(v) == "null" { // a null map is an empty one
						m.InitialEventsEnd = false
						return nil
					}
					return eachField(v, func(key, v []byte) error {
						if string(key) != InitialEventsEndAnnotation {
							return nil
						}
						var s string
						err := stringField(&s, v, "metadata.annotations")
						m.InitialEventsEnd = s == "true"
						return err
					})
				}
				return nil
			})
		}
		return nil
	})
}

// eachField calls fn with each key (escapes undone) and value (raw JSON)
// of the JSON object in data, in order. It returns errNotObject when data
// is not an object, an error when the object is malformed, or else the
// first error fn returned (fn is still called for every field).
func eachField(data []byte, fn func(key, value []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errNotObject
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	var first error
	for {
		if i >= len(data) || data[i] != '"' {
			return errMalformed
		}
		kEnd := stringEnd(data, i+1)
		if kEnd < 0 {
			return errMalformed
		}
		key := data[i+1 : kEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			var s string
			if err := json.Unmarshal(data[i:kEnd], &s); err != nil {
				return errMalformed
			}
			key = []byte(s)
		}
		i = skipSpace(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return errMalformed
		}
		vStart := skipSpace(data, i+1)
		vEnd, ok := valueEnd(data, vStart)
		if !ok || vEnd == vStart {
			return errMalformed
		}
		if err := fn(key, data[vStart:vEnd]); err != nil && first == nil {
			first = err
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) {
			return errMalformed
		}
		switch data[i] {
		case '}':
			return first
		case ',':
			i = skipSpace(data, i+1)
		default:
			return errMalformed
		}
	}
}

// stringField sets *dst from the JSON value v as encoding/json decodes into
// a string: null leaves *dst as it was; a value that is not a string is an
// error naming field.
func stringField(dst *string, v []byte, field string) error {
	switch {
	case string(v) == "null":
		return nil
	case len(v) >= 2 && v[0] == '"':
		if body := v[1 : len(v)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
			*dst = string(body)
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		return nil
	}
	kind := "a number"
	switch v[0] {
	case '{':
		kind = "an object"
	case '[':
		kind = "an array"
	case 't', 'f':
		kind = "a boolean"
	}
	return fmt.Errorf("%s is %s, not a string", field, kind)
}
