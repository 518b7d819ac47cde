package storeurl_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storeurl"
)

// A command takes its store as one string (a flag, an environment
// variable) and runs its work once per key on it. The URL here is
// "memory", so that the example runs anywhere; "redis://127.0.0.1:6379/0",
// "postgres://user@host/db" or "redis://host:6379/0+postgres://user@host/db"
// open the shared stores in the same line.
func ExampleOpen() {
	ctx := context.Background()
	st, err := storeurl.Open(ctx, "memory", nil)
	if err != nil {
		panic(err)
	}
	defer st.Close()
	engine, err := idem.New(st, nil)
	if err != nil {
		panic(err)
	}
	runs := 0
	send := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		runs++
		return fmt.Appendf(nil, "sent #%d", runs), nil
	}
	for range 2 {
		out, replayed, err := engine.Do(ctx, idem.Request{Tenant: "acme", Key: "welcome-mail-42", NoFingerprint: true}, send)
		fmt.Printf("%s replayed=%t err=%v\n", out, replayed, err)
	}
	// Output:
	// sent #1 replayed=false err=<nil>
	// sent #1 replayed=true err=<nil>
}

// A URL that Open cannot use is ErrBadURL, and the error never repeats
// its password.
func ExampleOpen_badURL() {
	_, err := storeurl.Open(context.Background(), "mongodb://app:s3cret@db.internal/idem", nil)
	fmt.Println(errors.Is(err, storeurl.ErrBadURL))
	fmt.Println(err)
	// Output:
	// true
	// storeurl: bad store URL: unknown scheme mongodb://; want memory, redis://, rediss://, unix://, redis-sentinel://, redis-cluster:// (and their rediss- variants), postgres:// or REDIS_URL+postgres://
}
