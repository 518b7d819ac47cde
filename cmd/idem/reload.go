package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
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
// logged (gateway.Reload). Without --config, --admin-tokens-file and TLS
// files there is nothing to reload: flags and variables do not change in
// a running process.
func reloadServe(g *gateway.Gateway, args []string, started *serveSetup, level *slog.LevelVar, log *slog.Logger) {
	switch {
	case started.settings.file == nil && started.cfg.AdminTokensFile == "" && started.cfg.TLSCert == "" && started.cfg.AdminTLSCert == "":
		log.Info("idem: nothing to reload: no --config, no --admin-tokens-file and no TLS files; flags and IDEM_ variables are read at start, restart to change them")
		return
	case g == nil:
		log.Warn("idem: reload ignored: the gateway is still starting")
		return
	}
	var next *serveSetup
	err := g.Reload(func() (gateway.Config, error) {
		s, err := loadServe(args)
		if err != nil {
			return gateway.Config{}, err
		}
		var changed []string
		for _, name := range restartOnly {
			if s.fixed[name] != started.fixed[name] {
				changed = append(changed, name) // the name only: the value may be a secret
			}
		}
		if len(changed) > 0 {
			return gateway.Config{}, fmt.Errorf("%s changed, which a reload cannot apply: restart idem to change it (or put the old value back)",
				strings.Join(changed, ", "))
		}
		if err := s.validate(); err != nil {
			return gateway.Config{}, err // as at start: a route's error names its file and line
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
