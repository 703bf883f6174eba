package pcap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// groundTruth is one event of a NAME.events.json file: the events the API
// server sent, as client-go decoded them while the capture was recorded.
type groundTruth struct {
	Type            string `json:"type"`
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion"`
}

// TestRecordedCaptures checks kwatch against an independent decoder: for
// every scenario recorded by `make record`, the events decoded from both
// captures (tcpdump -i any and -i lo), and from the recording kwatch stream
// --record made of the same changes where there is one, must be exactly
// those in its events file, in order.
func TestRecordedCaptures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(recordedDir, "*.events.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no events files in %s (%v)", recordedDir, err)
	}
	for _, ef := range files {
		name := strings.TrimSuffix(filepath.Base(ef), ".events.json")
		data, err := os.ReadFile(ef)
		if err != nil {
			t.Fatal(err)
		}
		var want []groundTruth
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: %v", ef, err)
		}
		for _, link := range []string{"any", "lo", "stream", "keys-lo"} {
			capture := filepath.Join(recordedDir, name+"-"+link+".pcap")
			if link == "keys-lo" {
				// A TLS scenario's capture with its key log inside.
				capture += "ng"
			}
			if _, err := os.Stat(capture); (link == "stream" || link == "keys-lo") && os.IsNotExist(err) {
				continue // only some scenarios have a kwatch stream --record recording, or keys
			}
			t.Run(filepath.Base(capture), func(t *testing.T) {
				f, err := os.Open(capture)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				var got []groundTruth
				var problems []string
				sink := record.SinkFunc(func(r record.Record) {
					switch v := r.(type) {
					case *record.Event:
						// kwatch stream asks for bookmarks, the recorded
						// curl did not.
						if link == "stream" && v.Type == "BOOKMARK" {
							return
						}
						got = append(got, groundTruth{v.Type, v.Name, v.ResourceVersion})
					case *record.Problem:
						// h2c-reset's server resets a watch with
						// RST_STREAM INTERNAL_ERROR: that warning is
						// the recording's point.
						if !(v.Kind == record.KindCut && strings.HasPrefix(filepath.Base(capture), "h2c-reset")) {
							problems = append(problems, v.Kind)
						}
					}
				})
				if _, err := pcap.Read(context.Background(), f, pcap.Options{Name: capture, Keys: keysFor(t, filepath.Base(capture))}, sink); err != nil {
					t.Fatal(err)
				}
				if len(problems) > 0 {
					t.Errorf("problems in a clean recording: %v", problems)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("events differ from %s:\n got %v\nwant %v", ef, got, want)
				}
			})
		}
	}
}
