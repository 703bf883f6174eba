// Command image writes the OCI image of a static program (internal/image):
// `make image` runs it for kwatch, hack/cluster-up.sh for the pause image of
// the test stack's nodes.
//
//	go run ./hack/image -binary bin/kwatch -name kwatch:v1.2.0 -o bin/kwatch-image.tar
//	go run ./hack/image -binary bin/kwatch -name registry.example/kwatch:v1.2.0 -push
//
// The program goes to -path in the image (default /usr/local/bin/NAME, on
// the image's PATH) and is its entrypoint. -o writes an OCI image layout
// tarball that `ctr -n k8s.io images import` loads under the full name
// (docker.io/library/kwatch:v1.2.0); -push writes the image to the registry
// of -name with the Docker config's credentials. It prints the image's
// digest on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/kwatch/kwatch/internal/image"
)

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	l[k] = val
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "", "the static program to put in the image (required)")
	inImage := flag.String("path", "", "where the program goes in the image (default /usr/local/bin/ and its file name)")
	ref := flag.String("name", "", "the image's name with its tag, e.g. kwatch:v1.2.0 or registry.example/kwatch:v1.2.0 (required)")
	out := flag.String("o", "", "write an OCI image layout tarball to this file")
	push := flag.Bool("push", false, "push the image to the registry of -name (credentials from the Docker config, as docker and crane find them)")
	user := flag.String("user", "", "the user the entrypoint runs as (UID:GID); root by default")
	lab := labels{}
	flag.Var(lab, "label", "a config label KEY=VALUE (repeatable)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *binary == "" || *ref == "" {
		return errors.New("-binary and -name are required")
	}
	if *out == "" && !*push {
		return errors.New("nothing to do: give -o FILE, -push or both")
	}
	if _, err := image.ParseName(*ref); err != nil {
		return err
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	goos, goarch, err := image.ELFPlatform(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	dst := *inImage
	if dst == "" {
		dst = "/usr/local/bin/" + filepath.Base(*binary)
	}
	img, err := image.Build(image.Spec{
		Files:        []image.File{{Path: dst, Mode: 0o755, Data: data}},
		Entrypoint:   []string{dst},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		User:         *user,
		Labels:       lab,
		OS:           goos,
		Architecture: goarch,
	})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *out != "" {
		if err := image.WriteLayoutFile(*out, img, *ref); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s (%s, %s/%s) to %s\n", *ref, digest, goos, goarch, *out)
	}
	if *push {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		pushed, err := image.Push(ctx, img, *ref)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "pushed %s\n", pushed)
	}
	fmt.Println(digest)
	return nil
}
