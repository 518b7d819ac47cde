package store

import (
	"fmt"
	"unicode/utf8"
)

// MaxKeyLength is the longest idempotency key, tenant or fingerprint
// accepted, in bytes (Stripe's limit for keys).
const MaxKeyLength = 255

// ValidateKey reports why key cannot be an idempotency key, or nil.
// A key is 1 to 255 bytes of UTF-8 without control characters.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	return checkText(ErrInvalidKey, key)
}

// ValidateTenant reports why tenant cannot scope keys, or nil. The empty
// tenant is allowed: it is the single scope of an API without clients.
func ValidateTenant(tenant string) error { return checkText(ErrInvalidTenant, tenant) }

// ValidateFingerprint reports why fp cannot be stored as a fingerprint, or nil.
func ValidateFingerprint(fp string) error { return checkText(ErrInvalidFingerprint, fp) }

func checkText(kind error, s string) error {
	if len(s) > MaxKeyLength {
		return fmt.Errorf("%w: %d bytes, the limit is %d", kind, len(s), MaxKeyLength)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Errorf("%w: not valid UTF-8 at byte %d", kind, i)
			}
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: control character %U at byte %d", kind, r, i)
		}
	}
	return nil
}
