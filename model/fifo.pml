/*
 * Fair (FIFO) acquisition by waiter tickets, checked exhaustively by spin.
 * Tenure does not ship fair queueing yet: this is the design the lease model
 * leaves open, checked before it is built (see model/README.md).
 *
 * Each waiter writes a ticket under its own subject of the queue
 * (q.<name>.<waiter>): a conditional publish whose stream sequence is the
 * waiter's place. The ticket stores its creation revision (0 in the first
 * write, meaning "this revision", like a lease's fencing token), so a
 * refresh (a conditional rewrite that keeps the ticket alive) keeps the
 * place. The queue is ordered by creation revision; only the head (no live
 * ticket created before its own) may acquire, and acquiring is one atomic
 * batch (ADR-50): delete my ticket, expected = its last revision, and write
 * the lease, expected = the lease's revision as read. Waiters may give up;
 * a given-up waiter's ticket expires (MaxAge marker) only after it stopped
 * waiting (its own deadline, as for leases). The holder releases with a
 * conditional tombstone; tombstones age out (the lease subject is empty).
 *
 * A plain Acquire (client P, no ticket) must not barge past the queue: it
 * reads the lease and the queue, and only with no live ticket writes the
 * lease, expected = the lease revision read and, with
 * Nats-Expected-Last-Subject-Sequence-Subject: q.<name>.*, expected = the
 * queue's last sequence read (no ticket written or removed since).
 *
 * Properties:
 *   F1 no overtaking: a queued waiter is granted only if no waiter that
 *      arrived before it (an earlier ticket) still waits; a plain Acquire is
 *      granted only if no waiter waits at all
 *   F2 mutual exclusion: at most one client holds the lease
 *
 * Design mutations (negative controls: each must yield a counterexample):
 *   NO_HEAD_CHECK            any waiter may acquire when the lease is free
 *   ORDER_BY_LAST_REVISION   the queue is ordered by the ticket's last revision
 *   NON_ATOMIC_GRANT         delete the ticket, then write the lease: two writes
 *   NO_QUEUE_CONDITION       the plain Acquire's write is not conditional on the queue
 *   STALE_QUEUE_READ         the head check reads a snapshot that may predate
 *                            the waiter's own ticket (a lagging Direct Get)
 */

#define NW 3            /* waiters W0, W1, W2 */
#ifndef MAXSEQ
#define MAXSEQ 16       /* stream sequence bound: writes past it fail */
#endif
#ifndef REFRESHES
#define REFRESHES 1     /* ticket refreshes, all waiters together */
#endif
#ifndef GIVEUPS
#define GIVEUPS 1       /* waiters that give up, all together */
#endif

/* ticket and lease subjects: what the last message is */
#define S_NONE 0        /* no message (expected 0) */
#define S_LIVE 1        /* a ticket, or a lease record */
#define S_DEL  2        /* deleted (ticket removed in a grant; lease released) */
#define S_MARK 3        /* expiry marker */

/* waiter states */
#define W_NEW     0
#define W_QUEUED  1     /* its ticket is written: it waits */
#define W_TRYING  2     /* it read the queue and the lease; the batch is next */
#define W_HALF    3     /* NON_ATOMIC_GRANT: ticket deleted, lease write next */
#define W_HOLDING 4
#define W_DONE    5     /* released */
#define W_LEFT    6     /* gave up */

byte seq;
byte lk_kind, lk_rev, lk_holder;                /* the lease subject */
byte tk_kind[NW], tk_rev[NW], tk_create[NW];    /* each waiter's ticket subject */
byte tk_gone[NW];       /* revision that deleted or expired the ticket (0: live) */
byte st[NW];                                    /* waiter states */
byte arrival[NW];       /* ghost: creation revision of the waiter's first ticket */
byte refreshes = REFRESHES, giveups = GIVEUPS;
byte pst;               /* the plain client P: W_NEW, W_TRYING, W_HOLDING, W_DONE */

#define CH(w) ('0' + (w))

/* v's ticket is live in a snapshot as of sequence sn */
#define SHOWN(v, sn) (tk_create[v] != 0 && tk_create[v] <= (sn) && (tk_gone[v] == 0 || tk_gone[v] > (sn)))

/* the lease write of a grant: expected = the lease revision as read */
#define LEASE_COND (lk_rev == el)

/* the last sequence of any message under q.<name>.* (0: none) */
#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define QLAST MAX2(tk_rev[0], MAX2(tk_rev[1], tk_rev[2]))
#define ANY_TICKET (tk_kind[0] == S_LIVE || tk_kind[1] == S_LIVE || tk_kind[2] == S_LIVE)
#ifdef NO_QUEUE_CONDITION
#define QUEUE_COND (1)
#else
#define QUEUE_COND (QLAST == eq)
#endif

#ifdef ORDER_BY_LAST_REVISION
#define PLACE(w) tk_rev[w]
#else
#define PLACE(w) tk_create[w]
#endif

/* still waiting: arrived, and neither granted, done nor gone */
#define WAITS(v) (st[v] == W_QUEUED || st[v] == W_TRYING || st[v] == W_HALF || (st[v] == W_NEW && arrival[v] != 0))

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
  REACH(1, (arrival[0] != 0 && arrival[0] < arrival[w] && tk_kind[0] == S_MARK) ||
           (arrival[1] != 0 && arrival[1] < arrival[w] && tk_kind[1] == S_MARK) ||
           (arrival[2] != 0 && arrival[2] < arrival[w] && tk_kind[2] == S_MARK));
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
  byte et, el, v, snap;
  bool head;
end:
  do
  /* enqueue: write a ticket (token 0), expected = the ticket subject's last revision */
  :: d_step {
       st[w] == W_NEW && seq < MAXSEQ && tk_kind[w] != S_LIVE ->
       seq++;
       tk_kind[w] = S_LIVE; tk_rev[w] = seq; tk_create[w] = seq; tk_gone[w] = 0;
       if :: arrival[w] == 0 -> arrival[w] = seq :: else -> skip fi;
       printf("W%c: ticket written rev %d\n", CH(w), seq);
       st[w] = W_QUEUED
     }
  /* refresh the ticket: rewrite it, expected = its last revision, place kept */
  :: d_step {
       st[w] == W_QUEUED && refreshes > 0 && seq < MAXSEQ && tk_kind[w] == S_LIVE ->
       refreshes--;
       seq++;
       printf("W%c: ticket refreshed rev %d (created %d)\n", CH(w), seq, tk_create[w]);
       tk_rev[w] = seq
     }
  /* give up waiting */
  :: d_step {
       (st[w] == W_QUEUED || st[w] == W_TRYING) && giveups > 0 ->
       giveups--;
       printf("W%c: gives up\n", CH(w));
       st[w] = W_LEFT; et = 0; el = 0
     }
  /*
   * Read the queue (one Direct Get multi_last snapshot of every ticket, as
   * of sequence snap) and the lease (from the leader): head, lease free?
   * A lagging replica may answer with an older snapshot, but never one
   * older than the waiter's own ticket (up_to_seq, or retry on the leader).
   */
  :: atomic {
       st[w] == W_QUEUED && tk_kind[w] == S_LIVE && lk_kind != S_LIVE ->
#ifdef STALE_QUEUE_READ
       snap = seq; do :: snap > 0 -> snap-- :: break od;
#else
       snap = seq; do :: snap > tk_create[w] -> snap-- :: break od;
#endif
       d_step {
         head = 1;
         v = 0;
         do
         :: v < NW ->
#ifndef NO_HEAD_CHECK
            /* v's ticket, as the snapshot shows it, was placed before w's */
            if
            :: v != w && SHOWN(v, snap) && PLACE(v) < PLACE(w) -> head = 0
            :: else -> skip
            fi;
#endif
            v++
         :: else -> break
         od;
         if
         :: head ->
            printf("W%c: reads the queue as of rev %d: head; lease rev %d\n", CH(w), snap, lk_rev);
            et = tk_rev[w]; el = lk_rev; st[w] = W_TRYING
         :: else -> skip
         fi;
         v = 0; snap = 0; head = 0
       }
     }
  /* the grant */
  :: d_step {
       st[w] == W_TRYING ->
#ifdef NON_ATOMIC_GRANT
       /* first write: delete the ticket */
       if
       :: seq < MAXSEQ && tk_kind[w] == S_LIVE && tk_rev[w] == et ->
          seq++;
          printf("W%c: ticket deleted rev %d\n", CH(w), seq);
          tk_kind[w] = S_DEL; tk_rev[w] = seq; tk_gone[w] = seq; st[w] = W_HALF
       :: else -> st[w] = W_QUEUED; el = 0
       fi;
       et = 0
#else
       /* one atomic batch; both expectations are checked at commit */
       if
       :: seq + 2 <= MAXSEQ && tk_kind[w] == S_LIVE && tk_rev[w] == et && LEASE_COND ->
          seq++;
          printf("W%c: batch: ticket deleted rev %d\n", CH(w), seq);
          tk_kind[w] = S_DEL; tk_rev[w] = seq; tk_gone[w] = seq;
          write_lease(w)
       :: else ->
          printf("W%c: batch refused (ticket or lease moved on)\n", CH(w));
          st[w] = W_QUEUED
       fi;
       et = 0; el = 0
#endif
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
  :: st[w] == W_DONE || st[w] == W_LEFT -> break
  od
}

/*
 * NATS: a given-up waiter's ticket expires (only after the waiter stopped
 * waiting: the timing assumption); the lease's tombstone ages out.
 */
/*
 * Client P: one plain Acquire (tried at most twice), then a release. It
 * reads the lease and the queue; with the lease free and no live ticket it
 * writes the lease conditional on both.
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
       :: seq < MAXSEQ && LEASE_COND && QUEUE_COND ->
          printf("P: lease written rev %d (expected %d, queue %d): granted\n", seq + 1, el, eq);
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
          printf("P: lease write refused (lease or queue moved on)\n");
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

#define EXPIRES(v) (st[v] == W_LEFT && tk_kind[v] == S_LIVE)

proctype Nature() {
  byte v;
end:
  do
  :: d_step {
       seq < MAXSEQ && (EXPIRES(0) || EXPIRES(1) || EXPIRES(2)) ->
       if
       :: EXPIRES(0) -> v = 0
       :: else -> if :: EXPIRES(1) -> v = 1 :: else -> v = 2 fi
       fi;
       seq++;
       printf("nats: W%c's ticket expires: marker rev %d\n", CH(v), seq);
       tk_kind[v] = S_MARK; tk_rev[v] = seq; tk_gone[v] = seq;
       v = 0
     }
  :: d_step {
       lk_kind == S_DEL ->
       printf("nats: lease rev %d ages out: the subject is empty\n", lk_rev);
       lk_kind = S_NONE; lk_rev = 0
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
