package testenv

import (
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// Stores returns, by name, a constructor of each store that engine-level
// tests run on: the in-memory store, and a Redis store on the test server
// whose keys are under a prefix of the test.
func Stores() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store {
			s, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) store.Store {
			s, err := redisstore.New(Redis(t), &redisstore.Options{Prefix: Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}
