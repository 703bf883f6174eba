package event

import (
	"strings"
	"testing"
)

// TestTableRows: a Table watch event (kubectl get -w) takes its identity
// from its row's object, and a Secret a row includes whole is redacted.
func TestTableRows(t *testing.T) {
	meta := `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"426"},` +
		`"rows":[{"cells":["pre-1",1,"4m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",` +
		`"metadata":{"name":"pre-1","namespace":"default","uid":"u1","resourceVersion":"426"}}}]}}`
	ev, err := Decode(FormatJSON, []byte(meta), DecodeOptions{})
	if err != nil || ev.Kind != "Table" || ev.RowKind != "PartialObjectMetadata" || ev.Namespace != "default" ||
		ev.Name != "pre-1" || ev.UID != "u1" || ev.ResourceVersion != "426" || ev.Redacted {
		t.Fatalf("%+v, %v", ev, err)
	}
	secret := `{"type":"MODIFIED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},` +
		`"rows":[{"cells":["db",1],"object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db","namespace":"prod"},` +
		`"data":{"password":"aHVudGVyMg=="}}}]}}`
	for _, show := range []bool{false, true} {
		ev, err = Decode(FormatJSON, []byte(secret), DecodeOptions{ShowSecrets: show})
		if err != nil || ev.RowKind != "Secret" || ev.Name != "db" || ev.Namespace != "prod" {
			t.Fatalf("%+v, %v", ev, err)
		}
		leaked := strings.Contains(string(ev.Object), "aHVudGVyMg==")
		if leaked == !show || ev.Redacted == show {
			t.Errorf("show secrets %v: redacted %v, object %s", show, ev.Redacted, ev.Object)
		}
	}
}

// TestPartialObjectMetadataRedacted: a metadata-only watch cannot tell a
// Secret's metadata from another's, and kubectl apply copies a Secret's
// data into last-applied-configuration: that annotation is redacted.
func TestPartialObjectMetadataRedacted(t *testing.T) {
	raw := `{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"db","namespace":"prod",` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"aHVudGVyMg==\"}}"}}}}`
	ev, err := Decode(FormatJSON, []byte(raw), DecodeOptions{})
	if err != nil || ev.Name != "db" || strings.Contains(string(ev.Object), "aHVudGVyMg==") || !ev.Redacted {
		t.Errorf("%+v %v: %s", ev, err, ev.Object)
	}
}

// TestTableMetadataRowRedacted: kubectl get secrets -w gets Table rows of
// PartialObjectMetadata, whose last-applied-configuration annotation holds
// the Secret's data.
func TestTableMetadataRowRedacted(t *testing.T) {
	raw := `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},` +
		`"rows":[{"cells":["db"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"db",` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"aHVudGVyMg==\"}}"}}}}]}}`
	ev, err := Decode(FormatJSON, []byte(raw), DecodeOptions{})
	if err != nil || ev.Name != "db" || strings.Contains(string(ev.Object), "aHVudGVyMg==") {
		t.Errorf("%+v %v: %s", ev, err, ev.Object)
	}
}

// TestCaseSensitiveReads: a Table row's "object" and an ERROR's Status are
// read with keys matched case-sensitively, as client-go decodes them (found
// by a hostile-input trial: "Object" and "Code" beside them won before),
// while a row member "Object" holding a Secret is still redacted.
func TestCaseSensitiveReads(t *testing.T) {
	table := `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"rows":[{"cells":[],` +
		`"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns"}},` +
		`"Object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"b","namespace":"ns"},"data":{"password":"aHVudGVyMg=="}}}]}}`
	ev, err := Decode(FormatJSON, []byte(table), DecodeOptions{})
	if err != nil || ev.Name != "a" || ev.RowKind != "PartialObjectMetadata" {
		t.Errorf("table: %+v, %v; want the row's \"object\", ns/a", ev, err)
	}
	if strings.Contains(string(ev.Object), "aHVudGVyMg==") || !ev.Redacted {
		t.Errorf("table: a Secret under \"Object\" not redacted: %s", ev.Object)
	}
	status := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"reason":"Expired","code":410,"Code":500,"REASON":"Gone"}}`
	ev, err = Decode(FormatJSON, []byte(status), DecodeOptions{})
	if err != nil || ev.Status == nil || ev.Status.Code != 410 || ev.Status.Reason != "Expired" {
		t.Errorf("status: %+v, %v; want 410 Expired", ev.Status, err)
	}
}

// TestTableOtherRowsRedacted: rows under "Rows" (another letter case, which
// a client ignores) are still checked for Secrets and redacted, as the
// bytes show them; the Table's identity comes from "rows".
func TestTableOtherRowsRedacted(t *testing.T) {
	raw := `{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},` +
		`"rows":[{"cells":[],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a"}}}],` +
		`"Rows":[{"cells":[],"object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"b"},"data":{"password":"aHVudGVyMg=="}}}]}}`
	for _, show := range []bool{false, true} {
		ev, err := Decode(FormatJSON, []byte(raw), DecodeOptions{ShowSecrets: show})
		if err != nil || ev.Name != "a" {
			t.Fatalf("%+v, %v", ev, err)
		}
		if leaked := strings.Contains(string(ev.Object), "aHVudGVyMg=="); leaked != show || ev.Redacted == show {
			t.Errorf("show secrets %v: redacted %v, object %s", show, ev.Redacted, ev.Object)
		}
	}
}

// TestTableDuplicatesRedacted: a Secret in an earlier copy of a duplicated
// "rows" or row "object" key (a client reads the last one; the printed
// bytes show both) is redacted too, the members keeping their order and
// copies; the identity comes from the last "object" of the first row, as
// client-go reads it. Both leaked before (found while making redactTable
// walk the Table instead of decoding it into maps, which kept one copy).
func TestTableDuplicatesRedacted(t *testing.T) {
	secret := `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"ns"},"data":{"password":"aHVudGVyMg=="}}`
	pom := `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns"}}`
	redacted := `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"ns"},"data":{"password":` + string(redactedJSON([]byte(`"aHVudGVyMg=="`))) + `}}`
	for _, c := range []struct{ name, table, want, wantName string }{
		{"rows twice",
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":[],"object":` + secret + `}],"rows":[]}`,
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":[],"object":` + redacted + `}],"rows":[]}`, ""},
		{"object twice",
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":[],"object":` + secret + `,"object":` + pom + `}]}`,
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":[],"object":` + redacted + `,"object":` + pom + `}]}`, "a"},
		{"a null row and a null object",
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[null,{"object":null},{"Object":` + secret + `}]}`,
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[null,{"object":null},{"Object":` + redacted + `}]}`, ""},
	} {
		ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+c.table+`}`), DecodeOptions{})
		if err != nil || !ev.Redacted || string(ev.Object) != c.want || ev.Name != c.wantName {
			t.Errorf("%s: redacted %v, name %q, %v, object\n%s\nwant\n%s", c.name, ev.Redacted, ev.Name, err, ev.Object, c.want)
		}
	}
	// Nothing to redact: the bytes as sent, spaces included.
	plain := `{"kind":"Table", "apiVersion":"meta.k8s.io/v1","rows":[ {"cells":["a"],"object":` + pom + `} ]}`
	ev, err := Decode(FormatJSON, []byte(`{"type":"ADDED","object":`+plain+`}`), DecodeOptions{})
	if err != nil || ev.Redacted || string(ev.Object) != plain || ev.Name != "a" {
		t.Errorf("nothing to redact: redacted %v, name %q, %v, object %s", ev.Redacted, ev.Name, err, ev.Object)
	}
	// Rows that are not an array of objects cannot be checked: the Table
	// is replaced whole.
	ev, _ = Decode(FormatJSON, []byte(`{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[1],"Rows":[{"object":`+secret+`}]}}`), DecodeOptions{})
	if !ev.Redacted || strings.Contains(string(ev.Object), "aHVudGVyMg==") || !strings.Contains(string(ev.Object), "could not be read") {
		t.Errorf("unreadable rows: redacted %v, object %s", ev.Redacted, ev.Object)
	}
}
