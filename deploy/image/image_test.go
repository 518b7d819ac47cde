package main

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Issue 36, item 6: the image is built without a daemon into an OCI
// layout, and what it holds is what its doc says: the entrypoint `idem
// serve` with the config path, the user 65532, the OCI labels, no shell
// and nothing but the binary, the certificates and the user's entries;
// the binary is static, of the labelled revision, and runs.
func TestImageBuildsAndHoldsWhatItSays(t *testing.T) {
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		t.Fatalf("no CA certificates to put in the image (apt-get install ca-certificates): %v", err)
	}
	out := filepath.Join(t.TempDir(), "oci")
	o := options{out: out, repo: "../..", arch: runtime.GOARCH, version: "v0.0.0-test", caCerts: "/etc/ssl/certs/ca-certificates.crt"}
	digest, err := build(&o)
	if err != nil {
		t.Fatal(err)
	}
	revision, err := git("../..", "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}

	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	index, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != digest || im.Manifests[0].MediaType != types.OCIManifestSchema1 ||
		im.Manifests[0].Platform == nil || im.Manifests[0].Platform.OS != "linux" || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Fatalf("the layout's index = %+v; want the one OCI image %v, linux/%s", im.Manifests, digest, runtime.GOARCH)
	}
	img, err := p.Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/idem", "serve"}) || !slices.Equal(c.Cmd, []string{"--config", "/etc/idem/idem.yaml"}) {
		t.Errorf("entrypoint %q, command %q; want idem serve --config /etc/idem/idem.yaml", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("user %q, platform %s/%s; want 65532:65532 on linux/%s", c.User, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	for label, want := range map[string]string{
		"org.opencontainers.image.version": "v0.0.0-test", "org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source": "https://github.com/idemkit/idem", "org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if got := c.Labels[label]; got != want {
			t.Errorf("label %s = %q; want %q", label, got, want)
		}
	}

	// The files: no shell, nothing else that runs.
	got := map[string]*tar.Header{}
	var bin, passwd []byte
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		got[name] = h
		switch name {
		case "usr/local/bin/idem":
			bin, err = io.ReadAll(tr)
		case "etc/passwd":
			passwd, err = io.ReadAll(tr)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh", "bin"} {
		if _, ok := got[shell]; ok {
			t.Errorf("the image has %s", shell)
		}
	}
	for name, h := range got {
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 && name != "usr/local/bin/idem" {
			t.Errorf("the image has another executable: %s", name)
		}
	}
	if h := got["etc/ssl/certs/ca-certificates.crt"]; h == nil || h.Size == 0 {
		t.Error("the image has no CA certificates")
	}
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q; want the user 65532", passwd)
	}
	if h := got["usr/local/bin/idem"]; h == nil || h.Mode != 0o755 || h.Uid != 0 {
		t.Fatalf("the binary's header = %+v; want root's, mode 0755", h)
	}

	// The binary: static, of the labelled revision, and it runs.
	path := filepath.Join(t.TempDir(), "idem")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := exec.Command("go", "version", "-m", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\tpath\tgithub.com/idemkit/idem/cmd/idem\n", "\tbuild\tCGO_ENABLED=0\n", "\tbuild\tGOOS=linux\n"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("go version -m of the image's binary lacks %q:\n%s", want, info)
		}
	}
	// go stamps the revision where it finds the repository's .git folder
	// (a clone; not a git worktree, whose .git is a file): there it is
	// the labelled one.
	if stamped := regexp.MustCompile(`\tbuild\tvcs\.revision=(\w+)\n`).FindStringSubmatch(string(info)); stamped != nil && stamped[1] != revision {
		t.Errorf("the binary was built from %s; its label says %s", stamped[1], revision)
	}
	version, err := exec.Command(path, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(version), "idem ") {
		t.Fatalf("idem version in the image = %v, %q; want idem and its version", err, version)
	}
	// A commit it prints is the labelled one (a run of digits alone is a
	// pseudo-version's time).
	for _, commit := range regexp.MustCompile(`\b[0-9a-f]{7,40}\b`).FindAllString(string(version), -1) {
		if strings.Trim(commit, "0123456789") != "" && !strings.HasPrefix(revision, commit) {
			t.Errorf("idem version = %q: commit %s; the label says %s", version, commit, revision)
		}
	}
}
