package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// ErrStoreURI is wrapped by every error about a --store value.
var ErrStoreURI = errors.New("gateway: bad store URI")

// StoreURIHelp lists the accepted --store forms.
const StoreURIHelp = `memory (the embedded default), redis://[user:pass@]host:port/db, rediss://..., ` +
	`redis-sentinel://[pass@]host:port,host:port/master[/db], redis-cluster://host:port,host:port, ` +
	`postgres://user@host:port/db, or layered: REDIS_URI+postgres://...`

// OpenStore opens the store a --store URI names. The returned close
// function releases its connections.
func OpenStore(ctx context.Context, uri string) (idem.Store, func() error, error) {
	if redisURI, pgURI, ok := strings.Cut(uri, "+postgres"); ok && isRedisURI(redisURI) {
		return openLayered(ctx, redisURI, "postgres"+pgURI)
	}
	switch {
	case uri == "" || uri == "memory":
		s, err := memstore.New(nil)
		return s, func() error { return nil }, err
	case isRedisURI(uri):
		client, err := redisstore.ParseURL(uri)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrStoreURI, err)
		}
		s, err := redisstore.New(client, nil)
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		return s, client.Close, nil
	case strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://"):
		s, closeStore, err := openPostgres(ctx, uri)
		if err != nil {
			return nil, nil, err
		}
		return s, closeStore, nil
	}
	return nil, nil, fmt.Errorf("%w %q: want %s", ErrStoreURI, redact(uri), StoreURIHelp)
}

func isRedisURI(uri string) bool {
	for _, scheme := range []string{"redis://", "rediss://", "redis-sentinel://", "redis-cluster://"} {
		if strings.HasPrefix(uri, scheme) {
			return true
		}
	}
	return false
}

// redact hides a password in a URI that is echoed in an error.
func redact(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return uri
	}
	if creds, host, ok := strings.Cut(rest, "@"); ok {
		if user, _, ok := strings.Cut(creds, ":"); ok {
			return scheme + "://" + user + ":***@" + host
		}
	}
	return uri
}

var _ redis.UniversalClient = (*redis.Client)(nil)
