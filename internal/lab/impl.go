package lab

// Names of the implementations, as the table prints them.
const (
	implNaive       = "naive"
	implNaiveDel    = "naive-del"
	implIdemMemory  = "idem-memory"
	implIdemRedis   = "idem-redis"
	implIdemRedisPG = "idem-redis+pg"
	implProviderKey = "idem-redis+provider-key"
	implPGKey       = "idem-redis+pg+provider-key"
	implReconcile   = "idem-redis+reconcile"
)

// storeKind is where an implementation's workers keep the keys.
type storeKind uint8

const (
	naiveLock   storeKind = iota + 1 // no idem: SET lock NX EX, then a blind SET of the response
	memoryStore                      // idem on store/memstore, one store shared in-process
	redisStore                       // idem on store/redisstore, a client per worker
)

// impl is one implementation a scenario runs against: where the workers
// keep the keys, and which of the defences beyond the store they have.
type impl struct {
	name        string // the table's row
	store       storeKind
	blindDel    bool // naiveLock only: DEL the lock at the end without checking that it is still ours
	guardrail   bool // the worker writes the key's row in PostgreSQL before the charge (store/pgstore's reservations)
	providerKey bool // the provider deduplicates by the idempotency key
	reconcile   bool // idem asks the provider about keys whose outcome is unknown (Options.Reconcile, a lookup by key)
}

// String returns the name of the implementation.
func (im impl) String() string { return im.name }

var (
	naive                  = impl{name: implNaive, store: naiveLock}
	naiveDel               = impl{name: implNaiveDel, store: naiveLock, blindDel: true}
	idemMemory             = impl{name: implIdemMemory, store: memoryStore}
	idemRedis              = impl{name: implIdemRedis, store: redisStore}
	idemRedisPG            = impl{name: implIdemRedisPG, store: redisStore, guardrail: true}
	idemRedisProviderKey   = impl{name: implProviderKey, store: redisStore, providerKey: true}
	idemRedisPGProviderKey = impl{name: implPGKey, store: redisStore, guardrail: true, providerKey: true}
	idemRedisReconcile     = impl{name: implReconcile, store: redisStore, reconcile: true}
)

// implByName returns the implementation named name (a worker process is
// told its implementation by name).
func implByName(name string) (impl, bool) {
	for _, im := range []impl{naive, naiveDel, idemMemory, idemRedis, idemRedisPG, idemRedisProviderKey, idemRedisPGProviderKey, idemRedisReconcile} {
		if im.name == name {
			return im, true
		}
	}
	return impl{}, false
}
