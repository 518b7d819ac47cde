package gateway

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build is what the running binary was built from, as the Go toolchain
// stamped it (runtime/debug.ReadBuildInfo): `idem version` prints it and
// idem_build_info exports it.
type Build struct {
	// Version is the module's version: a release tag (v1.2.3), a
	// pseudo-version for a commit without one, or "(devel)" for a build
	// of a working tree the toolchain did not stamp (go build
	// -buildvcs=false, or no VCS to ask).
	Version  string
	Revision string // the VCS commit; "" when not stamped
	Modified bool   // the working tree had changes not in Revision
	Go       string // the Go version it was built with
}

// ReadBuild returns the running binary's Build.
func ReadBuild() Build { return buildOf(debug.ReadBuildInfo()) }

// buildOf is the Build that info says, ok false when there is none.
func buildOf(info *debug.BuildInfo, ok bool) Build {
	b := Build{Version: "(devel)", Go: runtime.Version()}
	if !ok {
		return b
	}
	b.Go = info.GoVersion
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// registerBuildInfo registers idem_build_info{version,revision,goversion}
// = 1 for b, which a query joins to another metric by instance to say
// which build answered.
func registerBuildInfo(reg prometheus.Registerer, b Build) {
	revision := b.Revision
	switch {
	case revision == "":
		revision = "unknown"
	case b.Modified:
		revision += "+modified"
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "idem_build_info",
		Help:        "1, labelled with the build of idem that runs: its module version, VCS revision (+modified for a tree with changes; unknown when not stamped) and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": revision, "goversion": b.Go},
	})
	info.Set(1)
	reg.MustRegister(info)
}
