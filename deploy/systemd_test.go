package deploy

import (
	"bufio"
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// unitSettings returns the settings of a unit file: each key with its
// values in order (a key may repeat).
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if key, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[key] = append(settings[key], value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return settings
}

// The unit keeps the hardening and the lifecycle settings docs/deployment.md
// promises, and stops idem only after its shutdown can have finished.
func TestSystemdUnitSettings(t *testing.T) {
	unit := unitSettings(t, "systemd/idem.service")
	for key, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"CapabilityBoundingSet": "", "MemoryDenyWriteExecute": "yes", "LockPersonality": "yes",
		"RestrictNamespaces": "yes", "RestrictSUIDSGID": "yes", "ProtectKernelTunables": "yes",
		"ExecStart": "/usr/local/bin/idem serve", "ExecReload": "/bin/kill -HUP $MAINPID",
		"EnvironmentFile": "/etc/idem/idem.env", "Restart": "on-failure", "KillSignal": "SIGTERM",
		"RestartPreventExitStatus": "2",
	} {
		if got := unit[key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q; want %q", key, got, want)
		}
	}
	if f := unit["SystemCallFilter"]; len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("SystemCallFilter = %q; want @system-service first", f)
	}
	// TimeoutStopSec must cover --drain-delay and --shutdown-timeout, then
	// the marking of the requests it cut (idem.FinalizeTimeout), or SIGKILL
	// leaves their keys PROCESSING until their leases end. The shipped
	// config file sets them (idem.env sets no setting the file has).
	stop, err := time.ParseDuration(strings.Join(unit["TimeoutStopSec"], ""))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	text, err := os.ReadFile("idem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Shutdown string `yaml:"shutdown-timeout"`
		Drain    string `yaml:"drain-delay"`
	}
	if err := yaml.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	shutdown, err := time.ParseDuration(file.Shutdown)
	if err != nil {
		t.Fatalf("idem.yaml: shutdown-timeout: %v", err)
	}
	drain, err := time.ParseDuration(cmp.Or(file.Drain, "0s"))
	if err != nil {
		t.Fatalf("idem.yaml: drain-delay: %v", err)
	}
	if stop <= drain+shutdown+idem.FinalizeTimeout {
		t.Errorf("TimeoutStopSec %v; want more than --drain-delay %v + --shutdown-timeout %v + %v", stop, drain, shutdown, idem.FinalizeTimeout)
	}
}

// credentialLines are the unit's commented LoadCredential= and
// Environment= lines: the secret files an operator uncomments.
var credentialLines = regexp.MustCompile(`(?m)^#((?:LoadCredential|Environment)=.*)$`)

// withCredentials is the unit with its credential lines uncommented.
func withCredentials(unit string) string {
	return credentialLines.ReplaceAllString(unit, "$1")
}

// The deploy fix of issue 36: the docs keep the admin tokens file (and a
// TLS key) mode 600, root's, which the unit's dynamic user cannot read.
// The unit loads each as a systemd credential and points its flag's
// variable at the copy (%d, $CREDENTIALS_DIRECTORY): every credential it
// loads is one a variable names, and every variable that names one names
// a credential it loads, from /etc/idem.
func TestSystemdUnitLoadsSecretFilesAsCredentials(t *testing.T) {
	unit, err := os.ReadFile("systemd/idem.service")
	if err != nil {
		t.Fatal(err)
	}
	loaded, named := map[string]string{}, map[string]string{}
	for _, m := range credentialLines.FindAllStringSubmatch(string(unit), -1) {
		key, value, _ := strings.Cut(m[1], "=")
		if key == "LoadCredential" {
			id, path, _ := strings.Cut(value, ":")
			if !strings.HasPrefix(path, "/etc/idem/") {
				t.Errorf("LoadCredential=%s: want a file in /etc/idem", value)
			}
			loaded[id] = path
			continue
		}
		for _, assignment := range strings.Fields(value) {
			variable, path, _ := strings.Cut(assignment, "=")
			id, ok := strings.CutPrefix(path, "%d/")
			if !ok || !strings.HasPrefix(variable, "IDEM_") {
				t.Errorf("Environment=%s: want IDEM_FLAG=%%d/ID", assignment)
			}
			named[id] = variable
		}
	}
	for _, id := range []string{"admin-tokens", "tls.key", "admin-tls.key"} {
		if loaded[id] == "" {
			t.Errorf("no LoadCredential for %s", id)
		}
	}
	for id := range loaded {
		if named[id] == "" {
			t.Errorf("credential %s is loaded and no variable names it", id)
		}
	}
	for id, variable := range named {
		if loaded[id] == "" {
			t.Errorf("%s names credential %s, which is not loaded", variable, id)
		}
	}
}

// systemd-analyze verifies the unit (syntax, every setting known to this
// systemd), with its credential lines commented as shipped and
// uncommented, and rates its exposure at most 2.0, systemd's "OK". verify
// wants ExecStart's program to exist: this copy runs the test binary.
func TestSystemdUnitVerifies(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Unavailable(t, "systemd-analyze (Debian package systemd)", err)
	}
	unit, err := os.ReadFile("systemd/idem.service")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "idem.service")
	copied := strings.Replace(string(unit), "ExecStart=/usr/local/bin/idem ", "ExecStart="+self+" ", 1)
	if err := os.WriteFile(path, []byte(withCredentials(copied)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify, the credentials uncommented: %v\n%s", err, out)
	}
	if err := os.WriteFile(path, []byte(copied), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "security", "--offline=true", "--threshold=20", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security --threshold=20 (exposure above 2.0): %v\n%s", err, out)
	}
	if m := regexp.MustCompile(`Overall exposure level for \S+: [0-9.]+ \w+`).Find(out); m != nil {
		t.Log(string(m))
	} else {
		t.Errorf("systemd-analyze security printed no exposure level:\n%s", out)
	}
}
