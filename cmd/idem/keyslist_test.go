package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// The tenants "", "-" and "--" each hold an UNKNOWN key "k". What idem
// keys list prints names each key's tenant so that get and resolve, given
// it back, act on that very key, never on another tenant's: the tenant
// "-" is the TENANT "--", which the flag package read as the end of the
// flags, and "-" the empty tenant.
func TestKeysListNamesTenantsOfDashes(t *testing.T) {
	ctx := context.Background()
	st, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	admin := httptest.NewUnstartedServer(nil)
	g, err := gateway.New(gateway.Config{Upstream: up, Store: st, Logger: slog.New(slog.DiscardHandler), Admin: admin.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	admin.Config.Handler = g.AdminHandler()
	admin.Start()
	defer admin.Close()
	tenants := []string{"", "-", "--"}
	for _, tenant := range tenants {
		id := store.ID{Tenant: tenant, Key: "k"}
		res, err := st.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", LeaseDuration: time.Minute, Retention: time.Hour})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire %q: %v", tenant, err)
		}
		ref := store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
		if err := st.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "test", Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runKeys(ctx, append([]string{"--admin", admin.URL}, args...), &out, io.Discard)
		return out.String(), err
	}
	out, err := keys("list", "--unknown")
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		TenantArg string `json:"tenant_arg"`
		Tenant    string `json:"tenant"`
		Fence     int64  `json:"fence"`
	}
	var listed []line
	for s := range strings.Lines(out) {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("list line %q: %v", s, err)
		}
		listed = append(listed, l)
	}
	if len(listed) != len(tenants) {
		t.Fatalf("list printed %d keys; want %d:\n%s", len(listed), len(tenants), out)
	}
	for _, l := range listed {
		out, err := keys("get", l.TenantArg, "k")
		var got line
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || got != l {
			t.Errorf("get %q k = %s, %v; want the listed key of tenant %q (fence %d, TENANT %q)", l.TenantArg, out, err, l.Tenant, l.Fence, l.TenantArg)
			continue
		}
		if out, err := keys("list", "--unknown", "--tenant", l.TenantArg); err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, fmt.Sprintf(`"fence":%d`, l.Fence)) {
			t.Errorf("list --tenant %q = %s, %v; want the one key of tenant %q", l.TenantArg, out, err, l.Tenant)
		}
		if _, err := keys("resolve", "--fence", fmt.Sprint(l.Fence), "--not-executed", l.TenantArg, "k"); err != nil {
			t.Errorf("resolve %q k with the listed fence: %v", l.TenantArg, err)
		}
	}
	if _, err := keys("get", "", "k"); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `the empty tenant is "-"`) {
		t.Errorf("get with an empty TENANT = %v; want a usage error naming %q", err, "-")
	}
}
