package pgstore

import (
	"embed"
	"strings"
)

// queryFiles holds the store's statements, one a file. Each file opens
// with a comment (its name, the method that runs it, what its parameters
// are, and why it is written so), which is not sent; S. stands for the
// store's schema, and {record_columns}, {lease_ended}, {unknown_now},
// {live} and {unsettled_end} for the fragments below.
//
//go:embed queries/*.sql
var queryFiles embed.FS

// recordColumns are read by scanRecord, in this order. The lease ends at
// lease_until, or at expires_at in a row an older version wrote
// (migrations/004_unknown.sql). A P or U row never ends by time (see
// live): its life left is read as 0.
const recordColumns = `state::text, owner, fence, fingerprint, acquired_at, completed_at, status, header, body, reason,
	coalesce(lease_until, expires_at),
	(extract(epoch FROM coalesce(lease_until, expires_at) - clock_timestamp()) * 1000000)::bigint,
	CASE WHEN state IN ('P', 'U') THEN 0 ELSE (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint END,
	taken_fence, taken_acquired_at,
	coalesce((extract(epoch FROM key_until - clock_timestamp()) * 1000000)::bigint, 0), coalesce(label, ''),
	coalesce(retention_us, 0), coalesce(key_retention_us, 0)`

// leaseEnded is true for a row whose lease has ended (by the database's clock).
const leaseEnded = `coalesce(lease_until, expires_at) <= clock_timestamp()`

// live is true for a row that holds its key (a tombstone aside: key_until).
// A P or U row is live whatever its expires_at: its work may have run, and
// only settling it ends it. This version writes unsettledEnd there, but a
// P row an older version wrote during a rolling upgrade carries the finite
// end that version gave it (acquisition, lease and retention), and is no
// less unsettled once that end passes. A C row lives until expires_at.
const live = `(state IN ('P', 'U') OR expires_at > clock_timestamp())`

// unknownNow matches a row that is UNKNOWN, or PROCESSING with its lease
// ended (abandoned: Get reports it UNKNOWN); both are live (see live).
const unknownNow = `(state = 'U' OR (state = 'P' AND ` + leaseEnded + `))`

// unsettledEnd is the expires_at this version writes in every P and U row.
// It is finite, not infinity, for the older versions that may still serve
// during a rolling upgrade: they compute expires_at - clock_timestamp() in
// every read (PostgreSQL refuses to subtract from infinity, failing every
// read of the key) and treat a row as live while expires_at is ahead. Their
// Go code turns that difference, in microseconds, into a time.Duration
// (nanoseconds, at most about 292 years), so the end is 2200 rather than
// 9999 (whose 2.5e17 microseconds fit a bigint but overflow a Duration):
// an older version reads an unsettled row's TTL as the ~170 years left.
// migrations/009_unsettled.sql writes the same value.
const unsettledEnd = `timestamptz '2200-01-01 00:00:00+00'`

// fragments splices the fragments into a statement.
var fragments = strings.NewReplacer("{record_columns}", recordColumns, "{lease_ended}", leaseEnded, "{unknown_now}", unknownNow,
	"{live}", live, "{unsettled_end}", unsettledEnd)

// queries holds the SQL of the store, with the schema spliced in.
type queries struct {
	acquire, abandon, complete, completedByUs, extend, release, markUnknown string
	claim, resolveCompleted, resolveDeleted, listTenant, listAll            string
	get, del, reap                                                          string
	reserve, settle, reservation                                            string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer("S.", schema+".")
	q := func(name string) string { return r.Replace(statement(name)) }
	return queries{
		acquire:          q("acquire"),
		abandon:          q("abandon"),
		complete:         q("complete"),
		completedByUs:    q("completed_by_us"),
		extend:           q("extend"),
		release:          q("release"),
		markUnknown:      q("mark_unknown"),
		claim:            q("claim"),
		resolveCompleted: q("resolve_completed"),
		resolveDeleted:   q("resolve_deleted"),
		listTenant:       q("list_tenant"),
		listAll:          q("list_all"),
		get:              q("get"),
		del:              q("delete"),
		reap:             q("reap"),
		reserve:          q("reserve"),
		settle:           q("settle"),
		reservation:      q("reservation"),
	}
}

// statement is queries/name.sql without its opening comment and final
// newline, with the fragments spliced in. The files are embedded, so a
// missing one is a mistake in this package that every test of it finds.
func statement(name string) string {
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic("pgstore: " + err.Error())
	}
	sql := string(b)
	for strings.HasPrefix(sql, "--") {
		_, sql, _ = strings.Cut(sql, "\n")
	}
	return fragments.Replace(strings.TrimSuffix(sql, "\n"))
}
