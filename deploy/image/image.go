package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout: where the binary, its config file and the CA
// certificates are, and the user it runs as.
const (
	binaryPath = "/usr/local/bin/idem"
	configPath = "/etc/idem/idem.yaml"
	caPath     = "/etc/ssl/certs/ca-certificates.crt" // where Go's crypto/x509 looks first on Linux
	uid        = 65532                                // distroless's nonroot
	source     = "https://github.com/idemkit/idem"
	license    = "Apache-2.0"
)

// epoch is the time of every file and of the image: a build is the same
// image for the same binary.
var epoch = time.Unix(0, 0).UTC()

type options struct {
	out, repo, arch, version, revision, caCerts string
}

// build builds the image of o and appends it to the layout o.out; it
// returns the image's digest. It fills in o's version and revision from
// git when they are empty.
func build(o *options) (v1.Hash, error) {
	var err error
	if o.revision == "" {
		if o.revision, err = git(o.repo, "rev-parse", "HEAD"); err != nil {
			return v1.Hash{}, err
		}
	}
	if o.version == "" {
		if o.version, err = git(o.repo, "describe", "--tags", "--always", "--dirty"); err != nil {
			return v1.Hash{}, err
		}
	}
	bin, err := goBuild(*o)
	if err != nil {
		return v1.Hash{}, err
	}
	ca, err := os.ReadFile(o.caCerts)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("the CA certificates: %w", err)
	}
	img, err := imageOf(bin, ca, *o)
	if err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.FromPath(o.out)
	if err != nil {
		if p, err = layout.Write(o.out, empty.Index); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version, "org.opencontainers.image.revision": o.revision,
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.arch})); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// imageOf is the image of the binary bin, with ca as its certificates.
func imageOf(bin, ca []byte, o options) (v1.Image, error) {
	fs, err := files(bin, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fs)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.arch, v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{binaryPath, "serve"},
		Cmd:        []string{"--config", configPath},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin"},
		// The proxy's and the admin API's default ports (--listen, --admin).
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9090/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "idem",
			"org.opencontainers.image.description": "exactly-once side effects behind an Idempotency-Key: idem serve",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    o.revision,
			"org.opencontainers.image.source":      source,
			"org.opencontainers.image.licenses":    license,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// files is the layer's tar: the directories, /etc/passwd and /etc/group,
// the CA certificates and the binary, owned by root (the user cannot
// change them), with /tmp for whoever runs it without a read-only root.
func files(bin, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = epoch, tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dir := func(name string, mode int64) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, body)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	err := errors.Join(
		dir("etc", 0o755), dir("etc/idem", 0o755), dir("etc/ssl", 0o755), dir("etc/ssl/certs", 0o755),
		dir("usr", 0o755), dir("usr/local", 0o755), dir("usr/local/bin", 0o755), dir("tmp", 0o1777),
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "home/", Mode: 0o755}, nil),
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "home/nonroot/", Mode: 0o700, Uid: uid, Gid: uid}, nil),
		file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		file(strings.TrimPrefix(caPath, "/"), 0o644, ca),
		file(strings.TrimPrefix(binaryPath, "/"), 0o755, bin),
		tw.Close())
	return buf.Bytes(), err
}

// goBuild builds cmd/idem of o.repo, static, for linux/o.arch, with its
// VCS information (go version -m shows the revision), and returns it.
func goBuild(o options) ([]byte, error) {
	dir, err := os.MkdirTemp("", "idem-image")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "idem")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w", "-o", out, "./cmd/idem")
	cmd.Dir = o.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/idem: %w\n%s", err, b)
	}
	return os.ReadFile(out)
}

func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}
