/*
 * Lock-delay fences (src/lease/acquire.rs, end.rs, rules.rs; docs/design.md
 * section 15) with the grant path of a queued waiter (section 16: ticket
 * delete + fence + lease in one atomic batch), checked exhaustively by
 * spin. model/README.md explains the abstraction, the bounds and the
 * properties; scripts/model-check.sh runs it.
 *
 * One lease name L, its fence key F (_tenure.delay.<name>, no TTL) and one
 * queue slot Q. A holding has a lock delay (D > 0, one value) or none.
 *   - An Acquire (Leases::attempt) reads L's last message; a record of
 *     another: LEASE_HELD. A plain one then reads the queue (a live ticket:
 *     refused); a queued waiter reads L and its ticket (head) in one step.
 *     It reads F when it has a delay of its own or L's last message is an
 *     expiry marker, a revoke purge or nothing (rules::needs_fence), and is
 *     refused LOCK_DELAY when that message's delay has not passed: an
 *     expiry marker takes the delay from the fence, a purge from its own
 *     payload, a release tombstone and nothing have none
 *     (rules::delayed_until). Then, with a delay of its own or a live fence
 *     read, ONE atomic batch: the waiter's ticket delete, the fence (a put
 *     of its delay, or a delete), expected = F's revision read, and the
 *     record, expected = L's revision read; otherwise the record alone (a
 *     waiter then deletes its ticket in a second publish).
 *   - A release of a delayed holding is one batch: fence delete
 *     (unconditional) + tombstone; a revoke: fence delete + purge carrying
 *     the delay.
 *   - NATS expires a record after its holder stopped acting (the client
 *     deadline), writing a marker. Tombstones and purges age into a marker
 *     (a new message) and markers age out (L empty), each no sooner than
 *     the marker TTL after it was written, which is at least the lock
 *     delay (--max-lock-delay <= --marker-ttl): in the model a message
 *     ages only after the delay counted from it has passed.
 * Time: `passed` says whether the lock delay D has passed since L's last
 * ending message (its NATS timestamp); it is cleared by every new ending
 * message, and the clock may set it at any step. A replica's check
 * "end + delay > now" is !passed.
 *
 * Properties:
 *   D1 nobody takes the name while the lock delay of the holding its last
 *      message ended (an expiry or a revoke of a delayed holding) runs
 *   D2 an Acquire is refused LOCK_DELAY only while such a delay runs (a
 *      release frees the name at once; a delay is applied once)
 *   D3 one holder at a time: a holding is written only over a name nobody
 *      acts on
 *   D4 no barging: a plain Acquire is granted only if no waiter whose
 *      ticket was written at or before its queue read still waits
 *
 * Mutations (negative controls):
 *   NO_FENCE                  a delayed holding is written without its fence
 *   FENCE_APART               the fence is a second publish after the record
 *                             (which may fail, as a NATS error can)
 *   NO_FENCE_DELETE           a release of a delayed holding leaves its fence
 *   BATCH_TICKET_FIRST        the waiter deletes its ticket in a publish of its
 *                             own before the fence + lease batch
 * Assumption removed:
 *   DELAY_OVER_MARKER_TTL     messages age out before the delay has passed
 *                             (a lock delay longer than the marker TTL)
 */

#ifndef CALLS_A
#define CALLS_A 2       /* Acquires of A (with a lock delay) */
#endif
#ifndef CALLS_B
#define CALLS_B 2       /* Acquires of B (no lock delay) */
#endif
#ifndef REVOKES
#define REVOKES 1
#endif
#ifndef MAXSEQ
#define MAXSEQ 12
#endif

/* L's last message */
#define K_NONE  0
#define K_HELD  1
#define K_DEL   2       /* release tombstone */
#define K_MARK  3       /* MaxAge marker: an expiry, or an aged tombstone or purge */
#define K_PURGE 4       /* revoke, its payload carrying the delay */

/* client phases (plain A = 0, B = 1; the waiter W = 2) */
#define C_IDLE   0
#define C_QUEUE  1      /* plain: the queue read is next */
#define C_FENCE  2      /* the fence read (and the delay check) is next */
#define C_WRITE  3      /* the write (a batch, or the record alone) is next */
#define C_APART  4      /* FENCE_APART: the fence publish is next */
#define C_DELETE 5      /* a waiter granted by the record alone: its ticket delete is next */
#define C_HOLD   6
#define C_TICKET 7      /* BATCH_TICKET_FIRST: ticket deleted, the batch is next */
#define C_QUEUED 8      /* the waiter waits */
#define C_NEW    9      /* the waiter's ticket write is next */
#define C_DONE   10

byte seq;
byte lk_kind, lk_rev, lk_dl, lk_who;    /* L: kind, revision, the record's (or purge's) delay, holder (c + 1) */
byte f_rev;  bool f_live;               /* F: revision (0: none), a fence put is the last message */
bool f_end;                             /* F's last message is a delete (it may age out) */
byte q_rev;  bool q_live;               /* Q: the waiter's ticket */
bool passed = 1;                        /* the delay D has passed since L's last ending message (what a replica checks) */
bool running;                           /* ghost: the delay of the last holding that ended by expiry or revoke still runs */

byte st[3], dly[3], calls[3];
byte ex[3], ek[3], epd[3];              /* L as read: revision, kind, a purge's delay */
byte fx[3];  bool fk[3];                /* F as read: revision, live */
byte arr[3];                            /* P's queue read; the waiter's ticket revision */
byte revokes = REVOKES;

#define NAME(c) ((c) == 0 -> 'A' : ((c) == 1 -> 'B' : 'W'))

#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif
#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

#define ACTS(c) (st[c] == C_HOLD || st[c] == C_APART || st[c] == C_DELETE)
#define W_WAITS (st[2] == C_QUEUED || st[2] == C_FENCE || st[2] == C_WRITE || st[2] == C_TICKET)

/*
 * When L's last message may age out (a tombstone or purge into a marker, a
 * marker into nothing): no sooner than the marker TTL after it was written,
 * which is at least the lock delay (passed), and not while an attempt that
 * read L before that message was written is still in flight (an attempt's
 * reads are younger than the marker TTL when it writes, as in sem.pml).
 */
#define IN_FLIGHT(c) (st[c] == C_QUEUE || st[c] == C_FENCE || st[c] == C_WRITE || st[c] == C_TICKET)
#ifdef AGE_ANY_TIME
#define OLD_READ(c) (0)
#else
#define OLD_READ(c) (IN_FLIGHT(c) && ex[c] < lk_rev)
#endif
#ifdef DELAY_OVER_MARKER_TTL
#define AGES (!OLD_READ(0) && !OLD_READ(1) && !OLD_READ(2))
#else
#define AGES (passed && !OLD_READ(0) && !OLD_READ(1) && !OLD_READ(2))
#endif

/* a new holding of client c at seq + 1 */
inline check_grant(c) {
  CHECK(!running, "VIOLATED D1: the name is taken while a lock delay runs\n");
  CHECK((c == 0 || !ACTS(0)) && (c == 1 || !ACTS(1)) && (c == 2 || !ACTS(2)),
        "VIOLATED D3: a holding written over a name another client acts on\n");
  CHECK(c == 2 || !(W_WAITS && arr[2] <= arr[c]),
        "VIOLATED D4: a plain Acquire is granted while a waiter that queued before its queue read waits\n")
}

inline hold(c) {
  lk_kind = K_HELD; lk_rev = seq; lk_dl = dly[c]; lk_who = c + 1;
  st[c] = C_HOLD; ex[c] = 0; ek[c] = 0; epd[c] = 0; fx[c] = 0; fk[c] = 0; arr[c] = 0
}

inline forget(c) { ex[c] = 0; ek[c] = 0; epd[c] = 0; fx[c] = 0; fk[c] = 0 }

/* the fence a holding writes: its delay (NO_FENCE: none, as a holding without one) */
#ifdef NO_FENCE
#define FDLY(c) 0
#else
#define FDLY(c) dly[c]
#endif
/* the grant is one batch: with a delay of its own, or over a live fence */
#ifdef FENCE_APART
#define IN_BATCH(c) 0
#else
#define IN_BATCH(c) (FDLY(c) > 0 || fk[c])
#endif

/* what the fence write of a holding with c's delay does */
inline fence_write(c) {
  seq++;
  if
  :: FDLY(c) > 0 -> f_live = 1; f_end = 0; printf("%c: batch: fence put rev %d (expected %d)\n", NAME(c), seq, fx[c])
  :: else -> f_live = 0; f_end = 1; printf("%c: batch: fence delete rev %d (expected %d)\n", NAME(c), seq, fx[c])
  fi;
  f_rev = seq
}

/* after reading L free (and, for a plain Acquire, the queue): the fence
   read, or straight to the write */
#define NEEDS_FENCE(c) (dly[c] > 0 || ek[c] == K_NONE || ek[c] == K_MARK || ek[c] == K_PURGE)

/* the delay the message read carries: a marker's from the fence, a purge's its own */
#define DELAY_OF(c) ((ek[c] == K_MARK && fk[c]) || (ek[c] == K_PURGE && epd[c] > 0))

/* reads L: free -> ok */
inline read_lease(c) {
  ex[c] = lk_rev; ek[c] = lk_kind; epd[c] = (lk_kind == K_PURGE -> lk_dl : 0)
}

/* the fence read and the delay check */
inline fence_check(c, back) {
  fx[c] = f_rev; fk[c] = f_live;
  if
  :: DELAY_OF(c) && lk_rev == ex[c] && !passed ->
     printf("%c: reads fence rev %d (%d): LOCK_DELAY\n", NAME(c), f_rev, f_live);
     /* D2: a refusal only while a delay really runs */
     CHECK(running, "VIOLATED D2: an Acquire is refused LOCK_DELAY while no lock delay runs\n");
     REACH(1, ek[c] == K_MARK);        /* refused in the delay after an expiry */
     REACH(2, ek[c] == K_PURGE);       /* refused in the delay after a revoke */
     forget(c); st[c] = back
  :: else ->
     REACH(3, DELAY_OF(c) && lk_rev == ex[c] && passed && c == 2);  /* the waiter goes on once the delay passed */
     printf("%c: reads fence rev %d (%d): not delayed\n", NAME(c), f_rev, f_live);
     st[c] = C_WRITE
  fi
}

/* the grant: one batch, or the record alone */
inline grant(c, back) {
  if
  :: IN_BATCH(c) ->
     /* ticket delete (a waiter) + fence + record, all or nothing */
     if
     :: seq + 3 <= MAXSEQ && lk_rev == ex[c] && f_rev == fx[c] && (c != 2 || (q_live && q_rev == arr[2])) ->
        printf("%c: batch over L rev %d, fence rev %d\n", NAME(c), ex[c], fx[c]);
        check_grant(c);
        REACH(4, c == 2 && f_live && dly[c] == 0);     /* a waiter's batch deletes an older fence */
        REACH(5, c == 2 && dly[c] > 0);                 /* a waiter's batch with a delay of its own */
        REACH(6, c != 2 && ek[c] == K_NONE && f_live && dly[c] == 0);  /* an empty name's live fence deleted */
        if :: c == 2 -> seq++; q_live = 0; q_rev = seq; printf("W: batch: ticket deleted rev %d\n", seq) :: else -> skip fi;
        fence_write(c);
        seq++; printf("%c: batch: record rev %d (delay %d)\n", NAME(c), seq, dly[c]);
        hold(c)
     :: else -> printf("%c: batch refused\n", NAME(c)); forget(c); st[c] = back
     fi
  :: else ->
     if
     :: seq < MAXSEQ && lk_rev == ex[c] ->
        printf("%c: record rev %d (expected %d, delay %d)\n", NAME(c), seq + 1, ex[c], dly[c]);
        check_grant(c);
        seq++;
        hold(c);
#ifdef FENCE_APART
        if :: dly[c] > 0 || fk[c] -> st[c] = C_APART :: else -> skip fi;
#endif
        if :: c == 2 && st[c] == C_HOLD -> st[c] = C_DELETE :: else -> skip fi
     :: else -> printf("%c: record write refused\n", NAME(c)); forget(c); st[c] = back
     fi
  fi
}

/* release: a delayed holding's fence goes in the same batch */
inline release(c) {
  if
  :: lk_kind == K_HELD && lk_who == c + 1 && seq + 2 <= MAXSEQ ->
#ifndef NO_FENCE_DELETE
     if :: lk_dl > 0 -> seq++; f_live = 0; f_end = 1; f_rev = seq :: else -> skip fi;
#endif
     seq++; lk_kind = K_DEL; lk_rev = seq; lk_dl = 0; lk_who = 0; passed = 0;
     printf("%c: releases: tombstone rev %d\n", NAME(c), seq)
  :: else -> skip
  fi
}

/* FENCE_APART: the fence publish after the record (it may fail) */
#ifdef FENCE_APART
#define FENCE_APART_STEPS \
  :: d_step { \
       st[c] == C_APART -> \
       if \
       :: seq < MAXSEQ && f_rev == fx[c] -> fence_write(c) \
       :: else -> printf("%c: fence publish refused\n", NAME(c)) \
       fi; \
       forget(c); st[c] = (c == 2 -> C_DELETE : C_HOLD) \
     } \
  :: d_step { st[c] == C_APART -> printf("%c: fence publish fails (NATS error)\n", NAME(c)); forget(c); st[c] = (c == 2 -> C_DELETE : C_HOLD) }
#else
#define FENCE_APART_STEPS
#endif

proctype Plain(byte c) {
end:
  do
  :: d_step {
       st[c] == C_IDLE && calls[c] > 0 ->
       calls[c]--;
       if
       :: lk_kind == K_HELD -> printf("%c: Acquire: held\n", NAME(c))
       :: else ->
          read_lease(c); st[c] = C_QUEUE;
          printf("%c: Acquire (delay %d) reads L rev %d kind %d\n", NAME(c), dly[c], lk_rev, lk_kind)
       fi
     }
  :: d_step {
       st[c] == C_QUEUE ->
       if
       :: q_live -> printf("%c: reads the queue: a ticket: refused\n", NAME(c)); forget(c); st[c] = C_IDLE
       :: else ->
          arr[c] = seq;
          printf("%c: reads the queue as of rev %d: empty\n", NAME(c), seq);
          st[c] = (NEEDS_FENCE(c) -> C_FENCE : C_WRITE)
       fi
     }
  :: d_step { st[c] == C_FENCE -> fence_check(c, C_IDLE) }
  :: d_step { st[c] == C_WRITE -> grant(c, C_IDLE) }
  FENCE_APART_STEPS
  :: d_step { st[c] == C_HOLD -> release(c); st[c] = C_IDLE }
  :: d_step { st[c] == C_HOLD -> printf("%c: deadline passed: stops acting\n", NAME(c)); st[c] = C_IDLE }
  :: st[c] == C_IDLE && calls[c] == 0 -> break
  od
}

proctype Waiter() {
  byte c = 2;
end:
  do
  :: atomic {
       st[c] == C_NEW && !q_live && seq < MAXSEQ ->
       if :: dly[c] = 0 :: dly[c] = 1 fi;
       d_step {
         seq++; q_live = 1; q_rev = seq; arr[c] = seq;
         printf("W: ticket written rev %d (delay %d)\n", seq, dly[c]);
         st[c] = C_QUEUED
       }
     }
  /* a try: L free, and its ticket live (the only waiter: the head) */
  :: d_step {
       st[c] == C_QUEUED && lk_kind != K_HELD && q_live && q_rev == arr[c] ->
       read_lease(c);
       printf("W: reads L rev %d kind %d and its ticket: head\n", lk_rev, lk_kind);
       st[c] = (NEEDS_FENCE(c) -> C_FENCE : C_WRITE)
     }
  :: d_step { st[c] == C_FENCE -> fence_check(c, C_QUEUED) }
#ifdef BATCH_TICKET_FIRST
  :: d_step {
       st[c] == C_WRITE && IN_BATCH(c) ->
       if
       :: seq < MAXSEQ && q_live && q_rev == arr[c] ->
          seq++; q_live = 0; printf("W: ticket deleted rev %d, alone\n", seq); q_rev = seq; st[c] = C_TICKET
       :: else -> forget(c); st[c] = C_QUEUED
       fi
     }
  :: d_step {
       st[c] == C_TICKET ->
       if
       :: seq + 2 <= MAXSEQ && lk_rev == ex[c] && f_rev == fx[c] ->
          printf("W: batch over L rev %d, fence rev %d\n", ex[c], fx[c]);
          check_grant(c); fence_write(c);
          seq++; printf("W: batch: record rev %d\n", seq);
          hold(c)
       :: else -> printf("W: batch refused: queues again\n"); forget(c); st[c] = C_NEW
       fi
     }
  :: d_step { st[c] == C_WRITE && !IN_BATCH(c) -> grant(c, C_QUEUED) }
#else
  :: d_step { st[c] == C_WRITE -> grant(c, C_QUEUED) }
#endif
  FENCE_APART_STEPS
  :: d_step {
       st[c] == C_DELETE ->
       if
       :: seq < MAXSEQ && q_live && q_rev == arr[c] -> seq++; q_live = 0; q_rev = seq; printf("W: ticket deleted rev %d\n", seq)
       :: else -> skip
       fi;
       st[c] = C_HOLD
     }
  :: d_step { st[c] == C_HOLD -> release(c); st[c] = C_DONE }
  :: d_step { st[c] == C_HOLD -> printf("W: deadline passed: stops acting\n"); st[c] = C_DONE }
  :: st[c] == C_DONE -> break
  od
}

/* a revoke: the holding's fence goes in the batch, its delay in the purge */
proctype Admin() {
end:
  d_step {
    revokes > 0 && lk_kind == K_HELD && st[lk_who - 1] == C_HOLD && seq + 2 <= MAXSEQ ->
    revokes--;
    if :: lk_dl > 0 -> seq++; f_live = 0; f_end = 1; f_rev = seq :: else -> skip fi;
    seq++;
    printf("admin: revokes: purge rev %d (delay %d)\n", seq, lk_dl);
    /* the holder acts until its next call fails: fencing tokens cover it */
    st[lk_who - 1] = (lk_who == 3 -> C_DONE : C_IDLE);
    lk_kind = K_PURGE; lk_rev = seq; lk_who = 0; passed = 0; running = (lk_dl > 0)
  }
}

#define ORPHAN (lk_kind == K_HELD && !ACTS(lk_who - 1))

proctype Nature() {
end:
  do
  :: d_step {
       seq < MAXSEQ && ORPHAN ->
       seq++;
       printf("nats: the record expires: marker rev %d (delay %d)\n", seq, lk_dl);
       running = (lk_dl > 0); passed = 0;
       lk_kind = K_MARK; lk_rev = seq; lk_dl = 0; lk_who = 0
     }
  /* a tombstone or purge ages into a marker */
  :: d_step {
       seq < MAXSEQ && (lk_kind == K_DEL || lk_kind == K_PURGE) && AGES ->
       seq++;
       printf("nats: L rev %d ages out: marker rev %d\n", lk_rev, seq);
       passed = 0;
       lk_kind = K_MARK; lk_rev = seq; lk_dl = 0
     }
  :: d_step {
       lk_kind == K_MARK && AGES ->
       printf("nats: L's marker rev %d ages out: L empty\n", lk_rev);
       lk_kind = K_NONE; lk_rev = 0
     }
  :: d_step { f_end -> printf("nats: the fence's delete ages out\n"); f_end = 0; f_rev = 0 }
  :: d_step { !q_live && q_rev != 0 -> q_rev = 0 }
  /* time: the delay counted from L's last ending message passes */
  :: d_step { !passed -> printf("clock: the lock delay since L rev %d has passed\n", lk_rev); passed = 1; running = 0 }
  od
}

init {
  atomic {
    dly[0] = 1; calls[0] = CALLS_A; calls[1] = CALLS_B; st[2] = C_NEW;
    run Plain(0); run Plain(1); run Waiter(); run Admin(); run Nature()
  }
}
