package browsertest

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/gateway"
)

// Issue 36, item 5: the console's Configuration view shows GET
// /v1/config: every setting with its value, where it came from and
// whether a reload changes it, each route's policy, and the warnings; a
// value that holds markup is shown as text.
func TestConsoleShowsTheEffectiveConfiguration(t *testing.T) {
	const file = "/etc/idem/idem.yaml"
	hostile := `http://api:3000/<img src=x onerror="window.pwned=1">`
	doc, _ := json.Marshal(map[string]any{
		"version": "(devel)", "config": file,
		"settings": map[string]any{
			"lease":       map[string]any{"value": "45s", "source": "env", "origin": "IDEM_LEASE", "overrides": file + ":7", "reload": true},
			"admin-token": map[string]any{"value": "xxxxx", "source": "env", "origin": "IDEM_ADMIN_TOKEN", "reload": false},
			"upstream":    map[string]any{"value": hostile, "source": "file", "origin": file + ":3", "reload": true},
		},
		"routes": []any{
			map[string]any{"match": "POST /v1/charges", "name": "charges", "source": file + ":12", "policy": map[string]any{
				"require-key": map[string]any{"value": true, "source": "file", "origin": file + ":13"},
				"lease":       map[string]any{"value": "45s", "source": "inherited", "origin": "lease (env IDEM_LEASE)"},
			}},
			map[string]any{"match": "", "policy": map[string]any{
				"methods": map[string]any{"value": []string{"POST", "PATCH"}, "source": "default"},
			}},
		},
		"warnings": []string{"idem: IDEM_LEASE in the environment overrides lease at " + file + ":7: the file's value is not used; set it in one place"},
	})
	h := newHarness(t, func(c *gateway.Config) { c.EffectiveConfig = doc })
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	run(t, ctx, "opening the configuration", chromedp.Click(chromedp.CSS(`#nav a[data-view="config"]`)),
		chromedp.WaitVisible(chromedp.CSS("#config-settings")))
	screenshot(t, ctx, "config")
	rows := eval[map[string][]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('#config-settings tbody tr')].map((r) =>
		[r.dataset.setting, [...r.cells].map((c) => c.textContent)]))`)
	for name, want := range map[string][]string{
		"lease":       {"lease", "45s", "env IDEM_LEASE (over file " + file + ":7)", "yes"},
		"admin-token": {"admin-token", "xxxxx", "env IDEM_ADMIN_TOKEN", "restart"},
		"upstream":    {"upstream", hostile, "file " + file + ":3", "yes"},
	} {
		if got := rows[name]; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
			t.Errorf("the row of %s shows %q; want %q", name, got, want)
		}
	}
	if len(rows) != 3 {
		t.Errorf("%d setting rows; want 3: %v", len(rows), rows)
	}
	if eval[bool](t, ctx, `window.pwned === 1 || document.querySelector('main img') !== null`) {
		t.Fatal("a value's markup became an element")
	}
	route := eval[[]string](t, ctx, `[...document.querySelectorAll('.config-route[data-match="POST /v1/charges"] tbody tr[data-option="require-key"] td')].map((c) => c.textContent)`)
	if len(route) != 3 || route[1] != "true" || route[2] != "file "+file+":13" {
		t.Errorf("the charges route's require-key shows %q; want true from the file's line 13", route)
	}
	if got := eval[string](t, ctx, `document.querySelector('.config-route[data-match=""] h2').textContent`); got != "Requests no route matches" {
		t.Errorf("the top level's section is titled %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector('.config-warning')?.textContent || ''`); got == "" {
		t.Error("the warning is not shown")
	}
}
