-- 005_fence_clock: fences floored by the clock (issue 22, item 18).
--
-- The memory and Redis stores mint a fence of at least the clock in
-- microseconds; this store's came from fence_seq alone (73 in a fresh
-- database), so a team that moved from Redis to PostgreSQL had every
-- fenced write refused as stale by the rows its Redis fences had written.
-- next_fence(seq, at) returns a value of seq above at in microseconds:
-- fences of every store are then comparable, and still strictly increase.
--
-- The sequence itself is moved up to the clock, never the fence alone, so
-- a clock that steps back cannot bring a fence below one already given out
-- (the sequence remembers the highest), and the fence stays a value that
-- nextval returned once. Moving a sequence with setval is safe only while
-- nobody takes a value: every caller holds an advisory lock on the
-- sequence until its transaction ends, shared to take a value, exclusive
-- to move it. The sequence is moved lead_us (one second) past the clock,
-- so that moving it, which waits for the acquisitions in flight to commit
-- and holds the next ones back meanwhile, happens at most once a second;
-- in between, taking a value only shares the lock. (Inserts of 4 clients
-- minting with next_fence, run beside 4 minting with nextval alone on a
-- loaded 2-core machine: 0.90-1.02 of their rate with a second's lead,
-- 0.82-0.87 with 100ms.)
-- A fence is therefore at least the clock and at most about a second
-- above it.
--
-- A database upgraded from an older release moves its sequence on the
-- first acquisition. During a rolling upgrade, processes of the older
-- release still call nextval without the lock; a move then stays safe
-- unless they take more than a million values between two statements of
-- one call.
CREATE OR REPLACE FUNCTION next_fence(seq regclass, at timestamptz) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lead_us CONSTANT bigint := 1000000;
    floor_us bigint := (extract(epoch FROM at) * 1000000)::bigint;
    -- One lock per sequence: its oid under a constant tag.
    lock_key bigint := (hashtext('idem.pgstore.next_fence')::bigint << 32) | seq::oid::bigint;
    last bigint;
BEGIN
    -- NULL: the sequence never gave a value.
    IF coalesce(pg_sequence_last_value(seq), 0) >= floor_us THEN
        PERFORM pg_advisory_xact_lock_shared(lock_key);
        -- Above the last value read, which was at least the floor: a
        -- sequence only goes up while this lock is shared.
        RETURN nextval(seq);
    END IF;
    PERFORM pg_advisory_xact_lock(lock_key);
    -- Nobody takes a value now: the last value is exact.
    last := coalesce(pg_sequence_last_value(seq), 0);
    IF last < floor_us THEN
        PERFORM setval(seq, floor_us + lead_us);
    END IF;
    RETURN nextval(seq);
END
$$;
