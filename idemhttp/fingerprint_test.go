package idemhttp_test

import (
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestFingerprintStable pins fingerprints: they are kept in shared stores,
// so a new version that digests the same request differently would answer
// a retry sent across its deployment with 422 instead of the replay.
func TestFingerprintStable(t *testing.T) {
	for _, c := range []struct{ method, target, contentType, body, want string }{
		{"POST", "/pay", "application/json", `{"amount":100,"currency":"EUR"}`, "59bf09cd6631bc8280b98ffd359155f84fde9ca21167f6aca58963eeb3056932"},
		{"POST", "/pay?x=1&y=%20", "Application/JSON; charset=UTF-8", "{\n \"z\": [ {\"b\":1, \"a\":[]} , {} ], \"a\" : \"s p\\\"\" }", "f5cc1a41f1647f7c6b0349e24ecd87dfd5d7b7c17014343cec4546508fb63de4"},
		{"PATCH", "/a%2Fb/c", "application/merge-patch+json", `{"a":1,"a":0,"b":{"d":null,"c":true}}`, "74860351be5ec83469a7de1060cab6982796de4b9bee505c8674fc5a5e0a0993"},
		{"POST", "/pay", "application/json", `{"a":`, "8ad8bca7ab4eef7cbbb7649e8b0883f8e03b8db14473a00d89aa7d0c27f52b02"},
		{"POST", "/pay", "text/plain", `{"b":1,"a":2}`, "6b1e2d7e3c78f967f3afe1e96d276998e71dfff64333f087377ec159be31b002"},
		{"POST", "/pay", "", ``, "3c44df382a055a4700cf1da90dc6f51265aebe42ad0cd24308ccc425a2f812e9"},
		{"PUT", "/x", "application/json", `[3, 2, {"y":1e5,"x":-0.5}]`, "ebe7d49d7ced68f538b2a2a0e56405e06d7b050c5a8635717ba2347a75ac2400"},
		// Form bodies are hashed decoded since issue 14 (earlier versions hashed their bytes).
		{"POST", "/v1/charges", "application/x-www-form-urlencoded", "amount=100&currency=usd&tags[]=b&tags[]=a", "131bd225190d0e76028c19857690c2166a3cca2a41482d8b337b2cd1831d5af5"},
		{"POST", "/v1/charges", "application/x-www-form-urlencoded", "tags%5B%5D=b&currency=usd&tags%5b%5d=a&amount=%3100", "131bd225190d0e76028c19857690c2166a3cca2a41482d8b337b2cd1831d5af5"},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		if c.contentType != "" {
			r.Header.Set("Content-Type", c.contentType)
		}
		if got := idemhttp.Fingerprint(r, []byte(c.body)); got != c.want {
			t.Errorf("%s %s %q %q: fingerprint %s, want %s", c.method, c.target, c.contentType, c.body, got, c.want)
		}
	}
}

// BenchmarkFingerprint digests a small JSON body that is already in
// canonical form and one whose members need sorting.
func BenchmarkFingerprint(b *testing.B) {
	r := httptest.NewRequest("POST", "/pay", nil)
	r.Header.Set("Content-Type", "application/json")
	for name, body := range map[string]string{
		"canonical": `{"amount":100,"currency":"EUR"}`,
		"unsorted":  `{"currency":"EUR", "amount":100, "meta":{"z":1,"a":[1,2,{"y":2,"x":1}]}}`,
	} {
		b.Run(name, func(b *testing.B) {
			body := []byte(body)
			b.ReportAllocs()
			for b.Loop() {
				idemhttp.Fingerprint(r, body)
			}
		})
	}
}
