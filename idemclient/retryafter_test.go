package idemclient

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},     // past date: no wait
		{"Sunday, 01-Mar-26 12:00:30 GMT", 30 * time.Second, true}, // RFC 850 date
		{"99999999999999999999", time.Duration(1<<63 - 1), true},   // overflow saturates; the caller caps it
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sun, 01 Mar 2026 12:00:00 GMT", "-1", "", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseRetryAfter(s, now)
		if d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, a negative wait", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v with ok = false", s, d)
		}
	})
}
