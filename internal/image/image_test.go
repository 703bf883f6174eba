package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func testSpec() Spec {
	return Spec{
		Files: []File{
			{Path: "/usr/local/bin/prog", Mode: 0o755, Data: []byte("#!program\n")},
			{Path: "/etc/prog.conf", Mode: 0o644, Data: []byte("x = 1\n")},
		},
		Entrypoint:   []string{"/usr/local/bin/prog"},
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:         "65535:65535",
		Labels:       map[string]string{"org.opencontainers.image.version": "v1.2.0"},
		OS:           "linux",
		Architecture: "arm64",
	}
}

// TestLayoutTarball writes an image as an OCI layout tarball and reads it
// back as containerd's importer does: index.json's one manifest with the
// name annotations and platform, an OCI manifest and config with the
// entrypoint, and a layer holding the files with their modes and parent
// folders.
func TestLayoutTarball(t *testing.T) {
	img, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteLayout(&buf, img, "kwatch:v1.2.0"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(&buf)
	var entries []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, h.Name)
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"oci-layout", "index.json"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("the tarball has no %s (entries %q)", want, entries)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if got := d.Annotations[AnnotationImageName]; got != "docker.io/library/kwatch:v1.2.0" {
		t.Errorf("%s = %q, want docker.io/library/kwatch:v1.2.0", AnnotationImageName, got)
	}
	if got := d.Annotations[AnnotationRefName]; got != "v1.2.0" {
		t.Errorf("%s = %q, want v1.2.0", AnnotationRefName, got)
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "arm64" {
		t.Errorf("platform %+v, want linux/arm64", d.Platform)
	}
	if d.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", d.MediaType, types.OCIManifestSchema1)
	}
	want, _ := img.Digest()
	if d.Digest != want {
		t.Errorf("index.json names %s, want the image's digest %s", d.Digest, want)
	}
	got, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/prog" || cf.Config.User != "65535:65535" ||
		cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.0" || cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("config %+v", cf)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created %s, want the Unix epoch", cf.Created.Time)
	}
	m, err := got.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("manifest config %s, layers %+v; want an OCI config and one OCI gzip'd layer", m.Config.MediaType, m.Layers)
	}
	files := map[string]*tar.Header{}
	data := map[string]string{}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	lt := tar.NewReader(rc)
	for {
		h, err := lt.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		b, _ := io.ReadAll(lt)
		data[h.Name] = string(b)
	}
	for name, mode := range map[string]int64{"usr/": 0o755, "usr/local/": 0o755, "usr/local/bin/": 0o755, "etc/": 0o755, "usr/local/bin/prog": 0o755, "etc/prog.conf": 0o644} {
		h := files[name]
		if h == nil {
			t.Errorf("the layer has no %s (has %v)", name, files)
			continue
		}
		if h.Mode != mode || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mode %o uid %d gid %d, want %o, root", name, h.Mode, h.Uid, h.Gid, mode)
		}
	}
	if data["usr/local/bin/prog"] != "#!program\n" {
		t.Errorf("usr/local/bin/prog holds %q", data["usr/local/bin/prog"])
	}
}

// TestReproducible: the same spec gives the same image digest.
func TestReproducible(t *testing.T) {
	a, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of one spec: %s and %s", da, db)
	}
}

func TestBuildRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"no files", func(s *Spec) { s.Files = nil }, "no files"},
		{"relative", func(s *Spec) { s.Files[0].Path = "prog" }, "absolute path"},
		{"twice", func(s *Spec) { s.Files[1].Path = s.Files[0].Path }, "given twice"},
		{"file and folder", func(s *Spec) { s.Files[1].Path = "/usr/local/bin/prog/x" }, "both a file and a folder"},
		{"no platform", func(s *Spec) { s.Architecture = "" }, "no platform"},
	} {
		s := testSpec()
		tc.mod(&s)
		if _, err := Build(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

func TestParseName(t *testing.T) {
	for ref, want := range map[string]Names{
		"kwatch:v1.2.0":                   {Full: "docker.io/library/kwatch:v1.2.0", Tag: "v1.2.0"},
		"kwatch:33ec5fe-dirty":            {Full: "docker.io/library/kwatch:33ec5fe-dirty", Tag: "33ec5fe-dirty"},
		"registry.example/team/kwatch:v1": {Full: "registry.example/team/kwatch:v1", Tag: "v1"},
		"localhost:5000/kwatch:v1":        {Full: "localhost:5000/kwatch:v1", Tag: "v1"},
		"registry.k8s.io/pause:3.10.2":    {Full: "registry.k8s.io/pause:3.10.2", Tag: "3.10.2"},
	} {
		got, err := ParseName(ref)
		if err != nil || got != want {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v", ref, got, err, want)
		}
	}
	for _, ref := range []string{"kwatch", "KWatch:v1", "kwatch@sha256:" + strings.Repeat("0", 64), ""} {
		if got, err := ParseName(ref); err == nil {
			t.Errorf("ParseName(%q) = %+v, want an error", ref, got)
		}
	}
}

// TestPush pushes an image to a registry (go-containerregistry's, in
// memory, over HTTP on loopback) and pulls it back by the digest Push
// returned.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	img, err := Build(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	pushed, err := Push(context.Background(), img, host+"/kwatch:v1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if pushed != host+"/kwatch@"+want.String() {
		t.Errorf("Push returned %s, want %s/kwatch@%s", pushed, host, want)
	}
	ref, err := name.ParseReference(host + "/kwatch:v1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != want {
		t.Errorf("the registry serves kwatch:v1.2.0 as %s, want %s", d, want)
	}
}

func TestELFPlatform(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	goos, goarch, err := ELFPlatform(data)
	if err != nil || goos != "linux" || goarch != runtime.GOARCH {
		t.Errorf("ELFPlatform(the test binary) = %s/%s, %v; want linux/%s", goos, goarch, err, runtime.GOARCH)
	}
	if _, _, err := ELFPlatform([]byte("#!/bin/sh\n")); err == nil {
		t.Error("ELFPlatform(a script): no error")
	}
}
