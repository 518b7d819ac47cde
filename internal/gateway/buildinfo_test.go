package gateway

import (
	"runtime/debug"
	"testing"
)

// Issue 36, item 2: idem version and idem_build_info say the module
// version, the VCS revision (and whether the tree had changes) and the Go
// version, as the toolchain stamped them; a build it did not stamp says
// (devel) and no revision.
func TestBuildOf(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		info *debug.BuildInfo
		ok   bool
		want Build
	}{
		{stamped, true, Build{Version: "v1.4.0", Revision: "0123abcd", Modified: true, Go: "go1.26.1"}},
		{&debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}}, true, Build{Version: "(devel)", Go: "go1.26.1"}},
		{&debug.BuildInfo{GoVersion: "go1.26.1"}, true, Build{Version: "(devel)", Go: "go1.26.1"}},
	} {
		if got := buildOf(c.info, c.ok); got != c.want {
			t.Errorf("buildOf(%+v) = %+v; want %+v", c.info, got, c.want)
		}
	}
	if got := buildOf(nil, false); got.Version != "(devel)" || got.Go == "" {
		t.Errorf("buildOf without build info = %+v; want (devel) and the running Go", got)
	}
}
