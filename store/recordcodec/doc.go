// Package recordcodec holds what an store.Store implementation needs to
// keep a record as bytes and that users of the engine never call: the
// encoding of a Result's header.
//
// AppendHeader writes an http.Header as a compact, deterministic byte
// string (names sorted, lengths as uvarints) and ParseHeader reads it back,
// returning an error, never panicking, on bytes that do not decode. The
// stores of this module use it for the header column of store/pgstore, the
// record string of store/redisstore and the mirror hash of store/layered,
// so the format is part of their stored data: it does not change between
// releases without a migration.
package recordcodec
