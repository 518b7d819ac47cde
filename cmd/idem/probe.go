package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/probe"
	"github.com/idemkit/idem/internal/redact"
)

// errViolations makes idem probe exit 1 when a check failed, so it can run in CI.
var errViolations = errors.New("the target violates the Idempotency-Key protocol (see FAIL lines above)")

func runProbe(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	method := fs.String("method", "POST", "method of the sample request")
	body := fs.String("body", `{"amount":100,"currency":"eur"}`, "body of the sample request")
	contentType := fs.String("content-type", "application/json", "Content-Type of the sample request")
	var headers headerList
	fs.Var(&headers, "header", "a header sent with every request, as 'Name: value' (repeatable)")
	cred1 := fs.String("credential", "", "a credential (Authorization header value) of one client, for the tenant isolation check")
	cred2 := fs.String("credential2", "", "a credential of a second client")
	credHeader := fs.String("credential-header", "Authorization", "the header that carries the credentials")
	burst := fs.Int("burst", 8, "concurrent same-key requests in the burst check (at most 64)")
	timeout := fs.Duration("timeout", 60*time.Second, "bound on the whole run")
	remote := fs.Bool("i-own-this-target", false, "allow a target that is not on loopback: the probe executes the sample request several times")
	// The consent to run requests against a remote target is given for
	// one run, on its command line, not by a variable left in the shell.
	if err := parseFlags(fs, args, "i-own-this-target"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: idem probe [flags] URL", errUsage)
	}
	h := http.Header{"Content-Type": {*contentType}}
	for _, kv := range headers {
		h.Add(kv[0], kv[1])
	}
	report, err := probe.Run(ctx, probe.Config{
		URL: fs.Arg(0), Method: strings.ToUpper(*method), Body: []byte(*body), Header: h,
		Credentials: [2]string{*cred1, *cred2}, CredentialHeader: *credHeader,
		Burst: *burst, Timeout: *timeout, AllowRemote: *remote,
	})
	switch {
	case errors.Is(err, probe.ErrRemoteTarget):
		return fmt.Errorf("%w: %s is not on loopback; pass --i-own-this-target if you own it (the probe executes the sample request several times)", errUsage, redact.URL(fs.Arg(0)))
	case err != nil:
		return err
	}
	if err := report.WriteText(stdout); err != nil {
		return err
	}
	if report.Failed() {
		return errViolations
	}
	return nil
}
