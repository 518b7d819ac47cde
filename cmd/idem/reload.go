package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// watchReload logs every SIGHUP until the returned stop is called. The
// signal is a reload request (systemctl reload runs ExecReload=kill -HUP):
// without a handler Go's default for SIGHUP would end the process, cutting
// the requests in flight. Nothing is reloaded yet: the flags and IDEM_
// variables are read once, at start.
func watchReload(ctx context.Context, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				log.Info("idem: reload requested (SIGHUP); nothing to reload: flags and IDEM_ variables are read at start, restart to change them")
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
