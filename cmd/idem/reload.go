package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/idemkit/idem/internal/gateway"
)

// watchReload calls reload on every SIGHUP until the returned stop is
// called. The signal is a reload request (systemctl reload runs
// ExecReload=kill -HUP): without a handler Go's default for SIGHUP would
// end the process, cutting the requests in flight. Reloads run one at a
// time, on this goroutine.
func watchReload(ctx context.Context, log *slog.Logger, reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				log.Info("idem: reload requested (SIGHUP)")
				reload()
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// restartOnly are the flags, and the config file's settings, that a
// reload cannot change: the listeners and their limits, the store (and
// whether it migrates), the drain, the
// engine's settings, the admin API, the logger's format and the traces,
// which the running process holds; the tenant's sources and the error
// format, which decide the scope of every key (a retry under another
// tenant would be a new key and run again: that change is a deliberate
// restart, not a routine reload); and max-response, which bounds what the
// engine stores.
var restartOnly = []string{"listen", "admin", "admin-token", "admin-insecure", "admin-tokens-file", "admin-hosts",
	"tls-cert", "tls-key", "admin-tls-cert", "admin-tls-key", "admin-client-ca", "store", "no-migrate", "store-timeout", "memory-limit",
	"memory-tenant-share", "read-timeout", "idle-timeout", "max-conns", "shutdown-timeout", "drain-delay", "takeover",
	"reconcile-timeout", "reconcile-every", "reconcile-rate", "reconcile-concurrency", "tenant-header", "tenant-from",
	"allow-anonymous", "error-format", "max-response", "log-format", "otlp-endpoint", "otlp-protocol"}

// reloadServe reads the flags, the IDEM_ variables and the config file
// again and hands the result to the running gateway, which swaps it in
// and reads its --admin-tokens-file and TLS files again; a bad file, or a
// change to a restartOnly setting, keeps the running configuration and is
// logged (gateway.Reload). A reload requested before the gateway is built
// (the store has not answered yet) is not lost: startReload keeps it for
// the build.
func reloadServe(g *gateway.Gateway, args []string, started *serveSetup, level *slog.LevelVar, log *slog.Logger) {
	var next *serveSetup
	err := g.Reload(func() (gateway.Config, error) {
		s, err := loadReload(args, started)
		if err != nil {
			return gateway.Config{}, err
		}
		next = s
		return s.cfg, nil
	})
	if err == nil {
		level.Set(next.logLevel)
		for _, w := range next.settings.warnings() {
			log.Warn(w)
		}
	}
}

// nothingToReload reports, and logs, that a process started with s has
// nothing a reload could read again: without --config, --admin-tokens-file
// and TLS files, flags and variables do not change in a running process.
func nothingToReload(s *serveSetup, log *slog.Logger) bool {
	if s.settings.file != nil || s.cfg.AdminTokensFile != "" || s.cfg.TLSCert != "" || s.cfg.AdminTLSCert != "" {
		return false
	}
	log.Info("idem: nothing to reload: no --config, no --admin-tokens-file and no TLS files; flags and IDEM_ variables are read at start, restart to change them")
	return true
}

// loadReload reads the flags, the IDEM_ variables and the config file
// again for a reload of a process started with started: refused when
// they change a restartOnly setting, or do not validate (as at start).
func loadReload(args []string, started *serveSetup) (*serveSetup, error) {
	s, err := loadServe(args)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, name := range restartOnly {
		if s.fixed[name] != started.fixed[name] {
			changed = append(changed, name) // the name only: the value may be a secret
		}
	}
	if len(changed) > 0 {
		return nil, fmt.Errorf("%s changed, which a reload cannot apply: restart idem to change it (or put the old value back)",
			strings.Join(changed, ", "))
	}
	if err := s.validate(); err != nil {
		return nil, err // as at start: a route's error names its file and line
	}
	return s, nil
}

// startReload carries the reloads requested while idem serve starts (the
// store has not answered, there is no gateway to reload) over to the
// gateway's build: a SIGHUP then was once dropped with a warning, and the
// gateway served the file as it was before the store wait, the metrics
// saying the last reload succeeded. mu orders a SIGHUP against the build:
// one that comes during the build waits for it, then reloads the gateway.
type startReload struct {
	args    []string
	started *serveSetup // the setup read at start: the restartOnly values every reload keeps
	level   *slog.LevelVar
	log     *slog.Logger

	mu        sync.Mutex
	g         *gateway.Gateway // guarded by mu; nil until built
	requested bool             // guarded by mu: a reload came before the build
	valid     *serveSetup      // guarded by mu: the newest setup such a reload read and found valid
}

// reload is the SIGHUP handler of idem serve. Before the gateway is
// built it reads the file at once, to log what is wrong with it while
// the operator is there, and keeps the request for the build, which
// reads the file again (settle).
func (r *startReload) reload() {
	if nothingToReload(r.started, r.log) {
		return
	}
	r.mu.Lock()
	if g := r.g; g != nil {
		r.mu.Unlock()
		reloadServe(g, r.args, r.started, r.level, r.log)
		return
	}
	defer r.mu.Unlock()
	r.requested = true
	s, err := loadReload(r.args, r.started)
	if err != nil {
		r.log.Warn("idem: reload requested while starting: the file does not load now; it is read again when the store answers, and the gateway starts with the last valid configuration",
			"err", err.Error())
		return
	}
	r.valid = s
	r.log.Info("idem: reload requested while starting: the file loads; it is read again when the store answers, and the gateway starts with it")
}

// build builds the gateway, under mu, from the newest valid setup: the
// one read at start, or, when a reload was requested meanwhile, the file
// read again now (the newest valid one a reload read when it does not
// load now, the failure counted and logged as a reload's). withRuntime
// adds what the setup does not hold (the store, the logger...).
func (r *startReload) build(withRuntime func(gateway.Config) gateway.Config) (*gateway.Gateway, *serveSetup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	use, reloadErr := r.started, error(nil)
	if r.requested {
		use, reloadErr = loadReload(r.args, r.started)
		if reloadErr != nil {
			use = cmp.Or(r.valid, r.started)
		}
	}
	g, err := gateway.New(withRuntime(use.cfg))
	if err != nil {
		return nil, use, err
	}
	if r.requested {
		g.CountReload(reloadErr)
		if reloadErr != nil {
			r.log.Error("idem: reload failed; the gateway starts with the last valid configuration (requested while starting)", "err", reloadErr.Error())
		} else {
			r.log.Info("idem: configuration reloaded; the gateway starts with it (requested while starting)",
				"routes", len(use.cfg.Routes))
		}
	}
	if use != r.started {
		r.level.Set(use.logLevel)
		for _, w := range use.settings.warnings() {
			r.log.Warn(w)
		}
	}
	r.g = g
	return g, use, nil
}
