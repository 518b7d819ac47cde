package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

// TestMain stops the shared browser after the tests, before goleak
// looks for goroutines left running.
func TestMain(m *testing.M) {
	code := m.Run()
	if browser.stop != nil {
		browser.stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// screenshotDir is where IDEM_SCREENSHOTS=1 writes the console's
// screenshots, for docs/admin.md.
var screenshotDir = filepath.Join("..", "..", "..", "docs", "console")

// chromium returns the path of a Chromium, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// cannot skips the test when Chromium cannot run here, except on CI
// (CI set), where scripts/services.sh has installed it: there it fails.
func cannot(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (scripts/services.sh installs Debian's chromium: apt-get install chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// browser is the headless Chromium the tests share, started by the first
// that needs one (a start takes seconds); each test has a tab of its own,
// and so its own sessionStorage.
var browser struct {
	once sync.Once
	ctx  context.Context // the first tab's: the browser lives as long as it
	stop func()          // closes the browser and removes its profile
	err  error
}

// startBrowser starts Chromium with a fresh profile and none of its
// background connections (this network refuses them).
func startBrowser() {
	path := chromium()
	if path == "" {
		browser.err = errors.New("no Chromium on PATH")
		return
	}
	dir, err := os.MkdirTemp("", "idem-console-chromium")
	if err != nil {
		browser.err = err
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(dir), chromedp.WindowSize(1000, 700))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	browser.ctx, browser.stop = ctx, func() {
		cancelBrowser() // closes the browser and waits for it
		cancelAlloc()
		os.RemoveAll(dir)
	}
	// The first Do starts the browser, which lives as long as ctx: no
	// timeout on this one.
	if err := chromedp.Do(ctx); err != nil {
		browser.err = fmt.Errorf("Chromium (%s) did not start: %w", path, err)
	}
}

// newTab opens a tab of the shared browser, on a 1000x700 viewport; the
// test's end closes it. The context it returns ends after 60 s: every
// wait of the test is bounded by it.
func newTab(t *testing.T) context.Context {
	browser.once.Do(startBrowser)
	if browser.err != nil {
		cannot(t, "%v", browser.err)
	}
	ctx, closeTab := chromedp.NewContext(browser.ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1000, 700)); err != nil {
		closeTab()
		t.Fatalf("a new tab: %v", err)
	}
	timed, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancel()
		closeTab()
	})
	return timed
}

// run runs browser actions and fails the test on the first error.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// painted waits until the page has drawn two frames. Chromium routes a
// click by the last frame it drew: one sent just after a modal dialog
// closed, on a busy machine, still hits the dialog's backdrop and is lost.
var painted = chromedp.Evaluate[chromedp.Void](`new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))`, chromedp.EvalAwaitPromise)

// eval evaluates a JavaScript expression and returns its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// until waits until a JavaScript expression is true.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}

// js writes a Go value as a JavaScript literal.
func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// screenshot saves the viewport as docs/console/NAME.png when
// IDEM_SCREENSHOTS=1; a normal run leaves the committed files alone.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("IDEM_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signIn opens the console and pastes the admin token.
func signIn(t *testing.T, ctx context.Context, admin string) {
	t.Helper()
	run(t, ctx, "signing in",
		chromedp.Navigate(admin+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS("#login-form button")),
		chromedp.WaitVisible(chromedp.CSS("#nav")))
}

// openFromQueue clicks, in the queue, the link of a key.
func openFromQueue(t *testing.T, ctx context.Context, tenant, key string) {
	t.Helper()
	clicked := eval[bool](t, ctx, fmt.Sprintf(`(() => {
		const row = [...document.querySelectorAll('#queue-table tbody tr')].find((r) => r.dataset.tenant === %s && r.dataset.key === %s);
		if (!row) return false;
		row.querySelector('a.key-link').click();
		return true;
	})()`, js(tenant), js(key)))
	if !clicked {
		t.Fatalf("no row for %s/%s in the queue", tenant, key)
	}
	until(t, ctx, "the key's page", fmt.Sprintf(`document.getElementById('record-key')?.textContent === %s`, js(key)))
}

// confirm waits for the confirmation dialog, optionally screenshots it,
// and presses its action button; then it waits for the result box on the
// key's page drawn whole (the box shows above "Loading…" first).
func confirm(t *testing.T, ctx context.Context, shot string) string {
	t.Helper()
	run(t, ctx, "the confirmation", chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	if shot != "" {
		screenshot(t, ctx, shot)
	}
	run(t, ctx, "confirming", chromedp.Click(chromedp.CSS("#confirm-ok")), chromedp.WaitNotPresent(chromedp.CSS("#confirm[open]")),
		chromedp.WaitVisible(chromedp.CSS("#result")), chromedp.WaitNotPresent(chromedp.CSS("#loading")))
	return eval[string](t, ctx, `document.getElementById('result').className + ': ' + document.getElementById('result').textContent`)
}
