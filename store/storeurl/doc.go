// Package storeurl opens a store.Store named by one string, as the idem
// gateway's --store flag does: for a command, an environment variable or
// a configuration file that names its store instead of building it in
// code. The forms Open accepts:
//
//	memory                                          the embedded store (store/memstore): one process, lost when it ends
//	redis://[user:password@]host[:port][/db][?options]
//	rediss://...                                    the same over TLS
//	unix://[user:password@]/path/to/socket[?db=N&options]
//	redis-sentinel://[user:password@]host[:port][,host[:port]...]/master[/db][?options]
//	rediss-sentinel://...                           the same, TLS to every node
//	redis-cluster://[user:password@]host[:port][,host[:port]...][?options]
//	rediss-cluster://...                            the same over TLS
//	postgres://user[:password]@host[:port]/db[?options]   (or postgresql://)
//	REDIS_URL+postgres://...                        layered: a Redis form in front of PostgreSQL
//
// A Redis form opens store/redisstore as redisstore.OpenURL does: the
// options are go-redis's (dial_timeout=3s, pool_size=64...; see
// redisstore.ParseURL), plus client=rueidis (a rueidis client instead of
// go-redis, which then refuses go-redis's pool options; the default when
// Options.Rueidis says so, as in idem serve), near_cache=on
// (replays served from process memory, on rueidis), near_cache_bytes=N
// and coalesce=on (the scripts that come
// while one is in flight go out as one batch; off unless the URL or
// Options.Coalesce says so, on by default in idem serve), allow_eviction=on
// (redisstore.Options.AllowEviction, unsafe: without it the store's first
// call fails, wrapping redisstore.ErrMayEvict, on a Redis whose
// maxmemory-policy may evict its records), and prefix=P,
// the prefix of every Redis key the store writes (redisstore.Options.Prefix;
// default "idem:"). Its go-redis client connects lazily: Open does not
// check that the server answers (rueidis dials at Open).
//
// A PostgreSQL form opens store/pgstore: Open connects and applies the
// migrations to the schema that schema=NAME names (pgstore.Options.Schema;
// default pgstore.DefaultSchema, "idem"; they are idempotent and serialised
// by an advisory lock, so several processes may start at once), or with
// Options.NoMigrate only checks that the schema has them all, within 30 s
// or ctx's deadline. Migrate applies them as a separate step, to the
// schema of the same URL. The other options are pgx's; a connection that
// the URL gives no connect_timeout is bounded to 5 s. The store reaps its
// expired rows every minute.
//
// The layered form (store/layered) keeps PostgreSQL as the authority and
// a mirror in Redis for replays; its Redis part takes the go-redis options
// and prefix=P (the mirror's keys; default "idem:mirror:"), not near_cache
// or coalesce; its PostgreSQL part takes schema=NAME.
//
// Close the store Open returns when done: it closes the connections Open
// made (and stops a PostgreSQL store's reaper), as every store's Close
// releases what that store opened.
//
// An error about the URL itself wraps ErrBadURL and never repeats a
// password; Check finds it without connecting.
package storeurl
