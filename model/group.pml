/*
 * Groups (src/lease/group.rs, docs/design.md section 21): AcquireGroup's one
 * atomic batch against single Acquires, a queued waiter and an observer,
 * checked exhaustively by spin. model/README.md explains the abstraction,
 * the bounds and the properties; scripts/model-check.sh runs it.
 *
 * Two names N0, N1, each a plain lease (one last message, history 1).
 *   - G, the group client: AcquireGroup {N0, N1}: reads both members from
 *     the leader (concurrent gets: any order); a member held by another is
 *     LEASE_HELD; then reads the queue of each member (a scan of
 *     _tenure.q.<name>.ticket.*: its slots and guard; any order); a live
 *     ticket is QUEUED; then ONE atomic batch: per member the queue guard (a
 *     delete of _tenure.q.<name>.ticket.plain, expected = the last revision
 *     of any key of that queue, Nats-Expected-Last-Subject-Sequence-Subject),
 *     and the records in request order, each expected = the member's
 *     revision read. (src/ writes the records first, each conditional on
 *     its name's line _tenure.q.<name>.*.* as scanned with the queue, the
 *     scan showing the record at the revision read: a stronger condition
 *     than the record's own, for the leader's hold-back on R3; the batch
 *     is atomic, so its order is not observable.)
 *     A lost race reads again. G then releases both in one batch (each
 *     tombstone over the revision it holds) or stops acting at its deadline,
 *     after which NATS expires each member on its own.
 *   - S, a single Acquire without a wait of either name: reads the lease,
 *     then the queue (a live ticket: refused), then writes the record over
 *     the revision read; releases or stops acting.
 *   - W, a waiter on N0: writes its ticket into N0's queue slot (expected:
 *     the slot's revision), then, as the only waiter it is the head: reads
 *     the lease free and its ticket live (one step), writes the lease over
 *     the revision read, then deletes its ticket; releases or stops acting.
 *   - O, an observer: GetLease of one member, then of the other (two reads,
 *     either order), as a client checking a group would.
 * Every bucket access (a read, a publish, a batch) is one step; steps
 * interleave in every order. Expiry of a record waits until its holder
 * stopped acting (the client deadline of lease.pml).
 *
 * Properties:
 *   G1 no observer sees part of a group: after reading member x as written
 *      by a group batch at revision r, a read of member y shows revision
 *      r + (y - x) (the same batch) or later, never the state before it
 *   G2 mutual exclusion per name: a holding is written only over a name
 *      nobody acts on (a group's member never coexists with a single
 *      holding of it)
 *   G3 a group never jumps a queue: it is granted only while no waiter of
 *      a member waits
 *
 * Mutations (negative controls):
 *   SPLIT_GROUPS          the records one by one (the test fault
 *                         split-groups: no guards; a lost race releases the
 *                         members written so far)
 *   NO_MEMBER_CONDITION   a member's record in the batch without its
 *                         expected revision
 *   NO_QUEUE_GUARD        no queue guards in the batch
 */

#ifndef GCALLS
#define GCALLS 2        /* AcquireGroup calls of G */
#endif
#ifndef SCALLS
#define SCALLS 2        /* Acquire calls of S */
#endif
#ifndef OBS
#define OBS 2           /* observations (two reads each) of O */
#endif
#ifndef MAXSEQ
#define MAXSEQ 20       /* stream sequence bound: writes past it fail (20 cuts nothing) */
#endif

#define K_NONE 0
#define K_HELD 1
#define K_END  2        /* release tombstone, expiry marker */

/* who: the last writer of a record */
#define WHO_G 1
#define WHO_S 2
#define WHO_W 3

byte seq;
byte lk_kind[2], lk_rev[2], lk_who[2];
bool lk_grp[2];         /* ghost: the last message was written by a group batch */
byte q_kind, q_rev;     /* N0's queue slot (a ticket: K_HELD) */
byte gd_rev[2];         /* each name's queue guard key: its last revision (0: none) */
#define QLAST(n) ((n) == 0 -> ((q_rev > gd_rev[0]) -> q_rev : gd_rev[0]) : gd_rev[1])

/* G */
#define G_IDLE 0
#define G_READ 1        /* reading the members (any order) */
#define G_QUEUE 2       /* reading the queues (any order) */
#define G_WRITE 3       /* the batch is next */
#define G_SPLIT 4       /* SPLIT_GROUPS: N1's record is next */
#define G_HOLD 5
#define G_UNDO 6        /* SPLIT_GROUPS: N1 lost: N0's release is next */
byte gst, gcalls = GCALLS;
byte g_rd[2], g_rv[2];  /* member reads: 0 unread, 1 free, 2 held; revision */
byte g_qd[2], g_qv[2];  /* queue reads: 0 unread, 1 read; its last revision */
byte g_rev[2];          /* the revisions G holds */

/* S */
#define S_IDLE 0
#define S_READ 1        /* lease read: free; the queue read is next */
#define S_WRITE 2
#define S_HOLD 3
byte sst, scalls = SCALLS, s_name, s_ex, s_rev;

/* W */
#define W_NEW 0
#define W_QUEUED 1
#define W_TRYING 2
#define W_GRANTED 3     /* lease written, ticket delete next */
#define W_HOLD 4
#define W_DONE 5
byte wst, w_ex, w_qrev, w_rev;

/* O */
byte obs = OBS, o_first, o_min;
bool o_mid;             /* the first read is done */

#define CH(n) ('0' + (n))

#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif
#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

/* who acts on name n */
#define ACTS_G(n) ((gst == G_HOLD) || ((gst == G_SPLIT || gst == G_UNDO) && (n) == 0))
#define ACTS_S(n) (sst == S_HOLD && s_name == (n))
#define ACTS_W(n) ((wst == W_GRANTED || wst == W_HOLD) && (n) == 0)
#define W_WAITS (wst == W_QUEUED || wst == W_TRYING)

/* G2 at a write of a new holding on n by `who` */
#define FREE_FOR(n, who) ((who == WHO_G || !ACTS_G(n)) && (who == WHO_S || !ACTS_S(n)) && (who == WHO_W || !ACTS_W(n)))
inline check_g2(n, who) {
  CHECK(FREE_FOR(n, who), "VIOLATED G2: a holding written over a name another client acts on\n")
}

#ifdef NO_MEMBER_CONDITION
#define MEMBER_COND(n) (1)
#else
#define MEMBER_COND(n) (lk_rev[n] == g_rv[n])
#endif
#ifdef NO_QUEUE_GUARD
#define GUARD_COND(n) (1)
#define GUARDS 0
#else
#define GUARD_COND(n) (QLAST(n) == g_qv[n])
#define GUARDS 2
#endif

inline g_forget() {
  g_rd[0] = 0; g_rd[1] = 0; g_rv[0] = 0; g_rv[1] = 0;
  g_qd[0] = 0; g_qd[1] = 0; g_qv[0] = 0; g_qv[1] = 0
}

/* G reads member n */
inline g_read(n) {
  g_rv[n] = lk_rev[n];
  if
  :: lk_kind[n] == K_HELD ->
     g_rd[n] = 2; printf("G: reads N%c rev %d: held\n", CH(n), lk_rev[n])
  :: else -> g_rd[n] = 1; printf("G: reads N%c rev %d: free\n", CH(n), lk_rev[n])
  fi;
  if
  :: g_rd[0] != 0 && g_rd[1] != 0 ->
     if
     :: g_rd[0] == 2 || g_rd[1] == 2 ->
        printf("G: a member is held: LEASE_HELD\n");
        g_forget(); gst = G_IDLE
     :: else -> gst = G_QUEUE
     fi
  :: else -> skip
  fi
}

/* G reads member n's queue */
inline g_queue(n) {
  g_qd[n] = 1; g_qv[n] = QLAST(n);
  if
  :: n == 0 && q_kind == K_HELD ->
     printf("G: reads N0's queue: a live ticket: QUEUED\n");
     g_forget(); gst = G_IDLE
  :: else ->
     printf("G: reads N%c's queue: no ticket, last rev %d\n", CH(n), g_qv[n]);
     if :: g_qd[0] != 0 && g_qd[1] != 0 -> gst = G_WRITE :: else -> skip fi
  fi
}

/* a new holding written on n by who at seq */
inline take(n, who, grp) {
  check_g2(n, who);
  lk_kind[n] = K_HELD; lk_rev[n] = seq; lk_who[n] = who; lk_grp[n] = grp
}

proctype Group() {
end:
  do
  :: d_step {
       gst == G_IDLE && gcalls > 0 ->
       gcalls--; gst = G_READ; printf("G: AcquireGroup N0, N1\n")
     }
  :: d_step { gst == G_READ && g_rd[0] == 0 -> g_read(0) }
  :: d_step { gst == G_READ && g_rd[1] == 0 -> g_read(1) }
  :: d_step { gst == G_QUEUE && g_qd[0] == 0 -> g_queue(0) }
  :: d_step { gst == G_QUEUE && g_qd[1] == 0 -> g_queue(1) }
#ifndef SPLIT_GROUPS
  /* the batch: guards, then the records in request order */
  :: d_step {
       gst == G_WRITE ->
       if
       :: seq + GUARDS + 2 > MAXSEQ -> g_forget(); gst = G_IDLE
       :: seq + GUARDS + 2 <= MAXSEQ && MEMBER_COND(0) && MEMBER_COND(1) && GUARD_COND(0) && GUARD_COND(1) ->
          printf("G: batch: guards (expected %d, %d), N0 rev %d (expected %d), N1 rev %d (expected %d)\n",
                 g_qv[0], g_qv[1], seq + GUARDS + 1, g_rv[0], seq + GUARDS + 2, g_rv[1]);
          /* G3: no waiter of a member waits */
          CHECK(!W_WAITS, "VIOLATED G3: a group is granted while a waiter of a member waits\n");
          REACH(1, wst == W_DONE);        /* a group granted after the waiter was served */
#ifndef NO_QUEUE_GUARD
          seq++; gd_rev[0] = seq; seq++; gd_rev[1] = seq;
#endif
          seq++; take(0, WHO_G, 1); g_rev[0] = seq;
          seq++; take(1, WHO_G, 1); g_rev[1] = seq;
          g_forget(); gst = G_HOLD
       :: else ->
          REACH(2, lk_rev[0] == g_rv[0] && lk_rev[1] == g_rv[1]);  /* refused by a guard alone */
          REACH(3, lk_who[0] == WHO_S || lk_who[1] == WHO_S);      /* lost a member to a single Acquire */
          printf("G: batch refused (a member or a queue moved on): reads again\n");
          g_forget(); gst = G_READ
       fi
     }
#else
  /* the test fault split-groups: N0's record, then N1's, no guards */
  :: d_step {
       gst == G_WRITE ->
       if
       :: seq < MAXSEQ && lk_rev[0] == g_rv[0] ->
          seq++; take(0, WHO_G, 1); g_rev[0] = seq;
          printf("G: N0 written rev %d (alone)\n", seq);
          gst = G_SPLIT
       :: seq < MAXSEQ && lk_rev[0] != g_rv[0] -> g_forget(); gst = G_READ
       :: else -> g_forget(); gst = G_IDLE
       fi
     }
  :: d_step {
       gst == G_SPLIT ->
       if
       :: seq < MAXSEQ && lk_rev[1] == g_rv[1] ->
          seq++; take(1, WHO_G, 1); g_rev[1] = seq;
          printf("G: N1 written rev %d (alone)\n", seq);
          g_forget(); gst = G_HOLD
       :: else -> printf("G: N1 lost: releases N0\n"); gst = G_UNDO
       fi
     }
  :: d_step {
       gst == G_UNDO ->
       if
       :: seq < MAXSEQ && lk_rev[0] == g_rev[0] ->
          seq++; lk_kind[0] = K_END; lk_rev[0] = seq; lk_grp[0] = 0
       :: else -> skip
       fi;
       g_rev[0] = 0; g_forget(); gst = G_READ
     }
#endif
  /* ReleaseGroup: both tombstones in one batch, each over the revision held */
  :: d_step {
       gst == G_HOLD && seq + 2 <= MAXSEQ && lk_kind[0] == K_HELD && lk_rev[0] == g_rev[0] &&
       lk_kind[1] == K_HELD && lk_rev[1] == g_rev[1] ->
       seq++; lk_kind[0] = K_END; lk_rev[0] = seq; lk_grp[0] = 1;
       seq++; lk_kind[1] = K_END; lk_rev[1] = seq; lk_grp[1] = 1;
       printf("G: ReleaseGroup batch: N0 rev %d, N1 rev %d\n", seq - 1, seq);
       g_rev[0] = 0; g_rev[1] = 0; gst = G_IDLE
     }
  /* or its deadline passes: it stops acting; NATS expires each member */
  :: d_step {
       gst == G_HOLD ->
       printf("G: deadline passed: stops acting\n");
       g_rev[0] = 0; g_rev[1] = 0; gst = G_IDLE
     }
  :: gst == G_IDLE && gcalls == 0 -> break
  od
}

proctype Single() {
end:
  do
  /* read the lease of either name */
  :: d_step {
       sst == S_IDLE && scalls > 0 ->
       scalls--;
       if
       :: lk_kind[0] != K_HELD -> s_name = 0
       :: lk_kind[1] != K_HELD -> s_name = 1
       :: else -> s_name = 2
       fi;
       if
       :: s_name < 2 ->
          s_ex = lk_rev[s_name]; sst = S_READ;
          printf("S: Acquire N%c: reads rev %d: free\n", CH(s_name), s_ex)
       :: else -> s_name = 0; printf("S: Acquire: held\n")
       fi
     }
  /* then the queue */
  :: d_step {
       sst == S_READ ->
       if
       :: s_name == 0 && q_kind == K_HELD ->
          printf("S: reads N0's queue: a live ticket: LEASE_HELD\n");
          s_name = 0; s_ex = 0; sst = S_IDLE
       :: else -> printf("S: reads N%c's queue: no ticket\n", CH(s_name)); sst = S_WRITE
       fi
     }
  :: d_step {
       sst == S_WRITE ->
       if
       :: seq < MAXSEQ && lk_rev[s_name] == s_ex ->
          seq++; take(s_name, WHO_S, 0); s_rev = seq;
          printf("S: N%c written rev %d (expected %d)\n", CH(s_name), seq, s_ex);
          sst = S_HOLD
       :: else -> printf("S: write refused\n"); s_name = 0; sst = S_IDLE
       fi;
       s_ex = 0
     }
  :: d_step {
       sst == S_HOLD && seq < MAXSEQ && lk_rev[s_name] == s_rev ->
       seq++; lk_kind[s_name] = K_END; lk_rev[s_name] = seq; lk_grp[s_name] = 0;
       printf("S: releases N%c rev %d\n", CH(s_name), seq);
       s_name = 0; s_rev = 0; sst = S_IDLE
     }
  :: d_step {
       sst == S_HOLD ->
       printf("S: deadline passed: stops acting\n");
       s_name = 0; s_rev = 0; sst = S_IDLE
     }
  :: sst == S_IDLE && scalls == 0 -> break
  od
}

proctype Waiter() {
end:
  do
  /* its ticket, over the slot's revision as read */
  :: d_step {
       wst == W_NEW && q_kind != K_HELD && seq < MAXSEQ ->
       seq++; q_kind = K_HELD; q_rev = seq; w_qrev = seq;
       printf("W: ticket written in N0's queue rev %d\n", seq);
       wst = W_QUEUED
     }
  /* the head: lease read free and its ticket live (one step, as fifo.pml) */
  :: d_step {
       wst == W_QUEUED && lk_kind[0] != K_HELD && q_kind == K_HELD && q_rev == w_qrev ->
       w_ex = lk_rev[0]; wst = W_TRYING;
       printf("W: reads N0 rev %d free and its ticket live: head\n", w_ex)
     }
  :: d_step {
       wst == W_TRYING ->
       if
       :: seq < MAXSEQ && lk_rev[0] == w_ex ->
          seq++; take(0, WHO_W, 0); w_rev = seq;
          printf("W: N0 written rev %d: granted\n", seq);
          wst = W_GRANTED
       :: else -> printf("W: lease write refused\n"); wst = W_QUEUED
       fi;
       w_ex = 0
     }
  :: d_step {
       wst == W_GRANTED ->
       if
       :: seq < MAXSEQ && q_kind == K_HELD && q_rev == w_qrev ->
          seq++; q_kind = K_END; q_rev = seq; printf("W: ticket deleted rev %d\n", seq)
       :: else -> skip
       fi;
       wst = W_HOLD
     }
  :: d_step {
       wst == W_HOLD && seq < MAXSEQ && lk_rev[0] == w_rev ->
       seq++; lk_kind[0] = K_END; lk_rev[0] = seq; lk_grp[0] = 0;
       printf("W: releases N0 rev %d\n", seq);
       w_rev = 0; wst = W_DONE
     }
  :: d_step { wst == W_HOLD -> printf("W: deadline passed: stops acting\n"); w_rev = 0; wst = W_DONE }
  :: wst == W_DONE -> break
  od
}

/* O's second read of member y after reading x */
inline o_second(y) {
  printf("O: reads N%c rev %d\n", CH(y), lk_rev[y]);
  CHECK(o_min == 0 || lk_rev[y] >= o_min,
        "VIOLATED G1: an observer saw one member of a group and the state before it in the other\n");
  REACH(4, o_min != 0 && lk_rev[y] == o_min && lk_kind[y] == K_HELD);   /* both members of a group seen */
  REACH(5, o_min != 0 && lk_rev[y] == o_min && lk_kind[y] == K_END);    /* both ends of a ReleaseGroup seen */
  REACH(6, o_min != 0 && lk_rev[y] > o_min && lk_kind[y] == K_END && !lk_grp[y] && lk_kind[1 - y] == K_HELD &&
           lk_grp[1 - y]);      /* one member expired, the other still the group's record */
  o_mid = 0; o_min = 0; o_first = 0
}

proctype Observer() {
end:
  do
  :: d_step {
       !o_mid && obs > 0 ->
       obs--;
       if
       :: o_first = 0
       :: o_first = 1
       fi;
       if
       :: lk_grp[o_first] -> printf("O: reads N%c rev %d: a group's message\n", CH(o_first), lk_rev[o_first])
       :: else -> printf("O: reads N%c rev %d\n", CH(o_first), lk_rev[o_first])
       fi;
       /* the other member's write in the same batch: r + (y - x) */
       o_min = (lk_grp[o_first] -> (o_first == 0 -> lk_rev[0] + 1 : lk_rev[1] - 1) : 0);
       o_mid = 1
     }
  :: d_step { o_mid && o_first == 0 -> o_second(1) }
  :: d_step { o_mid && o_first == 1 -> o_second(0) }
  :: !o_mid && obs == 0 -> break
  od
}

/* a record nobody acts on any more expires (each member on its own) */
#define ORPHAN(n) (lk_kind[n] == K_HELD && !ACTS_G(n) && !ACTS_S(n) && !ACTS_W(n))

proctype Nature() {
end:
  do
  :: d_step {
       seq < MAXSEQ && ORPHAN(0) ->
       seq++; lk_kind[0] = K_END; lk_rev[0] = seq; lk_grp[0] = 0;
       printf("nats: N0 expires: marker rev %d\n", seq)
     }
  :: d_step {
       seq < MAXSEQ && ORPHAN(1) ->
       seq++; lk_kind[1] = K_END; lk_rev[1] = seq; lk_grp[1] = 0;
       printf("nats: N1 expires: marker rev %d\n", seq)
     }
  od
}

init {
  atomic {
    run Group(); run Single(); run Waiter(); run Observer(); run Nature()
  }
}
