// Package image builds OCI images of static programs, such as kwatch's own
// image (make image) and the pause image of the test stack's nodes, with
// go-containerregistry: one layer holding the files, a config with the
// entrypoint, written as an OCI image layout tarball that `ctr images import`
// and `skopeo copy oci-archive:…` read, or pushed to a registry.
//
// Images are reproducible: the same files and settings give the same image
// digest (file times and the config's creation time are Spec.Created, the
// Unix epoch by default).
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations on the image's descriptor in an OCI layout's index.json, as
// containerd's importer reads them (containerd's core/images/archive): the
// full normalized name first; without it, the reference name.
const (
	// AnnotationImageName is containerd's image-name annotation
	// ("io.containerd.image.name"): the full normalized reference, e.g.
	// "docker.io/library/kwatch:v1.2.0", under which `ctr images import`
	// stores the image and the CRI finds it.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI image layout's reference name
	// ("org.opencontainers.image.ref.name", OCI image-spec annotations.md):
	// the tag, e.g. "v1.2.0", as BuildKit's OCI exporter writes it.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// File is one regular file of an image's layer.
type File struct {
	// Path is the file's absolute path in the image, e.g.
	// "/usr/local/bin/kwatch"; its parent folders are added (mode 0755).
	Path string
	// Mode is its permission bits, e.g. 0o755 for a program.
	Mode fs.FileMode
	// Data is its content.
	Data []byte
}

// Spec describes a one-layer image.
type Spec struct {
	// Files are the layer's files.
	Files []File
	// Entrypoint is the config's entrypoint (OCI image-spec config.md
	// Entrypoint), e.g. ["/usr/local/bin/kwatch"].
	Entrypoint []string
	// Env is the config's environment, "NAME=value" each.
	Env []string
	// User is the config's user ("UID:GID"); "" runs as root.
	User string
	// Labels are the config's labels (org.opencontainers.image.* and the
	// like).
	Labels map[string]string
	// OS and Architecture are the image's platform in GOOS/GOARCH terms
	// ("linux", "amd64"); ELFPlatform reads them from a program.
	OS, Architecture string
	// Created is the config's creation time and every file's time; the
	// zero Time means the Unix epoch, so that an image is reproducible.
	Created time.Time
}

// Build returns the image Spec describes: an OCI manifest (media type
// application/vnd.oci.image.manifest.v1+json) with one gzip'd layer and an
// OCI config.
func Build(s Spec) (v1.Image, error) {
	if len(s.Files) == 0 {
		return nil, errors.New("image: no files")
	}
	if s.OS == "" || s.Architecture == "" {
		return nil, errors.New("image: no platform (OS and Architecture)")
	}
	created := s.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	layerTar, err := layerTar(s.Files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "kwatch internal/image: " + strings.Join(paths(s.Files), " ")},
	})
	if err != nil {
		return nil, fmt.Errorf("image: appending the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = s.OS
	cf.Architecture = s.Architecture
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = s.Entrypoint
	cf.Config.Env = s.Env
	cf.Config.User = s.User
	cf.Config.Labels = s.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

func paths(files []File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

// layerTar is the layer's uncompressed tar: the files' parent folders, then
// the files, in path order, owned by root, all with the time t.
func layerTar(files []File, t time.Time) ([]byte, error) {
	byPath := map[string]File{}
	dirs := map[string]bool{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("image: file path %q: want an absolute path of a file", f.Path)
		}
		p = strings.TrimPrefix(p, "/")
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("image: file %s given twice", f.Path)
		}
		byPath[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		if _, clash := byPath[d]; clash {
			return nil, fmt.Errorf("image: %s is both a file and a folder", "/"+d)
		}
		names = append(names, d+"/")
	}
	for p := range byPath {
		names = append(names, p)
	}
	slices.Sort(names) // a folder ("usr/") sorts before what it holds ("usr/local/")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: t, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if f, ok := byPath[n]; ok {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(f.Mode.Perm()), int64(len(f.Data))
		} else {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if f, ok := byPath[n]; ok {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Names are the names an image is stored under: Full for containerd and the
// CRI (AnnotationImageName), Tag for the OCI layout (AnnotationRefName).
type Names struct {
	// Full is the normalized reference, e.g.
	// "docker.io/library/kwatch:v1.2.0" for "kwatch:v1.2.0", as
	// distribution/reference's ParseNormalizedNamed makes it (the CRI
	// looks images up by that name).
	Full string
	// Tag is its tag, e.g. "v1.2.0".
	Tag string
}

// ParseName normalizes ref ("kwatch:v1.2.0", "registry.example/kwatch:v1")
// as Docker and the CRI do. ref must carry a tag and no digest.
func ParseName(ref string) (Names, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return Names{}, fmt.Errorf("image name %q: %w", ref, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return Names{}, fmt.Errorf("image name %q: want NAME:TAG, not a digest", ref)
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return Names{}, fmt.Errorf("image name %q: no tag (want NAME:TAG, e.g. kwatch:v1.2.0)", ref)
	}
	return Names{Full: named.String(), Tag: tagged.Tag()}, nil
}

// WriteLayout writes img as an OCI image layout tarball (OCI image-spec
// image-layout.md: oci-layout, index.json, blobs/sha256/…) to w, its
// index.json entry annotated with ref's names (AnnotationImageName,
// AnnotationRefName) and platform, so that `ctr -n k8s.io images import
// FILE` stores it as ref's full name.
func WriteLayout(w io.Writer, img v1.Image, ref string) error {
	names, err := ParseName(ref)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image: config: %w", err)
	}
	dir, err := os.MkdirTemp("", "kwatch-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: OCI layout: %w", err)
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{AnnotationImageName: names.Full, AnnotationRefName: names.Tag}),
		layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture}))
	if err != nil {
		return fmt.Errorf("image: OCI layout: %w", err)
	}
	if err := tarDir(w, dir); err != nil {
		return fmt.Errorf("image: writing the layout tarball: %w", err)
	}
	return nil
}

// tarDir writes the files below dir to w as a tar, in path order, folders
// 0755 and files 0644, owned by root, with their times.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: p, ModTime: info.ModTime(), Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, p+"/", 0o755
		case d.Type().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		default:
			return fmt.Errorf("%s: not a file or folder", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// WriteLayoutFile writes img as an OCI image layout tarball to the file
// named path (WriteLayout), replacing it only once it is whole.
func WriteLayoutFile(path string, img v1.Image, ref string) error {
	f, err := os.CreateTemp(dirOf(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := WriteLayout(f, img, ref); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func dirOf(p string) string {
	if d := path.Dir(p); d != "" {
		return d
	}
	return "."
}

// Push writes img to the registry ref names (e.g.
// "registry.example/kwatch:v1.2.0"), with the credentials of the Docker
// config (~/.docker/config.json, $DOCKER_CONFIG) and its credential helpers,
// as `docker push` and `crane push` find them. It returns the pushed
// reference by digest (NAME@sha256:…).
func Push(ctx context.Context, img v1.Image, ref string, opts ...remote.Option) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.Write(tag, img, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(d.String()).String(), nil
}

// ELFPlatform returns the GOOS/GOARCH-style platform of the ELF program in
// data ("linux", "amd64"), for Spec.OS and Spec.Architecture: an image
// carries the platform of the program it runs.
func ELFPlatform(data []byte) (goos, goarch string, err error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", "", fmt.Errorf("not an ELF program: %w", err)
	}
	defer f.Close()
	arch, ok := map[elf.Machine]string{
		elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64", elf.EM_LOONGARCH: "loong64",
	}[f.Machine]
	if !ok {
		return "", "", fmt.Errorf("ELF machine %s: no Go architecture for it", f.Machine)
	}
	if f.Machine == elf.EM_PPC64 && f.Data == elf.ELFDATA2MSB {
		arch = "ppc64"
	}
	return "linux", arch, nil
}
