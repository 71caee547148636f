/*
 * Fair (FIFO) acquisition by waiter tickets in bounded queue slots, checked
 * exhaustively by spin: the design src/lease/fifo.rs implements (see
 * model/README.md and docs/design.md section 16).
 *
 * The queue of a name is NS slots q.<name>.<slot> plus a guard key
 * q.<name>.plain. A waiter reads the queue, picks a free slot (its last
 * message is not a ticket: none, a delete tombstone or an expiry marker) and
 * writes its ticket there, expected = that slot's last revision; a lost race
 * (another waiter took the slot) reads again; with every slot live it is
 * refused (TOO_MANY_WAITERS). The ticket's place is the revision of its
 * first write: the ticket stores it (0 in that write, "this revision", like
 * a lease's token), so a refresh (a conditional rewrite that keeps it alive)
 * keeps the place. A waiter knows its ticket by slot and revision.
 *
 * The head (no live ticket with a lower place) acquires with one atomic
 * batch (ADR-50): delete its ticket, expected = its last revision, and write
 * the lease, expected = the lease's revision as read. The queue is read from
 * the stream leader, after the waiter's own ticket was written. Waiters may
 * give up; a given-up waiter's ticket expires (MaxAge marker) only after it
 * stopped waiting (its own deadline, as for leases). The holder releases
 * with a conditional tombstone. Tombstones and markers age out (the subject
 * is empty again, expected 0), lease, slot and guard alike.
 *
 * A plain Acquire (client P, no ticket) must not barge past the queue: it
 * reads the lease and the queue, and only with no live ticket writes one
 * atomic batch: a guard tombstone on q.<name>.plain with
 * Nats-Expected-Last-Subject-Sequence-Subject: q.<name>.* and expected = the
 * queue's last sequence read (no ticket written or removed since), then the
 * lease, expected = the lease revision read.
 *
 * Properties:
 *   F1 no overtaking: a queued waiter is granted only if no waiter that
 *      arrived before it (an earlier first ticket) still waits; a plain
 *      Acquire is granted only if no waiter waits at all
 *   F2 mutual exclusion: at most one client holds the lease
 *
 * Design mutations (negative controls: each must yield a counterexample):
 *   NO_HEAD_CHECK            any waiter may acquire when the lease is free
 *   ORDER_BY_LAST_REVISION   the queue is ordered by the ticket's last revision
 *   NON_ATOMIC_GRANT         delete the ticket, then write the lease: two writes
 *   NO_QUEUE_CONDITION       the plain Acquire writes the lease alone, not
 *                            conditional on the queue (no guard)
 *   STALE_QUEUE_READ         the head check reads a snapshot that may predate
 *                            the waiter's own ticket (a lagging replica)
 *   NO_SLOT_CONDITION        a ticket is written into a slot unconditionally,
 *                            so two waiters that read the same free slot both
 *                            write it and the first one's ticket is lost
 */

#define NW 3            /* waiters W0, W1, W2 */
#define NS 2            /* queue slots (--max-waiters): fewer than waiters */
#ifndef MAXSEQ
#define MAXSEQ 16       /* stream sequence bound: writes past it fail */
#endif
#ifndef REFRESHES
#define REFRESHES 1     /* ticket refreshes, all waiters together */
#endif
#ifndef GIVEUPS
#define GIVEUPS 1       /* waiters that give up, all together */
#endif

/* slot and lease subjects: what the last message is */
#define S_NONE 0        /* no message (expected 0) */
#define S_LIVE 1        /* a ticket, or a lease record */
#define S_DEL  2        /* deleted (ticket removed in a grant; lease released) */
#define S_MARK 3        /* expiry marker */

/* waiter states */
#define W_NEW     0
#define W_PICKED  1     /* it read the queue and picked a free slot; the ticket write is next */
#define W_QUEUED  2     /* its ticket is written: it waits */
#define W_TRYING  3     /* it read the queue and the lease; the batch is next */
#define W_HALF    4     /* NON_ATOMIC_GRANT: ticket deleted, lease write next */
#define W_HOLDING 5
#define W_DONE    6     /* released */
#define W_LEFT    7     /* gave up */
#define W_REFUSED 8     /* every slot was live: TOO_MANY_WAITERS */

byte seq;
byte lk_kind, lk_rev, lk_holder;                /* the lease subject */
byte sl_kind[NS], sl_rev[NS], sl_place[NS];     /* each slot's last message; a ticket's place */
byte sl_owner[NS];      /* ghost: the waiter (w + 1) whose ticket the slot holds or last held */
byte g_rev;             /* the guard key's last revision (0: no message) */
byte st[NW];                                    /* waiter states */
byte my_slot[NW], my_rev[NW];                   /* a waiter's ticket as it knows it */
byte arrival[NW];       /* ghost: revision of the waiter's first ticket (its arrival) */
byte created[NW];       /* ghost: revision of the waiter's current ticket's first write */
byte gone[NW];          /* ghost: revision that ended that ticket (0: live) */
byte refreshes = REFRESHES, giveups = GIVEUPS;
byte pst;               /* the plain client P: W_NEW, W_TRYING, W_HOLDING, W_DONE */

#define CH(w) ('0' + (w))

/* v's ticket is live in a snapshot as of sequence sn (ghost view) */
#define SHOWN(v, sn) (created[v] != 0 && created[v] <= (sn) && (gone[v] == 0 || gone[v] > (sn)))

/* the lease write of a grant: expected = the lease revision as read */
#define LEASE_COND (lk_rev == el)

/* the last sequence of any message under q.<name>.* (0: none) */
#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define QLAST MAX2(g_rev, MAX2(sl_rev[0], sl_rev[1]))
#define ANY_TICKET (sl_kind[0] == S_LIVE || sl_kind[1] == S_LIVE)
#ifdef NO_QUEUE_CONDITION
#define QUEUE_COND (1)
#else
#define QUEUE_COND (QLAST == eq)
#endif

/* the place of the ticket in slot s, as the queue orders it */
#ifdef ORDER_BY_LAST_REVISION
#define PLACE(s) sl_rev[s]
#else
#define PLACE(s) sl_place[s]
#endif

/* w's ticket is live at exactly the revision w knows */
#define HOLDS(w) (sl_kind[my_slot[w]] == S_LIVE && sl_rev[my_slot[w]] == my_rev[w])

/* still waiting: arrived, and neither granted, done nor gone */
#define WAITS(v) (st[v] == W_QUEUED || st[v] == W_TRYING || st[v] == W_HALF || \
                  ((st[v] == W_NEW || st[v] == W_PICKED) && arrival[v] != 0))

/* Reachability probes (-DPROBE=n), as in lease.pml. */
#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif

#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

/*
 * F1 and F2 at the grant to waiter w: nobody that arrived earlier still
 * waits, and nobody holds.
 */
inline check_grant(w) {
  v = 0;
  do
  :: v < NW ->
     CHECK(v == w || !(WAITS(v) && arrival[v] < arrival[w]),
           "VIOLATED F1: a waiter is granted while an earlier waiter still waits (overtaking)\n");
     CHECK(v == w || st[v] != W_HOLDING,
           "VIOLATED F2: two clients hold the lease\n");
     v++
  :: else -> break
  od;
  CHECK(pst != W_HOLDING, "VIOLATED F2: two clients hold the lease\n");
  /* probe 1: granted past an earlier waiter that gave up and whose ticket expired */
  REACH(1, (arrival[0] != 0 && arrival[0] < arrival[w] && st[0] == W_LEFT && gone[0] != 0) ||
           (arrival[1] != 0 && arrival[1] < arrival[w] && st[1] == W_LEFT && gone[1] != 0) ||
           (arrival[2] != 0 && arrival[2] < arrival[w] && st[2] == W_LEFT && gone[2] != 0));
  v = 0
}

/* The lease write of a grant to w (after its ticket was deleted). */
inline write_lease(w) {
  printf("W%c: lease written rev %d (expected %d): granted, place %d\n", CH(w), seq + 1, el, arrival[w]);
  check_grant(w);
  seq++;
  lk_kind = S_LIVE; lk_rev = seq; lk_holder = w + 1;
  st[w] = W_HOLDING
}

proctype Waiter(byte w) {
  byte ex, et, el, v, s, snap;
  bool head;
end:
  do
  /* read the queue and pick a free slot (any of them), or be refused */
  :: atomic {
       st[w] == W_NEW ->
       if
       :: sl_kind[0] != S_LIVE -> s = 0
       :: sl_kind[1] != S_LIVE -> s = 1
       :: else -> s = NS
       fi;
       d_step {
         if
         :: s < NS ->
            my_slot[w] = s; ex = sl_rev[s]; st[w] = W_PICKED;
            printf("W%c: picks free slot %d (expected %d)\n", CH(w), s, ex)
         :: else ->
            REACH(5, 1);    /* a waiter refused: every slot live */
            printf("W%c: every slot live: TOO_MANY_WAITERS\n", CH(w));
            st[w] = W_REFUSED
         fi;
         s = 0
       }
     }
  /* write the ticket (place 0: this revision), expected = the slot's last revision */
  :: d_step {
       st[w] == W_PICKED ->
       s = my_slot[w];
#ifdef NO_SLOT_CONDITION
       if
       :: seq < MAXSEQ ->
#else
       if
       :: seq < MAXSEQ && sl_rev[s] == ex ->
#endif
          seq++;
          REACH(4, ex != 0);    /* a ticket reuses a slot an earlier ticket left */
          if
          :: sl_kind[s] == S_LIVE && sl_owner[s] != 0 ->
             /* only without the slot condition: another waiter's ticket is overwritten */
             gone[sl_owner[s] - 1] = seq
          :: else -> skip
          fi;
          sl_kind[s] = S_LIVE; sl_rev[s] = seq; sl_place[s] = seq; sl_owner[s] = w + 1;
          my_rev[w] = seq; created[w] = seq; gone[w] = 0;
          if :: arrival[w] == 0 -> arrival[w] = seq :: else -> skip fi;
          printf("W%c: ticket written in slot %d rev %d\n", CH(w), s, seq);
          st[w] = W_QUEUED
       :: else ->
          printf("W%c: slot %d taken meanwhile (expected %d, now %d): reads again\n", CH(w), s, ex, sl_rev[s]);
          st[w] = W_NEW
       fi;
       ex = 0; s = 0
     }
  /* refresh the ticket: rewrite it, expected = its last revision, place kept */
  :: d_step {
       st[w] == W_QUEUED && refreshes > 0 && seq < MAXSEQ ->
       refreshes--;
       if
       :: HOLDS(w) ->
          seq++;
          printf("W%c: ticket refreshed rev %d (place %d)\n", CH(w), seq, sl_place[my_slot[w]]);
          sl_rev[my_slot[w]] = seq; my_rev[w] = seq
       :: else ->
          /* the ticket is gone (only when a mutation lets that happen): queue again */
          printf("W%c: refresh finds its ticket gone: queues again\n", CH(w));
          st[w] = W_NEW
       fi
     }
  /* give up waiting */
  :: d_step {
       (st[w] == W_QUEUED || st[w] == W_TRYING) && giveups > 0 ->
       giveups--;
       printf("W%c: gives up\n", CH(w));
       st[w] = W_LEFT; et = 0; el = 0
     }
  /*
   * Read the lease and the queue from the leader: own ticket live at its
   * revision, head, lease free? The scan reads each slot at some moment
   * after the waiter's own ticket was written (see model/README.md); the
   * model reads them all at once.
   */
  :: atomic {
       st[w] == W_QUEUED && lk_kind != S_LIVE && HOLDS(w) ->
#ifdef STALE_QUEUE_READ
       /* a snapshot as of any earlier sequence, even before the own ticket */
       snap = seq; do :: snap > 0 -> snap-- :: break od;
#else
       snap = seq;
#endif
       d_step {
         head = 1;
#ifndef NO_HEAD_CHECK
#ifdef STALE_QUEUE_READ
         v = 0;
         do
         :: v < NW ->
            if
            :: v != w && SHOWN(v, snap) && created[v] < created[w] -> head = 0
            :: else -> skip
            fi;
            v++
         :: else -> break
         od;
#else
         s = 0;
         do
         :: s < NS ->
            if
            :: s != my_slot[w] && sl_kind[s] == S_LIVE && PLACE(s) < PLACE(my_slot[w]) -> head = 0
            :: else -> skip
            fi;
            s++
         :: else -> break
         od;
#endif
#endif
         if
         :: head ->
            printf("W%c: reads the queue as of rev %d: head; lease rev %d\n", CH(w), snap, lk_rev);
            et = my_rev[w]; el = lk_rev; st[w] = W_TRYING
         :: else -> skip
         fi;
         v = 0; s = 0; snap = 0; head = 0
       }
     }
  /* the grant */
  :: d_step {
       st[w] == W_TRYING ->
       s = my_slot[w];
#ifdef NON_ATOMIC_GRANT
       /* first write: delete the ticket */
       if
       :: seq < MAXSEQ && sl_kind[s] == S_LIVE && sl_rev[s] == et ->
          seq++;
          printf("W%c: ticket deleted rev %d\n", CH(w), seq);
          sl_kind[s] = S_DEL; sl_rev[s] = seq; gone[w] = seq; st[w] = W_HALF
       :: else -> st[w] = W_QUEUED; el = 0
       fi;
       et = 0
#else
       /* one atomic batch; both expectations are checked at commit */
       if
       :: seq + 2 <= MAXSEQ && sl_kind[s] == S_LIVE && sl_rev[s] == et && LEASE_COND ->
          seq++;
          printf("W%c: batch: ticket deleted rev %d\n", CH(w), seq);
          sl_kind[s] = S_DEL; sl_rev[s] = seq; gone[w] = seq;
          write_lease(w)
       :: else ->
          printf("W%c: batch refused (ticket or lease moved on)\n", CH(w));
          st[w] = W_QUEUED
       fi;
       et = 0; el = 0
#endif
       ; s = 0
     }
#ifdef NON_ATOMIC_GRANT
  /* second write: the lease, expected = its revision as read */
  :: d_step {
       st[w] == W_HALF ->
       if
       :: seq < MAXSEQ && LEASE_COND -> write_lease(w)
       :: else ->
          printf("W%c: lease write refused (expected %d, now %d): queues again\n", CH(w), el, lk_rev);
          st[w] = W_NEW
       fi;
       el = 0
     }
#endif
  /* release: tombstone, expected = the lease's revision */
  :: d_step {
       st[w] == W_HOLDING && seq < MAXSEQ && lk_holder == w + 1 && lk_kind == S_LIVE ->
       seq++;
       printf("W%c: released rev %d\n", CH(w), seq);
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
       st[w] = W_DONE
     }
  :: st[w] == W_DONE || st[w] == W_LEFT || st[w] == W_REFUSED -> break
  od
}

/*
 * Client P: one plain Acquire (tried at most twice), then a release. It
 * reads the lease and the queue; with the lease free and no live ticket it
 * writes the guard and the lease in one batch, conditional on both.
 */
proctype Plain() {
  byte el, eq, v, tries = 2;
end:
  do
  :: d_step {
       pst == W_NEW && tries > 0 ->
       tries--;
       if
       :: lk_kind != S_LIVE && !ANY_TICKET ->
          el = lk_rev; eq = QLAST; pst = W_TRYING;
          printf("P: reads lease rev %d free, queue empty (last seq %d)\n", el, eq)
       :: else -> printf("P: Acquire -> LEASE_HELD (held or waiters queued)\n")
       fi
     }
  :: d_step {
       pst == W_TRYING ->
       if
#ifdef NO_QUEUE_CONDITION
       :: seq < MAXSEQ && LEASE_COND ->
          printf("P: lease written rev %d (expected %d, no guard): granted\n", seq + 1, el);
#else
       :: seq + 2 <= MAXSEQ && LEASE_COND && QUEUE_COND ->
          seq++;
          g_rev = seq;
          printf("P: batch: guard rev %d (queue expected %d), lease written rev %d (expected %d): granted\n", seq, eq, seq + 1, el);
#endif
          v = 0;
          do
          :: v < NW ->
             CHECK(!WAITS(v), "VIOLATED F1: a plain Acquire is granted while a waiter waits (barging)\n");
             CHECK(st[v] != W_HOLDING, "VIOLATED F2: two clients hold the lease\n");
             v++
          :: else -> break
          od;
          v = 0;
          seq++;
          lk_kind = S_LIVE; lk_rev = seq; lk_holder = NW + 1;
          pst = W_HOLDING
       :: else ->
          REACH(2, LEASE_COND && !QUEUE_COND);   /* the queue condition stopped a barging write */
          printf("P: batch refused (lease or queue moved on)\n");
          pst = W_NEW
       fi;
       el = 0; eq = 0
     }
  :: d_step {
       pst == W_HOLDING && seq < MAXSEQ ->
       seq++;
       printf("P: released rev %d\n", seq);
       REACH(3, st[0] == W_DONE && st[1] == W_DONE && st[2] == W_DONE);   /* everyone was served */
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
       pst = W_DONE
     }
  :: pst == W_DONE || (pst == W_NEW && tries == 0) -> break
  od
}

/* slot s holds the live ticket of a waiter that gave up */
#define EXPIRES(s) (sl_kind[s] == S_LIVE && sl_owner[s] != 0 && st[sl_owner[s] - 1] == W_LEFT)

/*
 * NATS: a given-up waiter's ticket expires (only after the waiter stopped
 * waiting: the timing assumption); tombstones and markers age out.
 */
proctype Nature() {
  byte s;
end:
  do
  :: d_step {
       seq < MAXSEQ && (EXPIRES(0) || EXPIRES(1)) ->
       if :: EXPIRES(0) -> s = 0 :: else -> s = 1 fi;
       seq++;
       printf("nats: W%c's ticket in slot %d expires: marker rev %d\n", CH(sl_owner[s] - 1), s, seq);
       sl_kind[s] = S_MARK; sl_rev[s] = seq; gone[sl_owner[s] - 1] = seq;
       s = 0
     }
  :: d_step {
       lk_kind == S_DEL ->
       printf("nats: lease rev %d ages out: the subject is empty\n", lk_rev);
       lk_kind = S_NONE; lk_rev = 0
     }
  :: d_step {
       (sl_kind[0] == S_DEL || sl_kind[0] == S_MARK) ->
       printf("nats: slot 0 rev %d ages out\n", sl_rev[0]);
       sl_kind[0] = S_NONE; sl_rev[0] = 0
     }
  :: d_step {
       (sl_kind[1] == S_DEL || sl_kind[1] == S_MARK) ->
       printf("nats: slot 1 rev %d ages out\n", sl_rev[1]);
       sl_kind[1] = S_NONE; sl_rev[1] = 0
     }
  :: d_step {
       g_rev != 0 ->
       printf("nats: guard rev %d ages out\n", g_rev);
       g_rev = 0
     }
  od
}

init {
  byte w;
  atomic {
    do
    :: w < NW -> run Waiter(w); w++
    :: else -> break
    od;
    run Plain();
    run Nature()
  }
}
