package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/redact"
)

// effectiveConfig is what `idem serve --check-config` prints: every
// setting with its value and where it came from, and every route's
// effective policy, each option with where it came from. It is the
// configuration a start would run, checked as a start checks it (but for
// the store's answer): a program may take it as what the gateway
// enforces (--check-config=json).
type effectiveConfig struct {
	Version  string             `json:"version"`
	Config   string             `json:"config"` // the config file's path; "" without one
	Settings map[string]setting `json:"settings"`
	// Routes are the file's routes in its order (matched by
	// http.ServeMux's precedence, the most specific first), then the
	// policy of the requests no route matches, whose match is "".
	Routes   []effectiveRoute `json:"routes"`
	Warnings []string         `json:"warnings"`
}

// setting is one flag's effective value (secrets masked) and its origin.
type setting struct {
	Value string `json:"value"`
	origin
	// Overrides is the file's line of a value that a flag or a variable
	// replaced.
	Overrides string `json:"overrides,omitempty"`
	Reload    bool   `json:"reload"` // a SIGHUP applies a change of it; false: a restart does
}

// effectiveRoute is a route's policy: each option with its value and its
// origin: the file's line, "inherited" from the top-level setting of the
// same name (Where says which and from where), or "default".
type effectiveRoute struct {
	Match  string                 `json:"match"`
	Name   string                 `json:"name,omitempty"`
	Source string                 `json:"source,omitempty"` // where the file defines it
	Policy map[string]routeOption `json:"policy"`
}

type routeOption struct {
	Value any `json:"value"`
	origin
}

// secretSetting matches the flags whose value is a secret (a token, a
// password), not those that name a file holding one.
var secretSetting = regexp.MustCompile(`(token|password|secret)$`)

// shown is a setting's value as --check-config and the log show it:
// masked when secret, a URL's password and secret parameters hidden.
func shown(name, value string) string {
	if secretSetting.MatchString(name) && value != "" {
		return redact.Mask
	}
	return redact.URL(value)
}

func effective(s *serveSetup) effectiveConfig {
	st := s.settings
	out := effectiveConfig{Version: version(), Settings: map[string]setting{}, Warnings: st.warnings()}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if st.file != nil {
		out.Config = st.file.path
	}
	s.flags.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || slices.Contains(commandLineOnly, f.Name) {
			return
		}
		out.Settings[f.Name] = setting{Value: shown(f.Name, f.Value.String()), origin: st.origins[f.Name],
			Overrides: st.shadowed[f.Name].Where, Reload: !slices.Contains(restartOnly, f.Name)}
	})
	if t := out.Settings["tenant-from"]; t.Value == "" {
		// The flag's default is empty; what runs depends on the error format.
		t.Value = strings.Join(gateway.DefaultTenantFrom(s.cfg.ErrorFormat), ",")
		out.Settings["tenant-from"] = t
	}
	for i, rt := range s.cfg.Routes {
		out.Routes = append(out.Routes, s.routePolicy(rt, fmt.Sprintf("routes[%d]", i)))
	}
	out.Routes = append(out.Routes, s.routePolicy(gateway.Route{}, ""))
	return out
}

// routeDefaults say what a route option left out means when no top-level
// setting of its name exists.
var routeDefaults = map[string]routeOption{
	"key-from":    {"header", origin{"default", "the Idempotency-Key header"}},
	"fingerprint": {map[string]any{}, origin{"default", "the whole request"}},
	"statuses":    {map[string]any{}, origin{"default", "the --error-format's policy (docs/problems.md)"}},
}

// routePolicy is the effective policy of rt, the route at field (""
// for the top level's): each option the route sets, else the top-level
// setting of the same name (the rule of docs/configuration.md, "Routes",
// which gateway.Route's fields follow), else its default.
func (s *serveSetup) routePolicy(rt gateway.Route, field string) effectiveRoute {
	file := s.settings.file
	er := effectiveRoute{Match: rt.Pattern, Name: rt.Name, Policy: map[string]routeOption{}}
	if field != "" {
		er.Source = file.at(field)
	}
	v := reflect.ValueOf(rt)
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("yaml")
		if name == "" || name == "-" || name == "match" || name == "name" {
			continue
		}
		fv := v.Field(i)
		switch {
		case rt.PassThrough && name != "pass-through" && name != "upstream-timeout":
			continue // forwarded as it comes: no other option applies but its upstream call's bound
		case field != "" && !fv.IsZero():
			er.Policy[name] = routeOption{optionValue(name, fv), origin{"file", file.at(field + "." + name)}}
		case s.flags.Lookup(name) != nil:
			top := s.flags.Lookup(name)
			o := s.settings.origins[name]
			if field != "" {
				o = origin{"inherited", fmt.Sprintf("%s (%s)", name, o)}
			}
			er.Policy[name] = routeOption{flagOptionValue(name, top, fv.Type()), o}
		case routeDefaults[name].Kind != "":
			er.Policy[name] = routeDefaults[name]
		default:
			er.Policy[name] = routeOption{optionValue(name, fv), origin{Kind: "default"}}
		}
	}
	return er
}

// optionValue is a route option's value as JSON shows it: a duration as
// Go writes it (30s, 5m0s), a list as a list, a rule as its fields.
func optionValue(name string, v reflect.Value) any {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Struct:
		m := map[string]any{}
		for i := range v.NumField() {
			if tag := v.Type().Field(i).Tag.Get("yaml"); tag != "" && !v.Field(i).IsZero() {
				m[tag] = optionValue(tag, v.Field(i))
			}
		}
		return m
	case v.Kind() == reflect.Slice && name == "methods":
		return splitList(strings.ToUpper(strings.Join(v.Interface().([]string), ","))) // the gateway's spelling
	case v.Kind() == reflect.String:
		return shown(name, v.String())
	}
	return v.Interface()
}

// flagOptionValue is the top-level flag f's value in the shape of a route
// option of type t.
func flagOptionValue(name string, f *flag.Flag, t reflect.Type) any {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice:
		list := splitList(f.Value.String())
		if name == "methods" {
			list = splitList(strings.ToUpper(f.Value.String()))
		}
		if list == nil {
			list = []string{}
		}
		return list
	case t == durationType || t.Kind() == reflect.String:
		return shown(name, f.Value.String())
	}
	return f.Value.(flag.Getter).Get()
}

// printConfig prints s's effective configuration: as JSON with
// --check-config=json, else as text.
func printConfig(w io.Writer, s *serveSetup) error {
	c := effective(s)
	if s.checkConfig == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "# idem serve --check-config (idem %s): the effective configuration; secrets hidden\n", c.Version)
	if c.Config != "" {
		fmt.Fprintf(tw, "# config file: %s\n", c.Config)
	}
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM\tRELOAD")
	for _, name := range slices.Sorted(maps.Keys(c.Settings)) {
		v := c.Settings[name]
		from := v.origin.String()
		if v.Overrides != "" {
			from += " (over file " + v.Overrides + ")"
		}
		reload := "restart"
		if v.Reload {
			reload = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, v.Value, from, reload)
	}
	for _, r := range c.Routes {
		if r.Match == "" {
			fmt.Fprintf(tw, "\n# requests no route matches\n")
		} else {
			fmt.Fprintf(tw, "\n# route %q", r.Match)
			if r.Name != "" {
				fmt.Fprintf(tw, " (name %s)", r.Name)
			}
			fmt.Fprintf(tw, ", defined at %s\n", r.Source)
		}
		for _, name := range slices.Sorted(maps.Keys(r.Policy)) {
			o := r.Policy[name]
			value, _ := json.Marshal(o.Value)
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, strings.Trim(string(value), `"`), o.origin)
		}
	}
	for _, warning := range c.Warnings {
		fmt.Fprintf(tw, "\nwarning: %s\n", warning)
	}
	return tw.Flush()
}
