/*
 * Counting semaphores (src/lease/semaphore.rs, docs/design.md section 19):
 * the limit in force under concurrent Acquires with different limits and
 * (re)definitions, checked exhaustively by spin. model/README.md explains
 * the abstraction, the bounds and the properties; scripts/model-check.sh
 * runs it.
 *
 * A semaphore with limit N is slot keys 1..N (each a lease record: one last
 * message, a holder at most) and the definition key (`{"limit":N}`, no
 * TTL). The model has slot keys 1 and 2 and limits 1 and 2. An Acquire
 * (Leases::try_acquire_slot) reads slots 1..N from the leader (concurrent
 * gets: any order), THEN the definition, then the slots of the limit in
 * force beyond N; then:
 *   - another limit in force and a live holder in a slot read: LIMIT_MISMATCH;
 *   - no free slot of 1..N: LEASE_HELD;
 *   - the definition says N: the record over a free slot's read revision,
 *     alone (one publish; any free slot);
 *   - no definition yet: one atomic batch, the definition (expected: no
 *     message) and the record over the lowest free slot;
 *   - another limit, nobody holding: one atomic batch, the definition over
 *     its read revision, a tombstone over every other free slot read
 *     (1..max(N, L)) at its read revision, and the record over the lowest
 *     free slot.
 * A lost race (any condition) reads again. Holders release (a conditional
 * tombstone) or stop acting at their deadline, after which NATS may expire
 * the record (MaxAge marker). Tombstones and markers age out (the slot is
 * empty again: expected 0), but not while an attempt that read the slot
 * before that message was written is still in flight (the timing
 * assumption: an attempt's reads are younger than the marker TTL when it
 * writes; AGE_ANY_TIME removes it).
 *
 * Every bucket access (one read of the leader, one publish, one batch) is
 * one step; steps of clients and NATS interleave in every order.
 *
 * Properties, checked after every write:
 *   S1 the live holdings never exceed the limit in force (the definition;
 *      no definition: no holding)
 *   S2 every live holding was taken under the limit in force (a holder that
 *      asked for N never shares the semaphore under another limit)
 *   S3 a client that acts on a holding holds the live record of its slot
 *
 * Mutations (negative controls: each must yield a counterexample):
 *   NO_TOMBSTONES      a redefinition does not tombstone the other free slots
 *   DEF_FIRST          the definition is read before the slots
 *   NO_DEF_WRITE       an Acquire with another limit and nobody holding
 *                      writes its slot alone, without (re)defining
 *   NO_SLOT_CONDITION  the lone slot write is unconditional
 * Assumption removed:
 *   AGE_ANY_TIME       tombstones and markers age out while an attempt that
 *                      read the slot before them is still in flight
 * Not a violation (run by hand, see model/README.md):
 *   NO_DEF_CONDITION   the definition write in a batch is unconditional
 *
 * With VIEW, a client may also take the head's path through the watcher's
 * view (src/lease/watch/slot_view.rs): in one step it takes the definition
 * and one free slot of 1..N as the stream holds them at that moment (the
 * view vouches for them only when both were applied at or before a moment
 * the watcher had read everything), only when the definition says N and
 * the slot has a message (revision above 0); then, any number of steps
 * later, the lone write over that revision. The view is not an attempt
 * whose reads are young: its reads hold back no ageing.
 * Mutations (VIEW runs):
 *   VIEW_ZERO          the view vouches for a slot with no message (revision 0)
 *   VIEW_TORN          the view's definition is from an earlier moment than
 *                      its slot (read first, any steps between)
 *
 * With SWEEP, a sweeper (src/lease/semaphore/sweep.rs) removes the
 * semaphore when it reads the definition and every slot of its limit free:
 * one atomic batch of a tombstone over each of those slots at its read
 * revision and a tombstone over the definition at its read revision. Reads
 * are one step each, in any order (the sweep scans the stream one message
 * at a time). The definition's tombstone ages out like the slots' (not
 * while an attempt that read the definition before it is in flight).
 * Mutation (SWEEP runs):
 *   SWEEP_DEF_ONLY     the removal tombstones the definition alone, without
 *                      a tombstone (and condition) over each free slot
 */

#ifndef NC
#define NC 3            /* clients A (limit 1), B (limit 2), C (either, per call) */
#endif
#ifndef CALLS
#define CALLS 2         /* Acquire calls per client */
#endif
#ifndef MAXSEQ
#define MAXSEQ 24       /* stream sequence bound: writes past it fail (24 cuts nothing) */
#endif
#ifndef SWEEPS
#define SWEEPS 2        /* sweeps (SWEEP runs) */
#endif
#define NS 2            /* slot keys 1..NS; limits 1..NS */
#define NK (NS + 1)     /* per-client arrays indexed by slot 1..NS */

/* a slot's last message */
#define K_NONE 0        /* no message: expected 0 */
#define K_HELD 1        /* a record */
#define K_END  2        /* a release or redefinition tombstone, an expiry marker */

/* what an attempt read of a slot */
#define R_UNREAD 0
#define R_FREE   1
#define R_HELD   2

/* client phases */
#define C_IDLE  0       /* between calls */
#define C_SLOTS 1       /* reading slots 1..N (any order) */
#define C_DEF   2       /* the definition read is next */
#define C_EXTRA 3       /* reading slots N+1..L of the limit L in force */
#define C_LONE  4       /* the lone slot write is next */
#define C_BATCH 5       /* the defining batch is next */
#define C_HOLD  6       /* acts on its holding */
#define C_VDEF  7       /* VIEW_TORN: the view's slot is next, after its definition */

byte seq;
byte df_rev, df_lim;                    /* the definition: revision (0: none), limit */
byte sk[NK], sr[NK], sh[NK], sl[NK];    /* each slot: kind, revision, holder (c + 1), the holder's limit (ghost) */

byte st[NC], lim[NC], calls[NC];
byte rk[NC * NK], rr[NC * NK];          /* an attempt's slot reads: kind, revision */
byte dr[NC], dl[NC];                    /* its definition read: revision, limit */
byte mys[NC], myr[NC];                  /* the holding a client acts on: slot, revision */
bool vw[NC];                            /* its attempt is on the view's word (VIEW) */
#ifdef PROBE
bool used[NK];                          /* ghost, probes only: the slot held a record once */
#endif
#ifdef SWEEP
byte wst, wsweeps;                      /* the sweeper: phase, sweeps left */
byte wdr, wdl;                          /* its definition read: revision, limit (0: none read yet or none) */
bool wdd;                               /* whether it read the definition */
byte wrk[NK], wrr[NK];                  /* its slot reads: kind, revision */
#endif
#define RK(c, s) rk[(c) * NK + (s)]
#define RR(c, s) rr[(c) * NK + (s)]

#define CH(c) ('A' + (c))
#define MAX2(a, b) ((a) > (b) -> (a) : (b))

#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif
#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

#define LIVE(s) (sk[s] == K_HELD)
#define NLIVE ((LIVE(1) -> 1 : 0) + (LIVE(2) -> 1 : 0))
#define UNDER(s) (!LIVE(s) || sl[s] == df_lim)
#define ACTS_OK(c) (st[c] != C_HOLD || (sk[mys[c]] == K_HELD && sr[mys[c]] == myr[c] && sh[mys[c]] == (c) + 1))

inline check_sem() {
  CHECK(NLIVE <= df_lim, "VIOLATED S1: more live holdings than the limit in force\n");
  CHECK(UNDER(1) && UNDER(2), "VIOLATED S2: a live holding taken under another limit than the one in force\n");
  CHECK(ACTS_OK(0) && ACTS_OK(1) && (NC < 3 || ACTS_OK(NC - 1)),
        "VIOLATED S3: a client acts on a holding that is not the live record of its slot\n")
}

/* the timing assumption: slot s's ending message ages out only when no
   attempt in flight read the slot before that message was written */
#define IN_FLIGHT(c) (st[c] >= C_SLOTS && st[c] <= C_BATCH && !vw[c])
#define OLDER_READ(c, s) (IN_FLIGHT(c) && RK(c, s) != R_UNREAD && RR(c, s) < sr[s])
#ifdef AGE_ANY_TIME
#define MAY_AGE(s) (1)
#else
#ifdef SWEEP
#define MAY_AGE(s) (!OLDER_READ(0, s) && !OLDER_READ(1, s) && (NC < 3 || !OLDER_READ(NC - 1, s)) && !SWEEP_OLDER(s))
#else
#define MAY_AGE(s) (!OLDER_READ(0, s) && !OLDER_READ(1, s) && (NC < 3 || !OLDER_READ(NC - 1, s)))
#endif
#endif

#ifdef SWEEP
/* the definition's tombstone ages out only when no attempt in flight read
   the definition before it was written */
#define DEF_READ(c) (st[c] >= C_EXTRA && st[c] <= C_BATCH && !vw[c])
#define OLDER_DEF_READ(c) (DEF_READ(c) && dr[c] < df_rev)
#define SWEEP_OLDER(s) (wst != 0 && wrk[s] != R_UNREAD && wrr[s] < sr[s])
#ifdef AGE_ANY_TIME
#define MAY_AGE_DEF (1)
#else
#define MAY_AGE_DEF (!OLDER_DEF_READ(0) && !OLDER_DEF_READ(1) && (NC < 3 || !OLDER_DEF_READ(NC - 1)) && !(wst != 0 && wdd && wdr < df_rev))
#endif
#endif

/* the batch's condition on the definition */
#ifdef NO_DEF_CONDITION
#define DEF_COND(c) (1)
#else
#define DEF_COND(c) (df_rev == dr[c])
#endif

/* one slot read from the leader */
inline read_slot(c, s) {
  RR(c, s) = sr[s];
  if
  :: sk[s] == K_HELD -> RK(c, s) = R_HELD; printf("%c: reads slot %d rev %d: held\n", CH(c), s, sr[s])
  :: else -> RK(c, s) = R_FREE; printf("%c: reads slot %d rev %d: free\n", CH(c), s, sr[s])
  fi
}

inline forget(c) {
  RK(c, 1) = 0; RR(c, 1) = 0; RK(c, 2) = 0; RR(c, 2) = 0; dr[c] = 0; dl[c] = 0; vw[c] = 0
}

/* the view vouches for free slot s under the limit it saw in force */
#ifdef VIEW_ZERO
#define HAS_MSG(s) (1)
#else
#define HAS_MSG(s) (sr[s] != 0)
#endif
#define VOUCHES(c, s, seen) (sk[s] != K_HELD && HAS_MSG(s) && (s) <= lim[c] && (seen) == lim[c])
inline vouch(c, s) {
  RK(c, s) = R_FREE; RR(c, s) = sr[s]; vw[c] = 1;
  printf("%c: the view vouches for slot %d rev %d under limit %d (definition rev %d)\n", CH(c), s, sr[s], dl[c], dr[c]);
  st[c] = C_LONE
}

/* after the last read: refuse, or pick the write */
inline decide(c) {
  if
  :: dl[c] != 0 && dl[c] != lim[c] && (RK(c, 1) == R_HELD || RK(c, 2) == R_HELD) ->
     REACH(4, 1);
     printf("%c: LIMIT_MISMATCH (limit %d in force, asked %d)\n", CH(c), dl[c], lim[c]);
     forget(c); st[c] = C_IDLE
  :: else ->
     if
     :: RK(c, 1) != R_FREE && (lim[c] < 2 || RK(c, 2) != R_FREE) ->
        REACH(5, dl[c] == 2 && lim[c] == 2);
        printf("%c: every slot of limit %d taken: LEASE_HELD\n", CH(c), lim[c]);
        forget(c); st[c] = C_IDLE
#ifdef NO_DEF_WRITE
     :: else -> st[c] = (dl[c] == 0 -> C_BATCH : C_LONE)
#else
     :: else -> st[c] = (dl[c] == lim[c] -> C_LONE : C_BATCH)
#endif
     fi
  fi
}

inline hold(c, s) {
#ifdef PROBE
  used[s] = 1;
#endif
  sk[s] = K_HELD; sr[s] = seq; sh[s] = c + 1; sl[s] = lim[c];
  mys[c] = s; myr[c] = seq; st[c] = C_HOLD;
  forget(c)
}

/* the lone write over slot s: the record, expected = its read revision */
inline lone_write(c, s) {
  if
#ifdef NO_SLOT_CONDITION
  :: seq < MAXSEQ ->
#else
  :: seq < MAXSEQ && sr[s] == RR(c, s) ->
#endif
     seq++;
     REACH(6, RR(c, s) == 0 && used[s]);     /* a slot reused over expected 0 after its last message aged out */
     REACH(10, vw[c]);                       /* a slot taken on the view's word */
     printf("%c: slot %d written rev %d (expected %d), limit %d\n", CH(c), s, seq, RR(c, s), lim[c]);
     hold(c, s);
     check_sem()
  :: seq < MAXSEQ && sr[s] != RR(c, s) ->
     /* probe 1: the slot was rewritten by a redefinition to another limit */
     REACH(1, df_lim != lim[c] && sk[s] == K_END && sr[s] == df_rev + 1);
     printf("%c: slot %d write refused (expected %d, now %d): reads again\n", CH(c), s, RR(c, s), sr[s]);
     forget(c); st[c] = C_SLOTS
  :: else -> forget(c); st[c] = C_IDLE    /* unavailable */
  fi
}

/* the defining batch: definition, tombstones, record over the lowest free slot */
inline batch_write(c) {
  s = (RK(c, 1) == R_FREE -> 1 : 2);
  ok = DEF_COND(c) && sr[s] == RR(c, s);
  n = 2;
  if
  :: dr[c] != 0 ->
#ifndef NO_TOMBSTONES
     /* the other free slot read (of 1..max(N, L)) */
     if
     :: s == 1 && RK(c, 2) == R_FREE -> t = 2
     :: s == 2 && RK(c, 1) == R_FREE -> t = 1
     :: else -> t = 0
     fi;
     if :: t != 0 -> n = 3; ok = ok && sr[t] == RR(c, t) :: else -> skip fi
#else
     skip
#endif
  :: else -> skip
  fi;
  if
  :: ok && seq + n <= MAXSEQ ->
     REACH(2, dr[c] != 0 && df_lim != lim[c]);
     REACH(9, dr[c] != 0 && dl[c] == 0);       /* a definition written over a removed one */
     seq++;
     printf("%c: batch: definition limit %d rev %d (expected %d)\n", CH(c), lim[c], seq, dr[c]);
     df_rev = seq; df_lim = lim[c];
     if
     :: t != 0 ->
        seq++;
        printf("%c: batch: tombstone slot %d rev %d (expected %d)\n", CH(c), t, seq, RR(c, t));
        sk[t] = K_END; sr[t] = seq; sh[t] = 0
     :: else -> skip
     fi;
     seq++;
     printf("%c: batch: slot %d written rev %d (expected %d), limit %d\n", CH(c), s, seq, RR(c, s), lim[c]);
     hold(c, s);
     check_sem()
  :: !ok ->
     REACH(3, dr[c] != 0 && df_rev == dr[c]);   /* a redefinition lost on a slot condition */
     REACH(7, dr[c] == 0 && df_rev != 0);       /* a first definition lost to another */
     printf("%c: batch refused (definition or a slot moved on): reads again\n", CH(c));
     forget(c); st[c] = C_SLOTS
  :: else -> forget(c); st[c] = C_IDLE
  fi;
  s = 0; t = 0; n = 0; ok = 0
}

proctype Client(byte c) {
  byte s, t, n;
  bool ok;
end:
  do
  /* a new call, with its limit */
  :: atomic {
       st[c] == C_IDLE && calls[c] > 0 ->
       calls[c]--;
       if
       :: c == 0 -> lim[c] = 1
       :: c == 1 -> lim[c] = 2
       :: c == 2 -> lim[c] = 1
       :: c == 2 -> lim[c] = 2
       fi;
       printf("%c: Acquire limit %d\n", CH(c), lim[c]);
#ifdef DEF_FIRST
       st[c] = C_DEF
#else
       st[c] = C_SLOTS
#endif
     }
#ifdef DEF_FIRST
  :: d_step {
       st[c] == C_DEF ->
       dr[c] = df_rev; dl[c] = df_lim;
       printf("%c: reads the definition first: rev %d limit %d\n", CH(c), df_rev, df_lim);
       st[c] = C_SLOTS
     }
  /* then slots 1..max(N, L) in any order */
  :: d_step {
       st[c] == C_SLOTS && RK(c, 1) == R_UNREAD ->
       read_slot(c, 1);
       if :: MAX2(lim[c], dl[c]) < 2 || RK(c, 2) != R_UNREAD -> decide(c) :: else -> skip fi
     }
  :: d_step {
       st[c] == C_SLOTS && RK(c, 2) == R_UNREAD && MAX2(lim[c], dl[c]) == 2 ->
       read_slot(c, 2);
       if :: RK(c, 1) != R_UNREAD -> decide(c) :: else -> skip fi
     }
#else
  /* slots 1..N, concurrently: any order */
  :: d_step {
       st[c] == C_SLOTS && RK(c, 1) == R_UNREAD ->
       read_slot(c, 1);
       if :: lim[c] < 2 || RK(c, 2) != R_UNREAD -> st[c] = C_DEF :: else -> skip fi
     }
  :: d_step {
       st[c] == C_SLOTS && RK(c, 2) == R_UNREAD && lim[c] == 2 ->
       read_slot(c, 2);
       if :: RK(c, 1) != R_UNREAD -> st[c] = C_DEF :: else -> skip fi
     }
  /* then the definition */
  :: d_step {
       st[c] == C_DEF ->
       dr[c] = df_rev; dl[c] = df_lim;
       printf("%c: reads the definition rev %d: limit %d\n", CH(c), df_rev, df_lim);
       if
       :: dl[c] > lim[c] -> st[c] = C_EXTRA
       :: else -> decide(c)
       fi
     }
  /* then the slots of the limit in force beyond N */
  :: d_step {
       st[c] == C_EXTRA ->
       read_slot(c, 2);
       decide(c)
     }
#endif
#ifdef VIEW
  /* the head's path: the definition and a free slot as the stream holds
     them at one moment (VIEW_TORN: the definition first, the slot later) */
#ifdef VIEW_TORN
  :: d_step {
       st[c] == C_SLOTS && RK(c, 1) == R_UNREAD && RK(c, 2) == R_UNREAD && !vw[c] && df_lim == lim[c] ->
       dr[c] = df_rev; dl[c] = df_lim; vw[c] = 1; st[c] = C_VDEF;
       printf("%c: the view's definition rev %d: limit %d\n", CH(c), df_rev, df_lim)
     }
  :: d_step { st[c] == C_VDEF && VOUCHES(c, 1, dl[c]) -> vouch(c, 1) }
  :: d_step { st[c] == C_VDEF && VOUCHES(c, 2, dl[c]) -> vouch(c, 2) }
  :: d_step { st[c] == C_VDEF -> forget(c); st[c] = C_SLOTS }
#else
  :: d_step {
       st[c] == C_SLOTS && RK(c, 1) == R_UNREAD && RK(c, 2) == R_UNREAD && VOUCHES(c, 1, df_lim) ->
       dr[c] = df_rev; dl[c] = df_lim; vouch(c, 1)
     }
  :: d_step {
       st[c] == C_SLOTS && RK(c, 1) == R_UNREAD && RK(c, 2) == R_UNREAD && VOUCHES(c, 2, df_lim) ->
       dr[c] = df_rev; dl[c] = df_lim; vouch(c, 2)
     }
#endif
#endif
  /* the lone write: any free slot of 1..N */
  :: d_step { st[c] == C_LONE && RK(c, 1) == R_FREE -> lone_write(c, 1) }
  :: d_step { st[c] == C_LONE && RK(c, 2) == R_FREE && lim[c] == 2 -> lone_write(c, 2) }
  :: d_step { st[c] == C_BATCH -> batch_write(c) }
  /* release: a tombstone over the holding's revision */
  :: d_step {
       st[c] == C_HOLD && seq < MAXSEQ ->
       if
       :: sk[mys[c]] == K_HELD && sr[mys[c]] == myr[c] ->
          seq++;
          printf("%c: releases slot %d: tombstone rev %d\n", CH(c), mys[c], seq);
          sk[mys[c]] = K_END; sr[mys[c]] = seq; sh[mys[c]] = 0
       :: else -> skip
       fi;
       mys[c] = 0; myr[c] = 0; st[c] = C_IDLE
     }
  /* or its deadline passes: it stops acting, the record may expire */
  :: d_step {
       st[c] == C_HOLD ->
       printf("%c: deadline passed: stops acting on slot %d\n", CH(c), mys[c]);
       mys[c] = 0; myr[c] = 0; st[c] = C_IDLE
     }
  :: st[c] == C_IDLE && calls[c] == 0 -> break
  od
}

/* slot s holds a record nobody acts on (its holder's deadline passed) */
#define ORPHAN(s, c) (st[c] != C_HOLD || mys[c] != (s))
#define EXPIRES(s) (sk[s] == K_HELD && ORPHAN(s, sh[s] - 1))

proctype Nature() {
end:
  do
  :: d_step {
       seq < MAXSEQ && EXPIRES(1) ->
       seq++; printf("nats: slot 1 expires: marker rev %d\n", seq);
       sk[1] = K_END; sr[1] = seq; sh[1] = 0
     }
  :: d_step {
       seq < MAXSEQ && EXPIRES(2) ->
       seq++; printf("nats: slot 2 expires: marker rev %d\n", seq);
       sk[2] = K_END; sr[2] = seq; sh[2] = 0
     }
  :: d_step {
       sk[1] == K_END && MAY_AGE(1) ->
       printf("nats: slot 1 rev %d ages out: empty\n", sr[1]);
       sk[1] = K_NONE; sr[1] = 0
     }
  :: d_step {
       sk[2] == K_END && MAY_AGE(2) ->
       printf("nats: slot 2 rev %d ages out: empty\n", sr[2]);
       sk[2] = K_NONE; sr[2] = 0
     }
#ifdef SWEEP
  :: d_step {
       df_lim == 0 && df_rev != 0 && MAY_AGE_DEF ->
       printf("nats: the definition's tombstone rev %d ages out: no definition\n", df_rev);
       df_rev = 0
     }
#endif
  od
}

#ifdef SWEEP
#define W_IDLE 0
#define W_READ 1        /* reading the definition and slots, any order */
#define W_BATCH 2       /* the removal batch is next */

inline sweep_forget() {
  wdr = 0; wdl = 0; wdd = 0; wrk[1] = 0; wrr[1] = 0; wrk[2] = 0; wrr[2] = 0; wst = W_IDLE
}

/* after a read: stop when a slot read is held or there is no definition,
   go to the batch once the definition and every slot of its limit are read */
inline sweep_decide() {
  if
  :: wrk[1] == R_HELD || wrk[2] == R_HELD || (wdd && wdl == 0) ->
     printf("W: in use or not defined: nothing to remove\n"); sweep_forget()
  :: wdd && wdl != 0 && wrk[1] != R_UNREAD && (wdl < 2 || wrk[2] != R_UNREAD) -> wst = W_BATCH
  :: else -> skip
  fi
}

proctype Sweeper() {
  byte n;
  bool ok;
end:
  do
  :: d_step { wst == W_IDLE && wsweeps > 0 -> wsweeps--; printf("W: sweep\n"); wst = W_READ }
  :: d_step {
       wst == W_READ && !wdd ->
       wdd = 1; wdr = df_rev; wdl = df_lim;
       printf("W: reads the definition rev %d: limit %d\n", df_rev, df_lim);
       sweep_decide()
     }
  :: d_step {
       wst == W_READ && wrk[1] == R_UNREAD ->
       wrr[1] = sr[1]; wrk[1] = (sk[1] == K_HELD -> R_HELD : R_FREE);
       printf("W: reads slot 1 rev %d\n", sr[1]);
       sweep_decide()
     }
  :: d_step {
       wst == W_READ && wrk[2] == R_UNREAD ->
       wrr[2] = sr[2]; wrk[2] = (sk[2] == K_HELD -> R_HELD : R_FREE);
       printf("W: reads slot 2 rev %d\n", sr[2]);
       sweep_decide()
     }
  :: d_step {
       wst == W_BATCH ->
#ifdef SWEEP_DEF_ONLY
       ok = df_rev == wdr; n = 1;
#else
       ok = df_rev == wdr && sr[1] == wrr[1] && (wdl < 2 || sr[2] == wrr[2]);
       n = 1 + wdl;
#endif
       if
       :: ok && seq + n <= MAXSEQ ->
          REACH(8, 1);
#ifndef SWEEP_DEF_ONLY
          seq++; printf("W: batch: tombstone slot 1 rev %d (expected %d)\n", seq, wrr[1]);
          sk[1] = K_END; sr[1] = seq; sh[1] = 0;
          if
          :: wdl == 2 ->
             seq++; printf("W: batch: tombstone slot 2 rev %d (expected %d)\n", seq, wrr[2]);
             sk[2] = K_END; sr[2] = seq; sh[2] = 0
          :: else -> skip
          fi;
#endif
          seq++; printf("W: batch: definition tombstone rev %d (expected %d): removed\n", seq, wdr);
          df_rev = seq; df_lim = 0;
          check_sem()
       :: else -> printf("W: removal refused (the semaphore moved on)\n")
       fi;
       n = 0; ok = 0;
       sweep_forget()
     }
  :: wst == W_IDLE && wsweeps == 0 -> break
  od
}
#endif

init {
  byte c;
  atomic {
    do
    :: c < NC -> calls[c] = CALLS; run Client(c); c++
    :: else -> break
    od;
#ifdef SWEEP
    wsweeps = SWEEPS;
    run Sweeper();
#endif
    run Nature()
  }
}
