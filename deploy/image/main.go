// Command image builds the OCI image of idem without a container daemon:
// go build of cmd/idem (static: CGO_ENABLED=0), then the image's one
// layer and config written by go-containerregistry into an OCI image
// layout, which crane, skopeo, podman or a registry push take as it is:
//
//	cd deploy/image && go run . --out ../../idem-oci
//	skopeo copy oci:../../idem-oci docker://registry.example/idem:TAG
//
// The image is distroless in kind, built from nothing: the idem binary,
// the CA certificates, and /etc/passwd and /etc/group naming the one user
// it runs as, 65532 (nonroot), with no shell and no package manager. Its
// entrypoint is `idem serve`, its command `--config /etc/idem/idem.yaml`,
// where the Helm chart (deploy/helm/idem) mounts the config file. Its
// labels say the version, the revision, the source and the license.
// Files have a fixed time, so a build of one revision is the same image.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "the OCI image layout to write (a directory; created, or added to)")
	flag.StringVar(&o.repo, "repo", "../..", "the idem repository to build cmd/idem from")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "the GOARCH of the image")
	flag.StringVar(&o.version, "version", "", "the org.opencontainers.image.version label (default: git describe of the repository)")
	flag.StringVar(&o.revision, "revision", "", "the org.opencontainers.image.revision label (default: git rev-parse HEAD)")
	flag.StringVar(&o.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates bundle to put in the image")
	flag.Parse()
	if o.out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: image --out DIR [--repo DIR] [--arch GOARCH] [--version V] [--revision SHA] [--ca-certs FILE]")
		os.Exit(2)
	}
	digest, err := build(&o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s (idem %s, %s, linux/%s)\n", o.out, digest, o.version, o.revision, o.arch)
}
