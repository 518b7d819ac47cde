// Package browsertest drives the operator's console (internal/console) in
// headless Chromium with chromedp, against a gateway in front of an
// upstream that cuts connections: real UNKNOWN keys, listed, resolved and
// retried through the page. It is a module of its own so that chromedp
// stays out of idem's own dependencies; scripts/test.sh runs it, and
// scripts/services.sh installs Debian's chromium for it.
package browsertest
