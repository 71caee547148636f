/*
 * Fair (FIFO) acquisition by waiter tickets in bounded queue slots, checked
 * exhaustively by spin: the design src/lease/fifo.rs implements (see
 * model/README.md and docs/design.md section 16).
 *
 * The queue of a name is NS slots q.<name>.<slot>. A waiter reads the queue,
 * picks a free slot (its last message is not a ticket: none, a delete
 * tombstone or an expiry marker) and writes its ticket there, expected =
 * that slot's last revision; a lost race (another waiter took the slot)
 * reads again; with every slot live it is refused (TOO_MANY_WAITERS). The
 * ticket's place is the revision of its first write: the ticket stores it (0
 * in that write, "this revision", like a lease's token), so a refresh (a
 * conditional rewrite that keeps it alive) keeps the place. A waiter knows
 * its ticket by slot and revision.
 *
 * A try reads the lease (the name's last message), then, only if it is
 * free, the queue from the stream leader (after the waiter's own ticket was
 * written; the model reads all slots at once). The head (own ticket live at
 * its known revision, no live ticket with a lower place) grants itself in
 * two plain conditional writes, no batch: first the LEASE, expected = the
 * lease's revision as read; only if that succeeded, the TICKET delete,
 * expected = the ticket's last revision the waiter knows. In between the
 * waiter holds the lease while its ticket is still live: nobody can take
 * the lease (it is held) and the waiters behind still see its ticket ahead
 * of theirs. The grantee releases only after the delete. The delete may
 * fail (a NATS error, FAILED_DELETES of them): the ticket then stays live
 * until it expires, like a given-up waiter's. (With a lock-delay fence the
 * code keeps one atomic batch, ticket delete + fence + lease; the model has
 * no fences. -DBATCH_GRANT lets every grant be either kind.)
 *
 * Waiters may give up; a ticket expires (MaxAge marker) only after its
 * waiter stopped waiting (gave up or was granted: its own deadline, as for
 * leases). The holder releases with a conditional tombstone. Tombstones and
 * markers age out (the subject is empty again, expected 0), lease and slot
 * alike.
 *
 * A plain Acquire (client P, no ticket) reads the lease and then the queue
 * (fresh, from the leader); with the lease free and no live ticket it writes
 * the lease alone, expected = the lease revision read. No guard key, no
 * batch. P's arrival is its queue read: a waiter that queues after it
 * arrived after P and may be served after P.
 *
 * Properties:
 *   F1 no overtaking: a queued waiter is granted only if no waiter that
 *      arrived before it (an earlier first ticket) still waits; a plain
 *      Acquire is granted only if no waiter whose ticket was written at or
 *      before P's queue read still waits
 *   F2 mutual exclusion: at most one client holds the lease
 *
 * Design mutations (negative controls: each must yield a counterexample):
 *   NO_HEAD_CHECK            any waiter may acquire when the lease is free
 *   ORDER_BY_LAST_REVISION   the queue is ordered by the ticket's last revision
 *   NON_ATOMIC_GRANT         the wrong order: delete the ticket, then write
 *                            the lease
 *   NO_QUEUE_CHECK           the plain Acquire does not read the queue
 *   STALE_QUEUE_READ         the head check reads a snapshot that may predate
 *                            the waiter's own ticket (a lagging replica)
 *   NO_SLOT_CONDITION        a ticket is written into a slot unconditionally,
 *                            so two waiters that read the same free slot both
 *                            write it and the first one's ticket is lost
 *   NO_LEASE_CONDITION       the head's lease write is unconditional
 *   DELETE_ON_LOST_GRANT     the head deletes its ticket even when its lease
 *                            write failed
 * A variant that is NOT a violation (checked by hand, see model/README.md):
 *   RELEASE_BEFORE_DELETE    the grantee may release before its ticket delete
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
#ifndef FAILED_DELETES
#define FAILED_DELETES 1        /* grantees whose ticket delete fails, all together */
#endif

/* slot and lease subjects: what the last message is */
#define S_NONE 0        /* no message (expected 0) */
#define S_LIVE 1        /* a ticket, or a lease record */
#define S_DEL  2        /* deleted (ticket removed after a grant; lease released), or a
                           ticket's expiry marker (for the queue the same) */

/* waiter states */
#define W_NEW      0
#define W_PICKED   1    /* it read the queue and picked a free slot; the ticket write is next */
#define W_QUEUED   2    /* its ticket is written: it waits */
#define W_READ     3    /* it read the lease free; the queue read is next */
#define W_TRYING   4    /* head, lease read free: the grant is next */
#define W_HALF     5    /* NON_ATOMIC_GRANT: ticket deleted, lease write next */
#define W_GRANTED  6    /* lease written, its ticket still live: the ticket delete is next */
#define W_HOLDING  7
#define W_DONE     8    /* released */
#define W_LEFT     9    /* gave up */
#define W_RELEASED 10   /* RELEASE_BEFORE_DELETE: released, the ticket delete is next */
#define W_REFUSED  11   /* every slot was live: TOO_MANY_WAITERS */

/* the plain client P */
#define P_NEW     0
#define P_READ    1     /* it read the lease free; the queue read is next */
#define P_TRYING  2     /* it read the queue with no live ticket; the lease write is next */
#define P_HOLDING 3
#define P_DONE    4

byte seq;
byte lk_kind, lk_rev, lk_holder;                /* the lease subject */
byte sl_kind[NS], sl_rev[NS], sl_place[NS];     /* each slot's last message; a ticket's place */
byte sl_owner[NS];      /* ghost: the waiter (w + 1) whose ticket the slot holds or last held */
byte st[NW];                                    /* waiter states */
byte my_slot[NW], my_rev[NW];                   /* a waiter's ticket as it knows it */
byte arrival[NW];       /* ghost: revision of the waiter's first ticket (its arrival) */
byte created[NW];       /* ghost: revision of the waiter's current ticket's first write */
byte gone[NW];          /* ghost: revision that ended that ticket (0: live) */
/*
 * created and gone are only read by STALE_QUEUE_READ's snapshot; elsewhere
 * created stays 0 and gone is 1 once the ticket ended: states that differ
 * only in these dead revisions are one state.
 */
#ifdef STALE_QUEUE_READ
#define GONE_AT seq
#else
#define GONE_AT 1
#endif
byte refreshes = REFRESHES, giveups = GIVEUPS, failed_deletes = FAILED_DELETES;
byte pst;               /* the plain client P: P_NEW ... P_DONE */
byte p_arr;             /* ghost: the stream position of P's queue read (its arrival) */
byte undeleted;         /* ghost, probes only: the grantee (w + 1) whose ticket delete failed */

#define CH(w) ('0' + (w))

/* v's ticket is live in a snapshot as of sequence sn (ghost view) */
#define SHOWN(v, sn) (created[v] != 0 && created[v] <= (sn) && (gone[v] == 0 || gone[v] > (sn)))

/* the lease write of a grant: expected = the lease revision as read */
#define LEASE_COND (lk_rev == el)
#ifdef NO_LEASE_CONDITION
#define GRANT_LEASE_COND (1)
#else
#define GRANT_LEASE_COND LEASE_COND
#endif

#define ANY_TICKET (sl_kind[0] == S_LIVE || sl_kind[1] == S_LIVE)

/* the place of the ticket in slot s, as the queue orders it */
#ifdef ORDER_BY_LAST_REVISION
#define PLACE(s) sl_rev[s]
#else
#define PLACE(s) sl_place[s]
#endif

/* w's ticket is live at exactly the revision w knows */
#define HOLDS(w) (sl_kind[my_slot[w]] == S_LIVE && sl_rev[my_slot[w]] == my_rev[w])

/* still waiting: arrived, and neither granted, done nor gone */
#define WAITS(v) (st[v] == W_QUEUED || st[v] == W_READ || st[v] == W_TRYING || st[v] == W_HALF || \
                  ((st[v] == W_NEW || st[v] == W_PICKED) && arrival[v] != 0))

/* holds the lease (a grantee whose ticket is still live, or not) */
#define HOLDER(v) (st[v] == W_GRANTED || st[v] == W_HOLDING)

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
     CHECK(v == w || !HOLDER(v),
           "VIOLATED F2: two clients hold the lease\n");
     v++
  :: else -> break
  od;
  CHECK(pst != P_HOLDING, "VIOLATED F2: two clients hold the lease\n");
  /* probe 1: granted past an earlier waiter that gave up and whose ticket expired */
  REACH(1, (arrival[0] != 0 && arrival[0] < arrival[w] && st[0] == W_LEFT && gone[0] != 0) ||
           (arrival[1] != 0 && arrival[1] < arrival[w] && st[1] == W_LEFT && gone[1] != 0) ||
           (arrival[2] != 0 && arrival[2] < arrival[w] && st[2] == W_LEFT && gone[2] != 0));
  /* probe 7: granted after the ticket a failed delete left live expired */
  REACH(7, undeleted != 0 && undeleted != w + 1 && gone[undeleted - 1] != 0);
  v = 0
}

/* The lease write of a grant to w; next: its state afterwards. */
inline write_lease(w, next) {
  printf("W%c: lease written rev %d (expected %d): granted, place %d\n", CH(w), seq + 1, el, arrival[w]);
  check_grant(w);
  seq++;
  lk_kind = S_LIVE; lk_rev = seq; lk_holder = w + 1;
  st[w] = next
}

/* The ticket delete of w (its condition checked by the caller). */
inline delete_ticket(w) {
  s = my_slot[w];
  seq++;
  sl_kind[s] = S_DEL; sl_rev[s] = seq; gone[w] = GONE_AT;
  s = 0
}

proctype Waiter(byte w) {
  byte ex, el, v, s, snap;
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
             gone[sl_owner[s] - 1] = GONE_AT
          :: else -> skip
          fi;
          sl_kind[s] = S_LIVE; sl_rev[s] = seq; sl_place[s] = seq; sl_owner[s] = w + 1;
          my_rev[w] = seq; gone[w] = 0;
#ifdef STALE_QUEUE_READ
          created[w] = seq;
#endif
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
       (st[w] == W_QUEUED || st[w] == W_READ || st[w] == W_TRYING) && giveups > 0 ->
       giveups--;
       printf("W%c: gives up\n", CH(w));
       st[w] = W_LEFT; el = 0
     }
#ifdef SPLIT_READ
  /* a try: read the lease (the name's last message) from the leader; go on only if it is free */
  :: d_step {
       st[w] == W_QUEUED && lk_kind != S_LIVE ->
       el = lk_rev; st[w] = W_READ;
       printf("W%c: reads lease rev %d: free\n", CH(w), el)
     }
#endif
  /*
   * Then read the queue from the leader: own ticket live at its revision,
   * and head? The scan reads each slot at some moment after the waiter's
   * own ticket was written (see model/README.md); the model reads them all
   * at once.
   */
  :: atomic {
#ifdef SPLIT_READ
       st[w] == W_READ ->
#else
       /* the lease read and the queue read in one step (see model/README.md) */
       st[w] == W_QUEUED && lk_kind != S_LIVE ->
       el = lk_rev;
#endif
#ifdef STALE_QUEUE_READ
       /* a snapshot as of any earlier sequence, even before the own ticket */
       snap = seq; do :: snap > 0 -> snap-- :: break od;
#else
       snap = seq;
#endif
       d_step {
         /* probe 6: another waiter holds the lease with its ticket still live */
         REACH(6, (w != 0 && st[0] == W_GRANTED) || (w != 1 && st[1] == W_GRANTED) ||
                  (w != 2 && st[2] == W_GRANTED));
         head = HOLDS(w);
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
#ifdef SPLIT_READ
            printf("W%c: reads the queue as of rev %d: head\n", CH(w), snap);
#else
            printf("W%c: reads lease rev %d free and the queue as of rev %d: head\n", CH(w), el, snap);
#endif
            st[w] = W_TRYING
         :: else ->
#ifdef SPLIT_READ
            printf("W%c: reads the queue as of rev %d: not head (or own ticket gone)\n", CH(w), snap);
#endif
            st[w] = W_QUEUED; el = 0
         fi;
         v = 0; s = 0; snap = 0; head = 0
       }
     }
  /* the grant */
  :: d_step {
       st[w] == W_TRYING ->
#ifdef NON_ATOMIC_GRANT
       /* the wrong order: first delete the ticket, then write the lease */
       if
       :: seq < MAXSEQ && HOLDS(w) ->
          printf("W%c: ticket deleted rev %d (expected %d)\n", CH(w), seq + 1, my_rev[w]);
          delete_ticket(w);
          st[w] = W_HALF
       :: else -> st[w] = W_QUEUED; el = 0
       fi
#else
       /* first write: the lease, expected = its revision as read */
       if
       :: seq < MAXSEQ && GRANT_LEASE_COND ->
          write_lease(w, W_GRANTED)
       :: else ->
          printf("W%c: lease write refused (expected %d, now %d)\n", CH(w), el, lk_rev);
#ifdef DELETE_ON_LOST_GRANT
          if
          :: seq < MAXSEQ && HOLDS(w) ->
             printf("W%c: ticket deleted rev %d all the same\n", CH(w), seq + 1);
             delete_ticket(w)
          :: else -> skip
          fi;
#endif
          st[w] = W_QUEUED
       fi
#endif
       ; el = 0
     }
#ifdef BATCH_GRANT
  /* or (with a lock-delay fence): one atomic batch, ticket delete + lease */
  :: d_step {
       st[w] == W_TRYING ->
       if
       :: seq + 2 <= MAXSEQ && HOLDS(w) && LEASE_COND ->
          printf("W%c: batch: ticket deleted rev %d\n", CH(w), seq + 1);
          delete_ticket(w);
          write_lease(w, W_HOLDING)
       :: else ->
          printf("W%c: batch refused (ticket or lease moved on)\n", CH(w));
          st[w] = W_QUEUED
       fi;
       el = 0
     }
#endif
#ifdef NON_ATOMIC_GRANT
  /* second write: the lease, expected = its revision as read */
  :: d_step {
       st[w] == W_HALF ->
       if
       :: seq < MAXSEQ && LEASE_COND -> write_lease(w, W_HOLDING)
       :: else ->
          printf("W%c: lease write refused (expected %d, now %d): queues again\n", CH(w), el, lk_rev);
          st[w] = W_NEW
       fi;
       el = 0
     }
#endif
  /* second write of a grant: the ticket delete, expected = its last known revision */
  :: d_step {
       (st[w] == W_GRANTED || st[w] == W_RELEASED) ->
       if
       :: seq < MAXSEQ && HOLDS(w) ->
          printf("W%c: ticket deleted rev %d (expected %d)\n", CH(w), seq + 1, my_rev[w]);
          delete_ticket(w)
       :: else ->
          printf("W%c: ticket delete refused (the ticket expired meanwhile)\n", CH(w))
       fi;
       if :: st[w] == W_GRANTED -> st[w] = W_HOLDING :: else -> st[w] = W_DONE fi
     }
  /* or the delete fails (a NATS error): the ticket stays live until it expires */
  :: d_step {
       (st[w] == W_GRANTED || st[w] == W_RELEASED) && failed_deletes > 0 ->
       failed_deletes--;
#ifdef PROBE
       undeleted = w + 1;
#endif
       printf("W%c: ticket delete fails (NATS error): the ticket stays until it expires\n", CH(w));
       if :: st[w] == W_GRANTED -> st[w] = W_HOLDING :: else -> st[w] = W_DONE fi
     }
  /* release: tombstone, expected = the lease's revision */
  :: d_step {
#ifdef RELEASE_BEFORE_DELETE
       (st[w] == W_HOLDING || st[w] == W_GRANTED) &&
#else
       st[w] == W_HOLDING &&
#endif
       seq < MAXSEQ && lk_holder == w + 1 && lk_kind == S_LIVE ->
       seq++;
       printf("W%c: released rev %d\n", CH(w), seq);
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
       if :: st[w] == W_HOLDING -> st[w] = W_DONE :: else -> st[w] = W_RELEASED fi
     }
  :: st[w] == W_DONE || st[w] == W_LEFT || st[w] == W_REFUSED -> break
  od
}

/* P's queue read (its arrival): no live ticket, or LEASE_HELD */
inline p_queue_read() {
#ifdef NO_QUEUE_CHECK
  p_arr = seq; pst = P_TRYING;
  printf("P: does not read the queue (stream at rev %d)\n", seq)
#else
  if
  :: !ANY_TICKET ->
     p_arr = seq; pst = P_TRYING;
     printf("P: reads the queue as of rev %d: no live ticket\n", seq)
  :: else ->
     printf("P: reads the queue: waiters queued: LEASE_HELD\n");
     pst = P_NEW; el = 0
  fi
#endif
}

/*
 * Client P: one plain Acquire (tried at most twice), then a release. It
 * reads the lease, then (the lease free) the queue; with no live ticket it
 * writes the lease alone, expected = the lease revision read.
 */
proctype Plain() {
  byte el, v, tries = 2;
end:
  do
  :: d_step {
       pst == P_NEW && tries > 0 ->
       tries--;
       if
       :: lk_kind != S_LIVE ->
          el = lk_rev; pst = P_READ;
          printf("P: reads lease rev %d: free\n", el)
       :: else -> printf("P: Acquire -> LEASE_HELD (held)\n")
       fi;
#ifndef SPLIT_READ
       /* the lease read and the queue read in one step (see model/README.md) */
       if :: pst == P_READ -> p_queue_read() :: else -> skip fi
#endif
     }
#ifdef SPLIT_READ
  :: d_step { pst == P_READ -> p_queue_read() }
#endif
  :: d_step {
       pst == P_TRYING ->
       if
       :: seq < MAXSEQ && LEASE_COND ->
          printf("P: lease written rev %d (expected %d): granted, arrived at rev %d\n", seq + 1, el, p_arr);
          v = 0;
          do
          :: v < NW ->
             CHECK(!(WAITS(v) && arrival[v] != 0 && arrival[v] <= p_arr),
                   "VIOLATED F1: a plain Acquire is granted while a waiter that queued before its queue read still waits (barging)\n");
             CHECK(!HOLDER(v), "VIOLATED F2: two clients hold the lease\n");
             v++
          :: else -> break
          od;
          v = 0;
          /* probe 2: a waiter queued between P's queue read and P's write, and P is granted */
          REACH(2, (WAITS(0) && arrival[0] > p_arr) || (WAITS(1) && arrival[1] > p_arr) ||
                   (WAITS(2) && arrival[2] > p_arr));
          seq++;
          lk_kind = S_LIVE; lk_rev = seq; lk_holder = NW + 1;
          pst = P_HOLDING
       :: else ->
          printf("P: lease write refused (expected %d, now %d)\n", el, lk_rev);
          pst = P_NEW
       fi;
       el = 0; p_arr = 0
     }
  :: d_step {
       pst == P_HOLDING && seq < MAXSEQ ->
       seq++;
       printf("P: released rev %d\n", seq);
       REACH(3, st[0] == W_DONE && st[1] == W_DONE && st[2] == W_DONE);   /* everyone was served */
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
       pst = P_DONE
     }
  :: pst == P_DONE || (pst == P_NEW && tries == 0) -> break
  od
}

/*
 * slot s holds the live ticket of a waiter that no longer waits: it gave
 * up, or it was granted (the ticket delete failed, or is still to come)
 */
#define EXPIRES(s) (sl_kind[s] == S_LIVE && sl_owner[s] != 0 && \
                    st[sl_owner[s] - 1] >= W_GRANTED && st[sl_owner[s] - 1] != W_REFUSED)

/*
 * NATS: a ticket expires only after its waiter stopped waiting (the timing
 * assumption); tombstones and markers age out.
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
       /* a marker: for the queue the same as a tombstone (one kind: fewer states) */
       sl_kind[s] = S_DEL; sl_rev[s] = seq; gone[sl_owner[s] - 1] = GONE_AT;
       s = 0
     }
  :: d_step {
       lk_kind == S_DEL ->
       printf("nats: lease rev %d ages out: the subject is empty\n", lk_rev);
       lk_kind = S_NONE; lk_rev = 0
     }
  :: d_step {
       sl_kind[0] == S_DEL ->
       printf("nats: slot 0 rev %d ages out\n", sl_rev[0]);
       sl_kind[0] = S_NONE; sl_rev[0] = 0
     }
  :: d_step {
       sl_kind[1] == S_DEL ->
       printf("nats: slot 1 rev %d ages out\n", sl_rev[1]);
       sl_kind[1] = S_NONE; sl_rev[1] = 0
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
