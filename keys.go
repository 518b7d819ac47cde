package idem

import "github.com/idemkit/idem/store"

// MaxKeyLength is the longest idempotency key, tenant or fingerprint
// accepted, in bytes (Stripe's limit for keys).
const MaxKeyLength = store.MaxKeyLength

// ValidateKey reports why key cannot be an idempotency key, or nil.
// A key is 1 to 255 bytes of UTF-8 without control characters.
func ValidateKey(key string) error { return store.ValidateKey(key) }

// ValidateTenant reports why tenant cannot scope keys, or nil. The empty
// tenant is allowed: it is the single scope of an API without clients.
func ValidateTenant(tenant string) error { return store.ValidateTenant(tenant) }

// ValidateFingerprint reports why fp cannot be stored as a fingerprint, or nil.
func ValidateFingerprint(fp string) error { return store.ValidateFingerprint(fp) }
