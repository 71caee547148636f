/*
 * Fenced, fair read-write locks (src/lease/semaphore/rwlock.rs: rw_attempt,
 * downgrade), checked exhaustively by spin. model/README.md explains the
 * abstraction, the bounds and the properties; scripts/model-check.sh runs
 * it.
 *
 * A read-write lock is kept under the semaphore keys of its name: slot keys
 * S1..SN (N, the most SHARED holders at once; the model has N = NS = 2) and
 * the definition key D, all under one wildcard filter F. The bucket is a
 * stream with history 1 per key; every write takes revision seq + 1, so
 * revisions are global and only grow. A slot's last message is none, a
 * record (holder, mode EXCLUSIVE or SHARED, token), a release tombstone or
 * an expiry marker; tombstones and markers age out (none again). D is
 * defined before the model starts (revision 1) and never changes (see
 * model/README.md: the first-definition batch is left out).
 *
 *   - A filter-conditional write ("put_under F, expected L",
 *     Store::put_under) stores only if the largest revision of any message
 *     under F is L; the check and the write are one publish (one step).
 *   - Acquire(mode) (rw_attempt) scans F (Store::scan): one message at a
 *     time from the stream leader, each read at its own moment, the next
 *     message under F above the last one read (get next by subject), until
 *     there is none; L is the last revision read. A slot read more than
 *     once keeps its last read; a slot not read has no message (free).
 *     EXCLUSIVE is compatible when no slot read holds a record; SHARED when
 *     no slot read holds an EXCLUSIVE record and fewer than N do. Then it
 *     writes its record (token: the write's revision) into a free slot
 *     read (any one) with the filter-conditional write, expected L. A lost
 *     condition scans again: MAXTRY write attempts without a ticket, MAXTRY
 *     more as the head.
 *   - Renew: the holder rewrites its record (same mode, same token),
 *     conditional on its slot's own revision (the exact key).
 *   - Downgrade (EXCLUSIVE to SHARED): the holder rewrites its record with
 *     mode SHARED and a new token, the revision of that write, conditional
 *     on its slot's own revision; it holds throughout.
 *   - Release: a tombstone over its slot, conditional on its revision.
 *   - Deadline and expiry: a holder may stop acting at its deadline; only
 *     then may NATS expire its record (a marker at seq + 1), as in lease.pml.
 *   - Fair queue (abstract: a ticket array, see model/README.md): a call
 *     first tries without a ticket, which may take only when the queue is
 *     empty (read in the same step as the scan's last read); refused, the
 *     client takes a ticket at the tail, or ends the call. Only the head
 *     scans and takes; an incompatible head scans again later (a wake). The
 *     ticket is removed with the grant, or when the call ends (attempts
 *     used up, NATS unavailable).
 *
 * Clients A (EXCLUSIVE), B (SHARED), C (SHARED or EXCLUSIVE, chosen per
 * call), with CALLS_A, CALLS_B, CALLS_C Acquires; RENEWS renewals and
 * DOWNGRADES downgrades among all holders. Every bucket access (one read of the leader,
 * one publish) is one step; steps of clients and NATS interleave in every
 * order.
 *
 * Properties, checked after every write:
 *   RW1 a client that holds EXCLUSIVE (acts on an EXCLUSIVE grant) never
 *       holds at the same time as any other holder
 *   RW2 tokens strictly increase across the grants of the name: every
 *       grant's token (acquisitions and downgrades) is greater than every
 *       earlier grant's (checked as: above every revision written before
 *       the grant, see check_token)
 *   RW3 no overtaking: a client is granted only if no waiter that took its
 *       ticket before it (before its queue read, for a call without a
 *       ticket) still waits; in particular a SHARED Acquire is never granted
 *       before an EXCLUSIVE waiter queued ahead of it
 *
 * Mutations (negative controls: each must yield a counterexample):
 *   EXACT_COND           the Acquire's write is conditional on its own
 *                        slot's revision as read, not on the filter
 *   NO_MODE_CHECK        a SHARED Acquire counts an EXCLUSIVE record as a
 *                        shared one
 *   DOWNGRADE_OLD_TOKEN  the downgrade keeps the EXCLUSIVE grant's token
 *   BARGE                an Acquire without a ticket does not read the queue
 *   SCAN_ANY_ORDER       the scan reads each slot once, in any order (as
 *                        concurrent gets would), L the largest revision read
 */

#ifndef CALLS_A
#define CALLS_A 2       /* Acquire calls of A */
#endif
#ifndef CALLS_B
#define CALLS_B 1       /* of B */
#endif
#ifndef CALLS_C
#define CALLS_C 1       /* of C */
#endif
#ifndef MAXSEQ
#define MAXSEQ 11       /* stream sequence bound: writes past it fail (11 cuts nothing) */
#endif
#ifndef MAXTRY
#define MAXTRY 2        /* write attempts per call (MAX_CAS_ATTEMPTS) */
#endif
#ifndef RENEWS
#define RENEWS 1        /* renewals, all holders together */
#endif
#ifndef DOWNGRADES
#define DOWNGRADES 1    /* downgrades, all EXCLUSIVE holders together */
#endif
#define NC 3            /* clients A (EXCLUSIVE), B (SHARED), C (either, per call) */
#define NS 2            /* slot keys S1..NS: N, the most SHARED holders */
#define NK (NS + 1)     /* per-client arrays indexed by slot 1..NS */
#define DREV 1          /* D's revision: defined before everything, never changed */

mtype = { EXCLUSIVE, SHARED };

/* a slot's last message */
#define K_NONE 0        /* no message */
#define K_HELD 1        /* a record */
#define K_END  2        /* a release tombstone or an expiry marker */

/* client phases */
#define C_IDLE    0     /* between calls */
#define C_SCAN    1     /* scanning F (a waiter: only at the head of the queue) */
#define C_WRITE   2     /* compatible: the filter-conditional write is next */
#define C_REFUSED 3     /* refused without a ticket: takes one, or ends the call */
#define C_HOLD    4     /* acts on its holding */

byte seq = DREV;
byte sk[NK], sr[NK], sh[NK];    /* each slot: kind, revision (0: no message), holder (c + 1) */
mtype sm[NK];                   /* each slot's record: mode */

byte st[NC], calls[NC], tries[NC];
mtype md[NC];                   /* the call's mode; a holder's mode (SHARED after a downgrade) */
bool wt[NC];                    /* holds a ticket (waits) */
byte pos[NC];                   /* the scan: revision of the last message read (L) */
mtype vw[NC * NK];              /* the scan's view of each slot: 0 (free), or the record's mode */
#if defined(EXACT_COND) || defined(SCAN_ANY_ORDER)
byte vr[NC * NK];               /* the revision read of each slot */
#endif
#if defined(SCAN_ANY_ORDER) || defined(PROBE)
byte rd[NC];                    /* the slots read in this scan (a bit each) */
#endif
byte ms[NC], mr[NC];            /* a holding: slot, its last revision */
#ifdef DOWNGRADE_OLD_TOKEN
byte mt[NC];                    /* a holding's token (only the mutation needs it: else the
                                   revision of the grant's write) */
#endif
byte q[NC], qn;                 /* the queue: clients (c + 1) in ticket order, head first */
byte clk, arr[NC];              /* ghost: tickets taken; a client's arrival (RW3) */
byte renews = RENEWS, downgrades = DOWNGRADES;
#ifdef PROBE
bool was_ex[NC];                /* ghost, probes only: the holding was downgraded */
#define DOWNGRADED(v) (HOLDS(v) && was_ex[v])
#endif

#define VW(c, s) vw[(c) * NK + (s)]
#define VR(c, s) vr[(c) * NK + (s)]
#define CH(c) ('A' + (c))
#define MAX2(a, b) ((a) > (b) -> (a) : (b))

#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif
#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

/* the largest revision of any message under F (D's included) */
#define MAXF MAX2(DREV, MAX2(sr[1], sr[2]))

#define HOLDS(c) (st[c] == C_HOLD)
#define EXH(c) (HOLDS(c) && md[c] == EXCLUSIVE)
#define SHH(c) (HOLDS(c) && md[c] == SHARED)
#define NHOLD ((HOLDS(0) -> 1 : 0) + (HOLDS(1) -> 1 : 0) + (HOLDS(2) -> 1 : 0))
#define ANYC(m) (m(0) || m(1) || m(2))

inline check_rw() {
  CHECK(!(ANYC(EXH) && NHOLD > 1),
        "VIOLATED RW1: an EXCLUSIVE holder holds at the same time as another holder\n")
}

/* RW3 at the grant of c: a waiter v that took its ticket at or before c's arrival still waits */
#define AHEAD(v) ((v) != c && wt[v] && arr[v] <= arr[c])
#define EX_AHEAD(v) (AHEAD(v) && md[v] == EXCLUSIVE)
inline check_fair(c) {
  CHECK(!(md[c] == SHARED && ANYC(EX_AHEAD)),
        "VIOLATED RW3: a SHARED Acquire granted before an EXCLUSIVE waiter queued ahead of it\n");
  CHECK(!ANYC(AHEAD), "VIOLATED RW3: a client granted before a waiter that queued before it (overtaking)\n")
}

/*
 * RW2 at a grant with token tok, written at revision seq: tok is above
 * every revision written before (seq - 1). A token is never above the
 * revision its grant was written at, so this holds at every grant iff each
 * grant's token is greater than every earlier grant's (no ghost history).
 */
inline check_token(tok) {
  CHECK(tok > seq - 1, "VIOLATED RW2: a grant's token is not greater than an earlier grant's\n")
}

/* forget the scan */
inline forget(c) {
  pos[c] = DREV;
  VW(c, 1) = 0; VW(c, 2) = 0;
#if defined(EXACT_COND) || defined(SCAN_ANY_ORDER)
  VR(c, 1) = 0; VR(c, 2) = 0;
#endif
#if defined(SCAN_ANY_ORDER) || defined(PROBE)
  rd[c] = 0
#else
  skip
#endif
}

/* the head's ticket leaves the queue; an empty queue resets the arrival
   clock (arrivals only order clients against tickets still waiting) */
inline dequeue(c) {
  q[0] = q[1]; q[1] = q[2]; q[2] = 0; qn--;
  wt[c] = 0;
  if
  :: qn == 0 -> clk = 0; arr[0] = 0; arr[1] = 0; arr[2] = 0
  :: else -> arr[c] = 0
  fi
}

/* the call ends without a grant */
inline end_call(c) {
  if :: wt[c] -> dequeue(c) :: else -> arr[c] = 0 fi;
  forget(c); tries[c] = 0; md[c] = 0; st[c] = C_IDLE
}

/* record one read of slot s into the view */
inline view(c, s) {
  if
  :: sk[s] == K_HELD ->
     VW(c, s) = sm[s];
     printf("%c: reads S%d rev %d: %e record of %c\n", CH(c), s, sr[s], sm[s], CH(sh[s] - 1))
  :: sk[s] == K_END ->
     VW(c, s) = 0; printf("%c: reads S%d rev %d: free (tombstone or marker)\n", CH(c), s, sr[s])
  :: else ->
     VW(c, s) = 0; printf("%c: reads S%d: no message\n", CH(c), s)
  fi
}

/* after the scan's last read: the queue (without a ticket), then compatibility */
inline decide(c) {
  n = (VW(c, 1) != 0 -> 1 : 0) + (VW(c, 2) != 0 -> 1 : 0);
#ifdef NO_MODE_CHECK
  ok = (md[c] == EXCLUSIVE -> n == 0 : n < NS);
#else
  ok = (md[c] == EXCLUSIVE -> n == 0 : (n < NS && VW(c, 1) != EXCLUSIVE && VW(c, 2) != EXCLUSIVE));
#endif
  /* N SHARED records read: a SHARED Acquire is not compatible */
  REACH(8, md[c] == SHARED && n == NS && VW(c, 1) == SHARED && VW(c, 2) == SHARED);
  if
#ifndef BARGE
  :: !wt[c] && qn > 0 ->
     REACH(6, ok);      /* compatible, refused by the queue alone */
     printf("%c: scan ends at L = %d; the queue has %d waiting: refused\n", CH(c), pos[c], qn);
     forget(c); tries[c] = 0; st[c] = C_REFUSED
#endif
  :: else ->
     if :: !wt[c] -> arr[c] = clk :: else -> skip fi;   /* a call without a ticket arrives at its queue read */
     if
     :: ok ->
        printf("%c: scan ends at L = %d: %e compatible\n", CH(c), pos[c], md[c]);
        st[c] = C_WRITE
     :: !ok && wt[c] ->
        printf("%c: scan ends at L = %d: %e not compatible, waits at the head\n", CH(c), pos[c], md[c]);
        forget(c)
     :: else ->
        printf("%c: scan ends at L = %d: %e not compatible, refused\n", CH(c), pos[c], md[c]);
        arr[c] = 0; forget(c); tries[c] = 0; st[c] = C_REFUSED
     fi
  fi;
  n = 0; ok = 0
}

#ifndef SCAN_ANY_ORDER
/* one scan read: the next message under F above the last one read */
inline scan_step(c) {
  t = 0;
  if :: sk[1] != K_NONE && sr[1] > pos[c] -> t = 1 :: else -> skip fi;
  if :: sk[2] != K_NONE && sr[2] > pos[c] && (t == 0 || sr[2] < sr[t]) -> t = 2 :: else -> skip fi;
  if
  :: t != 0 ->
#ifdef PROBE
     REACH(7, rd[c] & (1 << t));        /* a slot read twice in one scan */
     rd[c] = rd[c] | (1 << t);
#endif
     pos[c] = sr[t];
#ifdef EXACT_COND
     VR(c, t) = sr[t];
#endif
     view(c, t)
  :: else -> decide(c)
  fi;
  t = 0
}
#else
/* one scan read of slot s, unread in this scan; L the largest revision read */
inline scan_slot(c, s) {
  rd[c] = rd[c] | (1 << s);
  VR(c, s) = sr[s];
  pos[c] = MAX2(pos[c], sr[s]);
  view(c, s);
  if :: rd[c] == 6 -> decide(c) :: else -> skip fi
}
#endif

/* the grant of a write into slot s at revision seq */
inline grant(c, s) {
#ifdef EXACT_COND
  printf("%c: S%d written rev %d (expected %d on S%d alone): holds %e, token %d\n", CH(c), s, seq, VR(c, s), s, md[c], seq);
#else
  printf("%c: S%d written rev %d (expected %d under F): holds %e, token %d\n", CH(c), s, seq, pos[c], md[c], seq);
#endif
  REACH(1, md[c] == SHARED && ANYC(SHH));            /* two SHARED holders at once */
  REACH(3, md[c] == SHARED && ANYC(DOWNGRADED));     /* SHARED joins a downgraded holder */
#define BEHIND_EX_SH (qn >= 2 && md[c] == EXCLUSIVE && md[q[1] - 1] == SHARED)
  REACH(5, wt[c] && BEHIND_EX_SH);                   /* an EXCLUSIVE waiter served, a SHARED waiter behind it */
  sk[s] = K_HELD; sr[s] = seq; sh[s] = c + 1; sm[s] = md[c];
  ms[c] = s; mr[c] = seq; tries[c] = 0;
#ifdef DOWNGRADE_OLD_TOKEN
  mt[c] = seq;
#endif
  check_fair(c);
  check_token(seq);
  if :: wt[c] -> dequeue(c) :: else -> arr[c] = 0 fi;
  forget(c); st[c] = C_HOLD;
  check_rw()
}

#ifdef EXACT_COND
#define ACQ_COND(c, s) (sr[s] == VR(c, s))
#else
#define ACQ_COND(c, s) (MAXF == pos[c])
#endif

/* the filter-conditional write of the record into free slot s */
inline acq_write(c, s) {
  if
  :: seq < MAXSEQ && ACQ_COND(c, s) ->
     seq++;
     grant(c, s)
  :: seq < MAXSEQ && !ACQ_COND(c, s) ->
     REACH(4, MAXF > pos[c] && sr[s] <= pos[c]);      /* refused by a write to another slot */
     tries[c]--;
     if
     :: tries[c] > 0 ->
        printf("%c: S%d write refused (expected %d, F at %d): scans again\n", CH(c), s, pos[c], MAXF);
        forget(c); st[c] = C_SCAN
     :: else ->
        printf("%c: S%d write refused (expected %d, F at %d): CONTENDED\n", CH(c), s, pos[c], MAXF);
        end_call(c)
     fi
  :: else ->
     printf("%c: write fails: NATS unavailable (the sequence bound)\n", CH(c));
     end_call(c)
  fi
}

#define OWN(c) (sk[ms[c]] == K_HELD && sr[ms[c]] == mr[c])

inline unhold(c) {
  ms[c] = 0; mr[c] = 0; md[c] = 0; st[c] = C_IDLE
#ifdef PROBE
  ; was_ex[c] = 0
#endif
}

proctype Client(byte c) {
  byte t, n;
  bool ok;
end:
  do
  /* a new call, with its mode: first without a ticket */
  :: atomic {
       st[c] == C_IDLE && calls[c] > 0 ->
       calls[c]--;
       if
       :: c == 0 -> md[c] = EXCLUSIVE
       :: c == 1 -> md[c] = SHARED
       :: c == 2 -> md[c] = SHARED
       :: c == 2 -> md[c] = EXCLUSIVE
       fi;
       printf("%c: Acquire %e\n", CH(c), md[c]);
       tries[c] = MAXTRY; st[c] = C_SCAN
     }
#ifndef SCAN_ANY_ORDER
  :: d_step { st[c] == C_SCAN && (!wt[c] || q[0] == c + 1) -> scan_step(c) }
#else
  :: d_step { st[c] == C_SCAN && (!wt[c] || q[0] == c + 1) && !(rd[c] & 2) -> scan_slot(c, 1) }
  :: d_step { st[c] == C_SCAN && (!wt[c] || q[0] == c + 1) && !(rd[c] & 4) -> scan_slot(c, 2) }
#endif
  /* the write into a free slot read (any one) */
  :: d_step { st[c] == C_WRITE && VW(c, 1) == 0 -> acq_write(c, 1) }
  :: d_step { st[c] == C_WRITE && VW(c, 2) == 0 -> acq_write(c, 2) }
  /* refused without a ticket: take one at the tail, or end the call */
  :: d_step {
       st[c] == C_REFUSED ->
       q[qn] = c + 1; qn++; wt[c] = 1; clk++; arr[c] = clk;
       printf("%c: takes ticket %d (%d waiting)\n", CH(c), clk, qn);
       tries[c] = MAXTRY; st[c] = C_SCAN
     }
  :: d_step { st[c] == C_REFUSED -> printf("%c: ends the call\n", CH(c)); end_call(c) }
  /* renew: the same record again, expected = its slot's revision */
  :: d_step {
       st[c] == C_HOLD && renews > 0 && seq < MAXSEQ ->
       renews--;
       if
       :: OWN(c) ->
          seq++; sr[ms[c]] = seq; mr[c] = seq;
          printf("%c: renews S%d rev %d, same token\n", CH(c), ms[c], seq)
       :: else ->
          printf("%c: renew refused: LEASE_NOT_HELD, stops\n", CH(c)); unhold(c)
       fi;
       check_rw()
     }
  /* downgrade: SHARED with a new token, expected = its slot's revision */
  :: d_step {
       st[c] == C_HOLD && md[c] == EXCLUSIVE && downgrades > 0 && seq < MAXSEQ ->
       downgrades--;
       if
       :: OWN(c) ->
          seq++; sr[ms[c]] = seq; sm[ms[c]] = SHARED; md[c] = SHARED; mr[c] = seq;
#ifdef PROBE
          was_ex[c] = 1;
#endif
#ifdef DOWNGRADE_OLD_TOKEN
          printf("%c: downgrades S%d rev %d: holds SHARED, keeps token %d\n", CH(c), ms[c], seq, mt[c]);
          check_token(mt[c])
#else
          printf("%c: downgrades S%d rev %d: holds SHARED, token %d\n", CH(c), ms[c], seq, seq);
          check_token(seq)
#endif
          ; REACH(2, 1)
       :: else ->
          printf("%c: downgrade refused: LEASE_NOT_HELD, stops\n", CH(c)); unhold(c)
       fi;
       check_rw()
     }
  /* release: a tombstone over its slot, expected = its revision */
  :: d_step {
       st[c] == C_HOLD && seq < MAXSEQ ->
       if
       :: OWN(c) ->
          seq++; sk[ms[c]] = K_END; sr[ms[c]] = seq; sh[ms[c]] = 0; sm[ms[c]] = 0;
          printf("%c: releases S%d: tombstone rev %d\n", CH(c), ms[c], seq)
       :: else -> skip
       fi;
       unhold(c);
       check_rw()
     }
  /* or its deadline passes: it stops acting, and NATS may expire the record */
  :: d_step {
       st[c] == C_HOLD ->
       printf("%c: deadline passed: stops acting on S%d\n", CH(c), ms[c]);
       unhold(c)
     }
  :: st[c] == C_IDLE && calls[c] == 0 -> break
  od
}

/* slot s holds a record its holder no longer acts on */
#define EXPIRES(s) (sk[s] == K_HELD && !(st[sh[s] - 1] == C_HOLD && ms[sh[s] - 1] == (s)))

proctype Nature() {
end:
  do
  :: d_step {
       seq < MAXSEQ && EXPIRES(1) ->
       seq++; printf("nats: S1 expires: marker rev %d\n", seq);
       sk[1] = K_END; sr[1] = seq; sh[1] = 0; sm[1] = 0
     }
  :: d_step {
       seq < MAXSEQ && EXPIRES(2) ->
       seq++; printf("nats: S2 expires: marker rev %d\n", seq);
       sk[2] = K_END; sr[2] = seq; sh[2] = 0; sm[2] = 0
     }
  :: d_step { sk[1] == K_END -> printf("nats: S1 rev %d ages out: no message\n", sr[1]); sk[1] = K_NONE; sr[1] = 0 }
  :: d_step { sk[2] == K_END -> printf("nats: S2 rev %d ages out: no message\n", sr[2]); sk[2] = K_NONE; sr[2] = 0 }
  od
}

init {
  byte c;
  atomic {
    do
    :: c < NC ->
       calls[c] = (c == 0 -> CALLS_A : (c == 1 -> CALLS_B : CALLS_C));
       pos[c] = DREV; run Client(c); c++
    :: else -> break
    od;
    run Nature()
  }
}
