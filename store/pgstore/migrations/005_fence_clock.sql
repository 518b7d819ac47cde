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
-- to move it. The sequence is moved LEAD_US (100ms) past the clock, so
-- that moving it (which waits for the acquisitions in flight and holds the
-- next ones back for one statement) happens at most ten times a second;
-- in between, taking a value only shares the lock. A fence is therefore at
-- least the clock and at most about 100ms above it.
--
-- A database upgraded from an older release moves its sequence on the
-- first acquisition. During a rolling upgrade, processes of the older
-- release still call nextval without the lock; a move then stays safe
-- unless they take more than 100,000 values between two statements of
-- one call.
CREATE OR REPLACE FUNCTION next_fence(seq regclass, at timestamptz) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lead_us CONSTANT bigint := 100000;
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
