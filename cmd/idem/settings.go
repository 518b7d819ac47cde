package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/gateway"
)

// origin says where a setting's value came from: the command line
// ("flag", Where "--lease"), the environment ("env", "IDEM_LEASE"), the
// config file ("file", "/etc/idem/idem.yaml:12") or the flag's default
// ("default").
type origin struct {
	Kind  string `json:"source"`
	Where string `json:"origin,omitempty"`
}

func (o origin) String() string {
	if o.Where == "" {
		return o.Kind
	}
	return o.Kind + " " + o.Where
}

// settings is what resolveFlags decided: the origin of every flag's value,
// the config file, and the settings of the file that a flag or a variable
// overrode.
type settings struct {
	origins  map[string]origin
	file     *configFile       // nil without a config file
	shadowed map[string]origin // flag name → the file's setting that did not count
}

// envName is the variable of a flag: IDEM_ and its name in capitals, '-' as '_'.
func envName(flagName string) string {
	return "IDEM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// resolveFlags is the one precedence chain of every idem command: it
// parses args into fs, then sets each flag that the command line did not
// give from its IDEM_ variable, then from the config file, else leaves
// its default, and records where each value came from. fileFlag names the
// flag that gives the config file's path (on the command line or as its
// variable; "" for a command without one); cmdLineOnly are flags that
// neither a variable nor the file may set (modes of one run, such as
// --check-config). Every value is final when it returns: a caller reads
// none before.
func resolveFlags(fs *flag.FlagSet, args []string, fileFlag string, cmdLineOnly ...string) (*settings, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w (see 'idem help %s')", errUsage, err, fs.Name())
	}
	if err := refuseStrayVariables(fs, cmdLineOnly); err != nil {
		return nil, err
	}
	st := &settings{origins: map[string]origin{}, shadowed: map[string]origin{}}
	fs.Visit(func(f *flag.Flag) { st.origins[f.Name] = origin{"flag", "--" + f.Name} })
	fromEnv := func(name string) (bool, error) {
		v, ok := os.LookupEnv(envName(name))
		if !ok || slices.Contains(cmdLineOnly, name) {
			return false, nil
		}
		if err := setFlag(fs, name, v); err != nil {
			return false, fmt.Errorf("%w: %s=%w", errUsage, envName(name), err)
		}
		st.origins[name] = origin{"env", envName(name)}
		return true, nil
	}
	if fileFlag != "" {
		if _, given := st.origins[fileFlag]; !given {
			if _, err := fromEnv(fileFlag); err != nil {
				return nil, err
			}
		}
		if path := fs.Lookup(fileFlag).Value.String(); path != "" {
			f, err := loadConfigFile(path, fs, append([]string{fileFlag}, cmdLineOnly...))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errUsage, err)
			}
			st.file = f
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || f.Name == fileFlag {
			return
		}
		value, inFile := "", false
		if st.file != nil {
			value, inFile = st.file.values[f.Name]
		}
		fileOrigin := origin{"file", st.file.at(f.Name)}
		if _, given := st.origins[f.Name]; given {
			if inFile {
				st.shadowed[f.Name] = fileOrigin
			}
			return
		}
		var set bool
		if set, err = fromEnv(f.Name); err != nil || set {
			if set && inFile {
				st.shadowed[f.Name] = fileOrigin
			}
			return
		}
		if inFile {
			if e := setFlag(fs, f.Name, value); e != nil {
				err = fmt.Errorf("%w: %w", errUsage, st.file.errAt(st.file.lines[f.Name], f.Name, e.Error()))
				return
			}
			st.origins[f.Name] = fileOrigin
			return
		}
		st.origins[f.Name] = origin{Kind: "default"}
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// setFlag sets the flag name to value, as a variable or the config file
// gives it; its error quotes the value and says what the flag wants (a
// duration's unit, as a route's duration says), not only flag's "parse
// error".
func setFlag(fs *flag.FlagSet, name, value string) error {
	err := fs.Set(name, value)
	if err == nil {
		return nil
	}
	if g, ok := fs.Lookup(name).Value.(flag.Getter); ok {
		if _, isDuration := g.Get().(time.Duration); isDuration {
			return fmt.Errorf("%q is not a duration: want a number with a unit, e.g. 30s, 5m or 1h30m", value)
		}
	}
	return fmt.Errorf("invalid value %q: %w", value, err)
}

// harnessVariables are the prefixes of the IDEM_ variables that idem's
// own tests and tools read (not settings of any command): a command
// leaves them alone.
var harnessVariables = []string{"IDEM_TEST_", "IDEM_CHECK", "IDEM_E2E_", "IDEM_LONG_E2E", "IDEM_LAB_WORKER", "IDEM_SCREENSHOTS", "IDEM_TOMBSTONE_COST", "IDEM_MUTATE_"}

// refuseStrayVariables refuses an IDEM_ variable that sets nothing: one
// that names no flag of the command (a typo such as IDEM_STORE_URL would
// otherwise leave the gateway on its default store, and nothing would
// say so), or a flag that only the command line may give.
func refuseStrayVariables(fs *flag.FlagSet, cmdLineOnly []string) error {
	flags := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { flags[envName(f.Name)] = f.Name })
	var stray []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "IDEM_") {
			continue
		}
		flagName, ok := flags[name]
		switch {
		case ok && slices.Contains(cmdLineOnly, flagName):
			return fmt.Errorf("%w: %s is set, and --%s is taken only from the command line; unset it", errUsage, name, flagName)
		case ok || slices.ContainsFunc(harnessVariables, func(p string) bool { return strings.HasPrefix(name, p) }):
		default:
			stray = append(stray, name)
		}
	}
	if len(stray) == 0 {
		return nil
	}
	slices.Sort(stray)
	return fmt.Errorf("%w: %s in the environment names no setting of idem %s (see 'idem help %s'): unset it or correct its name",
		errUsage, strings.Join(stray, ", "), fs.Name(), fs.Name())
}

// warnings says, for each setting of the file that a variable overrode,
// that the file's value does not count: a file edited and reloaded would
// otherwise seem to be ignored (the shipped idem.env once overrode every
// setting of the shipped idem.yaml). A flag on the command line is a
// deliberate override, and --check-config lists it.
func (st *settings) warnings() []string {
	var out []string
	for name, file := range st.shadowed {
		if o := st.origins[name]; o.Kind == "env" {
			out = append(out, fmt.Sprintf("idem: %s in the environment overrides %s at %s: the file's value is not used; "+
				"set it in one place", o.Where, name, file.Where))
		}
	}
	slices.Sort(out)
	return out
}

// explain adds where a setting came from to an error about it: the file
// and line of a gateway.FieldError's field (a route's), or, for a flag
// that the message names as --NAME, the file's line or the variable that
// set it.
func (st *settings) explain(err error) error {
	if st == nil || err == nil {
		return err
	}
	if fe, ok := errors.AsType[*gateway.FieldError](err); ok && st.file != nil {
		c := st.file
		path := fe.Path
		for c.lines[path] == 0 && strings.ContainsAny(path, ".[") { // the nearest field that is in the file
			path = path[:strings.LastIndexAny(path, ".[")]
		}
		return fmt.Errorf("%w: %s", errUsage, c.errAt(c.lines[path], fe.Path, fe.Err.Error()))
	}
	var where []string
	for name, o := range st.origins {
		if o.Kind != "file" && o.Kind != "env" {
			continue
		}
		if regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `\b([^-]|$)`).MatchString(err.Error()) {
			if o.Kind == "file" {
				where = append(where, "set at "+o.Where)
			} else {
				where = append(where, "set by "+o.Where)
			}
		}
	}
	if len(where) == 0 {
		return err
	}
	slices.Sort(where)
	return fmt.Errorf("%w (%s)", err, strings.Join(where, ", "))
}
