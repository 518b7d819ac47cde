/*
 * idem.pml: the protocol of one idempotency key, checked by spin
 * (scripts/model.sh; make model). docs/state-machine.md maps every
 * transition below to the Lua script (store/redisstore) and the SQL
 * statement (store/pgstore) that implements it.
 *
 * Actors, all interleaved:
 *   - three workers (engines). Worker 1 takes over ended leases
 *     (TakeoverRun) and forwards the key to a provider that deduplicates
 *     by it; worker 2 turns them UNKNOWN (TakeoverUnknown) and reconciles;
 *     worker 3 turns them UNKNOWN and does not reconcile. Each sends
 *     ATTEMPTS requests (one more after a not-executed resolution),
 *     crashes (or stalls for good) before or after its effect, loses the
 *     reply of its effect (it then marks the key UNKNOWN) and of a
 *     Complete, Release or MarkUnknown (it asks again, same owner and
 *     fence, as the engine does); worker 1's acquire that took the key
 *     loses its reply too (it asks again as the same owner);
 *   - an operator, who resolves an UNKNOWN key by the provider's word
 *     (acting on what it read earlier) or force-deletes the key
 *     (MAXOPS actions, at most MAXDEL deletes);
 *   - the clock: any lease and any reconciliation claim ends at any time.
 * The provider (the ledger) is fenced by the key: it applies an effect
 * only with a fence above every fence it saw, and a lookup that finds no
 * effect of an attempt promises that attempt's fence never applies later.
 * Lookups compare fences: a charge at or below the fence of the last
 * operator delete belongs to the deleted record (docs/failure-model.md).
 *
 * Properties (assertions, checked in every reachable state):
 *   P1 the effect ran at most once per key, unless an operator delete came
 *      after the first effect's request began (what internal/check's
 *      checkEffects excuses): no release, expiry, resolution or takeover
 *      lets the work run twice;
 *   P2 every fence the store mints is above every fence minted before;
 *   P3 every result the store hands out (a replay, a resolution) is the
 *      same one (effect and bytes), and every result any client gets is
 *      the same effect, again unless a delete came between.
 *
 * MUT(name) marks the lines that scripts/model.sh's mutants change.
 */

#ifndef ATTEMPTS
#define ATTEMPTS 1    /* requests per worker (one more after a not-executed resolution) */
#endif
#ifndef MAXF
#define MAXF     3    /* fences the store mints at most (bounds the state space) */
#endif
#ifndef MAXDEL
#define MAXDEL   1    /* operator force-deletes at most */
#endif
#ifndef MAXOPS
#define MAXOPS   1    /* operator actions at most: one delete or one resolve */
#endif
#define NONE     255

/* record states */
#define ABSENT 0
#define PROC   1      /* PROCESSING(owner, fence); expired: its lease ended */
#define COMP   2      /* COMPLETED(result) */
#define UNK    3      /* UNKNOWN(reason, claim) */

#define R_OWNER     1 /* MarkUnknown by the owner */
#define R_ABANDONED 2 /* turned UNKNOWN because its lease ended */

/* where a stored result's bytes come from */
#define SRC_WORK    1 /* the work's own output (Complete) */
#define SRC_RESOLVE 2 /* a reconciler's or operator's account of the effect (Resolve) */

/* what an acquire answers */
#define O_ACQ    1
#define O_INFL   2
#define O_REPLAY 3
#define O_UNK    4
#define O_STOP   5    /* the fence bound is reached: the worker stops (a model bound, not a behaviour) */

/* ---- the store: one key ---- */
byte st = ABSENT;
byte owner;           /* owner token of the attempt */
byte fence;
byte prev;            /* the fence a takeover took over (Lease.Takeover), else 0 */
bool expired;         /* PROC: the lease ended */
byte reason;          /* UNK */
byte claim;           /* UNK: the claimer (a worker), 0 none */
bool claimlive;       /* the claim has not ended */
byte resid, ressrc;   /* COMP: the result: the effect (its fence) and the bytes' source */
byte lastfence;       /* the fence counter: kept when the record goes (tombstone; fence_seq) */

/* ---- the provider ---- */
bool eff[MAXF + 1];   /* eff[f]: the effect of fence f was applied */
byte maxseen;         /* the highest fence it saw (applied or promised) */

/* ---- ghosts, for the properties ---- */
byte epoch;                   /* operator deletes so far */
byte delfence;                /* lastfence when the last delete ran */
byte effBegan = NONE;         /* the delete epoch when the last effect's request began */
byte maxminted;               /* P2 */
byte gid = NONE, gidBegan;    /* P3: the effect clients got, and the latest epoch its requests began in */
byte sid = NONE, ssrc, sidBegan; /* P3: the result the store handed out */

/* ---- the transitions of the store (each one atomic step) ---- */

/* Acquire(tok, takeover): acquire.lua; pgstore acquire, abandon */
inline acquire() {
  if
  :: st == ABSENT || (st == PROC && expired && owner != tok && tk) ->
     if
     :: lastfence >= MAXF -> out = O_STOP
     :: else ->
        if
        :: st == PROC -> prev = fence      /* takeover: names the previous fence */
        :: else -> prev = 0
        fi;
        lastfence++;
        fence = lastfence;                 /* MUT(takeover-keeps-fence) */
        st = PROC; owner = tok; expired = false; claim = 0; reason = 0;
        assert(fence > maxminted);         /* P2 */
        maxminted = fence;
        out = O_ACQ
     fi
  :: st == PROC && owner == tok -> out = O_ACQ   /* our own record: an earlier try's reply was lost */
  :: st == PROC && owner != tok && !expired -> out = O_INFL
  :: st == PROC && owner != tok && expired && !tk ->
     st = UNK; reason = R_ABANDONED; claim = 0; out = O_UNK
  :: st == COMP -> out = O_REPLAY
  :: st == UNK -> out = O_UNK
  fi;
  f = fence; p = prev; v = resid; vs = ressrc
}

/* Complete(tok, f, v): complete.lua; pgstore complete, completedByUs */
inline complete() {
  if
  :: (st == PROC || st == UNK) && owner == tok && fence == f ->  /* MUT(complete-without-owner-check) */
     st = COMP; resid = v; ressrc = SRC_WORK; claim = 0; ok = true
  :: st == COMP && owner == tok && fence == f -> ok = true   /* a retried Complete: the first result stays */
  :: else -> ok = false
  fi
}

/* Release(tok, f): release.lua; pgstore release */
inline release() {
  if
  :: owner == tok && fence == f &&   /* MUT(release-without-owner-check) */
     (st == PROC || (st == UNK && reason == R_ABANDONED && !(claim != 0 && claimlive))) ->
     st = ABSENT; claim = 0; ok = true   /* MUT(release-drops-fence-counter) */
  :: else -> ok = false
  fi
}

/* MarkUnknown(tok, f): markunknown.lua; pgstore markUnknown */
inline markunknown() {
  if
  :: (st == PROC || st == UNK) && owner == tok && fence == f ->
     if
     :: st == PROC -> st = UNK; reason = R_OWNER; claim = 0
     :: else -> skip                /* the first reason stays */
     fi;
     ok = true
  :: else -> ok = false
  fi
}

/* Claim(who): claim.lua; pgstore claim */
inline claimit(who) {
  if
  :: (st == UNK || (st == PROC && expired)) && !(claim != 0 && claimlive) ->
     if
     :: st == PROC -> st = UNK; reason = R_ABANDONED
     :: else -> skip
     fi;
     claim = who; claimlive = true; cf = fence; ok = true
  :: else -> ok = false
  fi;
  v = resid; vs = ressrc; out = st
}

/* Resolve(cf, who, verdict): resolve.lua; pgstore resolveCompleted,
 * resolveDeleted. who 0: an operator, who needs no claim. */
inline resolve(who) {
  if
  :: (st == UNK || (st == PROC && expired)) &&   /* MUT(resolve-overwrites-completed) */
     fence == cf &&                               /* MUT(resolve-without-fence-check) */
     (who == 0 || (claim == who && claimlive)) ->
     if
     :: found -> st = COMP; resid = v; ressrc = SRC_RESOLVE
     :: else -> st = ABSENT
     fi;
     claim = 0; ok = true
  :: else -> ok = false
  fi
}

/* Delete without a fence (Engine.ForceDelete, the admin API): delete.lua; pgstore del */
inline forcedelete() {
  st = ABSENT; claim = 0;
  epoch++; delfence = lastfence
}

/* ---- the provider ---- */

#define LOOKUP_FLOOR delfence      /* MUT(lookup-by-key-alone) */

/* lookup(cf): the effect of the attempt of fence cf, or of one it took
 * over: the latest effect with a fence up to cf and above the last
 * delete's. None found: a promise that no fence up to cf applies later. */
inline lookup() {
  found = false; k = cf;
  do
  :: k > LOOKUP_FLOOR && eff[k] -> found = true; v = k; break
  :: k > LOOKUP_FLOOR && !eff[k] -> k--
  :: else -> break
  od;
  k = 0;
  if
  :: !found && maxseen < cf -> maxseen = cf
  :: else -> skip
  fi
}

/* the effect, fenced; with dedup (a takeover, TakeoverRun) the provider
 * answers an effect it already applied for the key (after the last
 * delete) instead of applying another. */
inline apply() {
  found = false;
  if
  :: p != 0 ->                      /* MUT(takeover-without-dedup) */
     k = f;
     do
     :: k > delfence && eff[k] -> found = true; v = k; break
     :: k > delfence && !eff[k] -> k--
     :: else -> break
     od;
     k = 0
  :: else -> skip
  fi;
  if
  :: found -> out = O_ACQ
  :: !found && f > maxseen ->
     maxseen = f; eff[f] = true; v = f; out = O_ACQ;
     assert(effBegan == NONE || epoch > effBegan);   /* P1 */
     effBegan = began
  :: else -> out = O_STOP          /* stale: a higher fence came first; nothing applied */
  fi
}

/* ---- P3 ---- */
inline give(id) {
  assert(gid == NONE || gid == id || epoch > gidBegan || epoch > began);
  if
  :: gid != id -> gid = id; gidBegan = began
  :: else -> if :: began > gidBegan -> gidBegan = began :: else -> skip fi
  fi
}
inline serve(id, src) {
  assert(sid == NONE || (sid == id && ssrc == src) || epoch > sidBegan || epoch > began);
  if
  :: sid != id || ssrc != src -> sid = id; ssrc = src; sidBegan = began
  :: else -> if :: began > sidBegan -> sidBegan = began :: else -> skip fi
  fi;
  give(id)
}

/* ---- the actors ---- */

proctype worker(byte me; bool tk; bool rec) {
  byte tok, f, p, v, vs, out, n, cf, k, began;
  bool ok, found, again;
next:
  /* forget the last request: dead values would only multiply the states */
  skip;
  d_step { f = 0; p = 0; v = 0; vs = 0; out = 0; cf = 0; ok = false; found = false; again = false };
  if
  :: n < ATTEMPTS -> n++
  :: else -> goto done
  fi;
  d_step { tok = (me - 1) * ATTEMPTS + n; began = epoch };  /* an owner token of its own per request */
acq:
  if
  :: skip
  :: atomic {                       /* a try that took the key, and whose reply was lost: */
       tk && (st == ABSENT || (st == PROC && expired)) -> acquire()
     }                                /* the engine asks once more as the same owner */
  fi;
  atomic {
    acquire();
    if
    :: out == O_REPLAY -> serve(v, vs)
    :: else -> skip
    fi
  };
  if
  :: out == O_ACQ -> goto work
  :: out == O_REPLAY -> goto next
  :: out == O_UNK && rec && !again -> goto reconcile
  :: else -> goto next                /* in flight, unknown, or the bound */
  fi;

work:
  /* the work, some time after the acquire: its effect, with what can go
   * wrong around it */
  atomic {
    if
    :: apply();
       if
       :: out == O_ACQ -> skip        /* applied, answered */
       :: out == O_ACQ -> out = O_UNK /* applied, and its reply lost */  /* MUT(release-instead-of-unknown) */
       :: out == O_ACQ -> out = O_INFL  /* a crash after the effect */
       :: else -> skip                /* stale: a higher fence came first, nothing applied */
       fi
    :: out = O_STOP                   /* refused before it applied (by the provider, or Lease.Check / a failed renewal) */
    :: out = O_INFL                   /* a crash, or a stall for good, before the effect */
    fi
  };
  if
  :: out == O_ACQ -> skip
  :: out == O_UNK -> goto unknown
  :: out == O_STOP -> goto notrun
  :: out == O_INFL -> goto next
  fi;
  if
  :: skip
  :: atomic { complete() }            /* a try whose reply was lost: asked again, same owner and fence */
  fi;
  atomic { complete(); if :: ok -> give(v) :: else -> skip fi };
  goto next;

notrun:                               /* nothing ran: release, unless it took over an attempt */
  if
  :: p != 0 -> goto unknown          /* MUT(release-after-failed-takeover) */
  :: else -> skip
  fi;
  atomic { release() };
  if
  :: skip
  :: atomic { release() }            /* the reply was lost, or the release was held and retried */
  fi;
  goto next;

unknown:
  atomic { markunknown() };
  if
  :: skip
  :: atomic { markunknown() }
  fi;
  goto next;

reconcile:                            /* Options.Reconcile, under a claim */
  atomic {
    claimit(me);
    if
    :: ok -> lookup()                 /* then asks the provider */
    :: !ok && out == COMP -> serve(v, vs)
    :: else -> skip                   /* another holds the claim: the engine answers Unknown */
    fi;
    if
    :: ok -> ok = false               /* Reconcile failed, or said unknown: the claim lapses */
    :: ok -> skip
    :: else -> skip
    fi
  };
  if
  :: ok -> skip
  :: else -> goto next
  fi;
  atomic {
    resolve(me);
    if
    :: ok && found -> serve(v, SRC_RESOLVE)
    :: else -> skip
    fi
  };
  if
  :: ok && found -> goto next
  :: ok && !found -> again = true; goto acq    /* not executed: run it, once */
  :: else -> skip
  fi;
  atomic {                            /* refused: the store has the truth */
    if
    :: st == COMP -> serve(resid, ressrc)
    :: else -> skip
    fi;
    if
    :: st == ABSENT -> again = true
    :: else -> skip
    fi
  };
  if
  :: again -> goto acq
  :: else -> goto next
  fi;
done:
  skip
}

proctype operator() {
  byte cf, v, k, n;
  bool ok, found;
  do
  :: n < MAXOPS ->
     d_step { n++; cf = 0; v = 0; ok = false; found = false };
     if
     :: epoch < MAXDEL -> atomic { forcedelete() }
     :: atomic {                      /* read the listing: an UNKNOWN key (or an ended lease, reported UNKNOWN) */
          if
          :: st == UNK || (st == PROC && expired) -> cf = fence; lookup(); ok = true  /* and ask the provider */
          :: else -> ok = false
          fi
        };
        if
        :: ok -> atomic { resolve(0) }  /* then resolve, acting on what it read */
        :: else -> skip
        fi
     fi
  :: break
  od
}

active proctype clock() {
end:
  do
  :: atomic { st == PROC && !expired -> expired = true }
  :: atomic { claim != 0 && claimlive -> claimlive = false }
  od
}

init {
  atomic {
    run worker(1, true, false);
    run worker(2, false, true);
    run worker(3, false, false);
    run operator()
  }
}
