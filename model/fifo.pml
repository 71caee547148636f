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
 * The one-publish plain Acquire (-DONE_WRITE; a single-node R1 stream), as
 * src/ ships it (docs/design.md section 16, "One write"). A name's lease
 * record and its tickets (and group guard) sit under one filter F, the
 * line _tenure.q.<name>.*.* over the record _tenure.q.<name>.lease.holder
 * and the tickets _tenure.q.<name>.ticket.<slot>, each ticket conditional
 * on the queue _tenure.q.<name>.ticket.* alone as here, and a publish may
 * be conditional on the
 * last sequence among all subjects under F (Nats-Expected-Last-Subject-
 * Sequence with ...-Subject: F), exact and serial on R1. The replica caches
 * per name (E, free): at sequence E, E was the last sequence under F, the
 * record was free and no ticket was live. With it, P's Acquire is ONE
 * publish, the record conditional on last-under-F == E, nothing read; its
 * arrival is that write. Refused, the cache is dropped and P takes the full
 * path: one scan of F (the record, every ticket, the last sequence L under
 * F; the model reads it in one step), and with the record free and no live
 * ticket the record conditional on last-under-F == L. Either grant at g
 * sets the cache to (g, held). P's Release, with the cache at its own
 * holding's revision, is a tombstone conditional on last-under-F == that
 * revision, and sets the cache to (tombstone, free); refused (a message
 * under F since: a ticket, a refresh, a delete, a marker), the cache is
 * dropped and the release is the exact one (conditional on the record's own
 * last sequence), which sets no cache. Nothing else sets it. Every waiter
 * write and every marker is a message under F, so any of them after E makes
 * the cached publish fail; ageing out removes messages, so last-under-F may
 * fall back to E, but only once everything after E is gone, and what is
 * gone is no live ticket. P does CYCLES Acquire/Release cycles and P_TRIES
 * full-path scans in all. Waiters, tickets and the head's grant are as
 * above (the grant conditional on the record's own revision).
 *
 * The queue view (-DVIEW; run with two waiters, -DNW=2, and no plain
 * Acquire, -DPLAIN=0; -DNR replicas, waiter w on replica w % NR): each
 * replica's shared watcher reads the whole stream with one ordered consumer,
 * in sequence order, as far behind the writers as scheduling lets it fall.
 * The stream keeps one message per subject (history 1), so a message
 * superseded (rewritten, deleted, aged out) before the watcher reaches it
 * is never delivered: the consumer skips it. Each delivered message carries
 * its pending count, the messages the stream holds after it at that moment.
 * The view keeps the place of the live ticket it last saw in each slot, its
 * position (the last delivered sequence) and complete (the highest position
 * delivered with nothing pending). A waiter's try (QueueView::turn, with
 * its place and its ticket's last revision) asks the view first: NotMine (a
 * live ticket with a lower place shows) -> it sleeps; Mine (own ticket
 * shows, none lower, complete >= its revision) -> it grants itself with the
 * lease write alone, no queue read; Unknown -> it reads the queue from the
 * leader as above.
 *
 * Properties:
 *   F1 no overtaking: a queued waiter is granted only if no waiter that
 *      arrived before it (an earlier first ticket) still waits; a plain
 *      Acquire is granted only if no waiter whose ticket was written at or
 *      before P's queue read still waits (with ONE_WRITE: before P's write,
 *      one publish or full path, i.e. no ticket at all)
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
 *   VIEW_POSITION_RULE       (with VIEW) the view says Mine once its position
 *                            reaches the waiter's revision, complete or not
 *   ONE_WRITE_EXACT          (with ONE_WRITE) the one publish is conditional
 *                            on the record's own last sequence, not on F: a
 *                            ticket written after E is overtaken
 *   CHAIN_FROM_EXACT_RELEASE (with ONE_WRITE) the exact release, which proved
 *                            nothing of the tickets, also sets the cache free
 *   SCAN_NOT_F               (with ONE_WRITE) the full path writes the record
 *                            conditional on its revision as scanned and still
 *                            sets the cache; its own arrival is then the scan
 *                            (the two-read rule, which it keeps), so the
 *                            violation comes through the cache
 * Assumption removed:
 *   EXPIRE_WHILE_HOLDING     (with EXPIRY) NATS may expire a lease while its
 *                            holder still acts
 * A variant that is NOT a violation (checked by hand, see model/README.md):
 *   RELEASE_BEFORE_DELETE    the grantee may release before its ticket delete
 * Scenario switches (the real protocol must pass with them):
 *   EXPIRY                   a holder may stop acting at its deadline instead
 *                            of releasing; NATS then expires its lease
 *   BATCH_GRANT              every grant may instead be the one atomic batch
 *                            (ticket delete + lease) of a grant with a fence
 *   ONE_WRITE                the plain Acquire P as the one publish on R1
 *                            (above), with CYCLES and P_TRIES; without it, P
 *                            is the two-read Acquire
 *   SPLIT_READ, VIEW, NW, PLAIN, NR, MAXSEQ, REFRESHES, GIVEUPS, FAILED_DELETES,
 *   CYCLES, P_TRIES
 */

#ifndef NW
#define NW 3            /* waiters W0, W1, W2 (2 or 3) */
#endif
#ifndef PLAIN
#define PLAIN 1         /* 1: the plain Acquire P runs; 0: waiters only */
#endif
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
#define P_EXACT   5     /* ONE_WRITE: the filter-conditional release was refused; the exact one is next */

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
#ifdef ONE_WRITE
/*
 * The replica's cached knowledge of the name (one replica, so one cache):
 * at stream sequence c_e (0: no knowledge) c_e was the last sequence under
 * the filter F, no ticket was live, and the lease record was free (c_free)
 * or P's holding of revision c_e (!c_free).
 */
byte c_e;
bool c_free;
byte p_rev;             /* the revision of P's holding (0: none) */
#endif
byte undeleted;         /* ghost, probes only: the grantee (w + 1) whose ticket delete failed */
#ifdef PROBE
bool lk_expired;        /* ghost, probes only: the lease's last message is an expiry marker */
#endif
#ifdef VIEW
/* the replica's shared watcher and its queue view */
#ifndef NR
#define NR 1            /* replicas, each with its watcher; waiter w asks replica w % NR */
#endif
byte rd_pos[NR];        /* position: the sequence of the last message delivered (0: none yet) */
byte rd_complete[NR];   /* the highest position delivered with nothing pending after it */
byte vw_place[NR * NS]; /* the place of the live ticket the view shows in each slot (0: none) */
byte by_view;           /* ghost, probes only: the waiter (w + 1) whose try the view answered Mine */
bool overtaken;         /* ghost, probes only: a refresh superseded a ticket write the watcher had not read */
#endif

#define CH(w) ('0' + (w))

/* m(v) for some waiter v */
#if NW > 2
#define ANYW(m) (m(0) || m(1) || m(2))
#else
#define ANYW(m) (m(0) || m(1))
#endif

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
  CHECK(pst != P_HOLDING && pst != P_EXACT, "VIOLATED F2: two clients hold the lease\n");
  /* probe 1: granted past an earlier waiter that gave up and whose ticket expired */
#define LEFT_AHEAD(v) (arrival[v] != 0 && arrival[v] < arrival[w] && st[v] == W_LEFT && gone[v] != 0)
  REACH(1, ANYW(LEFT_AHEAD));
  /* probe 7: granted after the ticket a failed delete left live expired */
  REACH(7, undeleted != 0 && undeleted != w + 1 && gone[undeleted - 1] != 0);
  /* probe 10: granted over an expired holding while a later waiter waits */
#define LATER_WAITS(v) (v != w && WAITS(v) && arrival[v] > arrival[w])
  REACH(10, lk_expired && ANYW(LATER_WAITS));
  /* probe 11: a third waiter granted (every waiter had a grant) */
  REACH(11, NW > 2 && (w == 0 || st[0] == W_DONE) && (w == 1 || st[1] == W_DONE) && (w == NW - 1 || st[NW - 1] == W_DONE));
#ifdef VIEW
  /* probe 8: granted on a Mine of the view (no queue read) that was answered
     while a later waiter waited, after the watcher skipped a superseded
     ticket write */
  REACH(8, by_view == w + 1);
#endif
  v = 0
}

/* The lease write of a grant to w; next: its state afterwards. */
inline write_lease(w, next) {
  printf("W%c: lease written rev %d (expected %d): granted, place %d\n", CH(w), seq + 1, el, arrival[w]);
  check_grant(w);
  seq++;
  lk_kind = S_LIVE; lk_rev = seq; lk_holder = w + 1;
#ifdef PROBE
  lk_expired = 0;
#endif
  st[w] = next
}

/* The ticket delete of w (its condition checked by the caller). */
inline delete_ticket(w) {
  s = my_slot[w];
  seq++;
  sl_kind[s] = S_DEL; sl_rev[s] = seq; gone[w] = GONE_AT;
  s = 0
}

/*
 * The queue read from the stream leader: head = w's ticket is live at its
 * known revision and no live ticket has a lower place.
 */
inline leader_head(w) {
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
  skip
}

#ifdef VIEW
#define T_UNKNOWN 0
#define T_MINE    1
#define T_NOTMINE 2

/* the view shows a live ticket ahead of w's place in slot s; w's own ticket */
#define VR(w) ((w) % NR)                          /* w's replica */
#define POS rd_pos[VR(w)]
#define CPL rd_complete[VR(w)]
#define VP(s) vw_place[VR(w) * NS + (s)]
#define VW_AHEAD(s) (VP(s) != 0 && VP(s) < arrival[w])
#define VW_OWN (VP(0) == arrival[w] || VP(1) == arrival[w])

/* what the view must have read before it may say Mine */
#ifdef VIEW_POSITION_RULE
#define VIEW_UP_TO POS                  /* today's rule: position >= revision */
#else
#define VIEW_UP_TO CPL                  /* the fix: complete >= revision */
#endif

/*
 * QueueView::turn for w: its place is the revision of its first ticket
 * write (arrival: a waiter writes one ticket), its revision the last write
 * of that ticket (my_rev, moved on by refreshes).
 */
inline view_turn(w) {
  if
  :: POS == 0 -> vt = T_UNKNOWN                       /* not live */
  :: POS != 0 && (VW_AHEAD(0) || VW_AHEAD(1)) -> vt = T_NOTMINE
  :: POS != 0 && !(VW_AHEAD(0) || VW_AHEAD(1)) && VIEW_UP_TO >= my_rev[w] && VW_OWN -> vt = T_MINE
  :: else -> vt = T_UNKNOWN
  fi
}
#endif

proctype Waiter(byte w) {
  byte ex, el, v, s, snap;
  bool head;
#ifdef VIEW
  byte vt;      /* the view's answer: T_UNKNOWN, T_MINE, T_NOTMINE */
#endif
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
#if defined(VIEW) && defined(PROBE)
          if :: rd_pos[0] < my_rev[w] || rd_pos[NR - 1] < my_rev[w] -> overtaken = 1 :: else -> skip fi;
#endif
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
#define OTHER_GRANTED(v) (w != v && st[v] == W_GRANTED)
         REACH(6, ANYW(OTHER_GRANTED));
#ifdef VIEW
         /* first the view (QueueView::turn); only Unknown reads the queue */
         view_turn(w);
         if
         :: vt == T_MINE ->
#ifdef PROBE
#define WAITS_BEHIND(v) (v != w && WAITS(v) && arrival[v] > arrival[w])
            by_view = (overtaken && ANYW(WAITS_BEHIND) -> w + 1 : 0);
#endif
            printf("W%c: reads lease rev %d free; view at rev %d, complete at %d: Mine (no queue read)\n",
                   CH(w), el, POS, CPL);
            head = 1
         :: vt == T_NOTMINE ->
#ifdef PROBE
            by_view = 0;
#endif
            head = 0
         :: else ->
            printf("W%c: reads lease rev %d free; view at rev %d, complete at %d: Unknown\n",
                   CH(w), el, POS, CPL);
#ifdef PROBE
            by_view = 0;
            /* probe 9: the overtake of the control, answered Unknown: the
               position rule would say Mine, yet an earlier waiter waits */
#define WAITS_AHEAD(v) (v != w && WAITS(v) && arrival[v] < arrival[w])
            REACH(9, overtaken && POS >= my_rev[w] && CPL < my_rev[w] &&
                     !(VW_AHEAD(0) || VW_AHEAD(1)) && VW_OWN && ANYW(WAITS_AHEAD));
#endif
            leader_head(w)
         fi;
#else
         leader_head(w);
#endif
         if
         :: head ->
#ifdef VIEW
            if
            :: vt == T_UNKNOWN -> printf("W%c: reads the queue as of rev %d: head\n", CH(w), snap)
            :: else -> skip
            fi;
#elif defined(SPLIT_READ)
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
#ifdef VIEW
         ; vt = 0
#endif
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
          REACH(12, 1);         /* a grant by the batch */
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
#ifdef PROBE
       lk_expired = 0;
#endif
       if :: st[w] == W_HOLDING -> st[w] = W_DONE :: else -> st[w] = W_RELEASED fi
     }
#ifdef EXPIRY
  /* or the holder's deadline passes: it stops acting, and NATS may expire the lease */
  :: d_step {
       st[w] == W_HOLDING ->
       printf("W%c: deadline passed: stops acting (no release)\n", CH(w));
       st[w] = W_DONE
     }
#endif
  :: st[w] == W_DONE || st[w] == W_LEFT || st[w] == W_REFUSED -> break
  od
}

#ifndef ONE_WRITE
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
#define QUEUED_AFTER_P(v) (WAITS(v) && arrival[v] > p_arr)
          REACH(2, ANYW(QUEUED_AFTER_P));
          seq++;
          lk_kind = S_LIVE; lk_rev = seq; lk_holder = NW + 1;
#ifdef PROBE
          lk_expired = 0;
#endif
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
#define NOT_SERVED(v) (st[v] != W_DONE)
       REACH(3, !ANYW(NOT_SERVED));   /* everyone was served */
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
#ifdef PROBE
       lk_expired = 0;
#endif
       pst = P_DONE
     }
#ifdef EXPIRY
  :: d_step { pst == P_HOLDING -> printf("P: deadline passed: stops acting (no release)\n"); pst = P_DONE }
#endif
  :: pst == P_DONE || (pst == P_NEW && tries == 0) -> break
  od
}
#else /* ONE_WRITE */
#ifndef CYCLES
#define CYCLES 2        /* P's grants: Acquire/Release cycles */
#endif
#ifndef P_TRIES
#define P_TRIES 2       /* P's full-path scans, all calls together */
#endif

/* the last sequence under F: the highest of the subjects' last messages (an
   emptied subject has none: 0) */
#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define LASTF MAX2(lk_rev, MAX2(sl_rev[0], sl_rev[1]))

/* the cache says free: the one publish may be tried */
#define CACHED_FREE (c_e != 0 && c_free)

/* the one publish: conditional on last-under-F == E (ONE_WRITE_EXACT: on
   the record's own last sequence) */
#ifdef ONE_WRITE_EXACT
#define ONE_COND (lk_rev == c_e)
#else
#define ONE_COND (LASTF == c_e)
#endif

/* the full path's write: conditional on last-under-F == L, the last
   sequence of its scan (SCAN_NOT_F: on the record's revision as scanned) */
#ifdef SCAN_NOT_F
#define SCAN_COND (lk_rev == el)
#else
#define SCAN_COND (LASTF == el)
#endif

/* a live ticket written after sequence e */
#define TICKET_AFTER(e) ((sl_kind[0] == S_LIVE && sl_rev[0] > (e)) || (sl_kind[1] == S_LIVE && sl_rev[1] > (e)))

/*
 * P's grant at seq + 1 (its condition checked by the caller), arrived at
 * p_arr: F1 (no waiter that queued at or before p_arr still waits) and F2;
 * the cache becomes (the grant, held).
 */
inline p_grant() {
  v = 0;
  do
  :: v < NW ->
     CHECK(!(WAITS(v) && arrival[v] != 0 && arrival[v] <= p_arr),
           "VIOLATED F1: a plain Acquire is granted while a waiter that queued before its arrival still waits (barging)\n");
     CHECK(!HOLDER(v), "VIOLATED F2: two clients hold the lease\n");
     v++
  :: else -> break
  od;
  v = 0;
  seq++;
  lk_kind = S_LIVE; lk_rev = seq; lk_holder = NW + 1;
#ifdef PROBE
  lk_expired = 0;
#endif
  p_rev = seq; c_e = seq; c_free = 0;
  cycles--; p_arr = 0; pst = P_HOLDING
}

/* P's tombstone at seq + 1 (its condition checked by the caller) */
inline p_release() {
  seq++;
  lk_kind = S_DEL; lk_rev = seq; lk_holder = 0;
#ifdef PROBE
  lk_expired = 0;
#endif
  p_rev = 0;
  pst = (cycles > 0 -> P_NEW : P_DONE)
}

/*
 * Client P with the one-publish plain Acquire (-DONE_WRITE, R1): CYCLES
 * Acquire/Release cycles, P_TRIES full-path scans in all. With the cache
 * free at E an Acquire is one publish, the lease record conditional on
 * last-under-F == E, nothing read; refused, the cache is dropped and the
 * full path follows. The full path scans F in one step (the record, every
 * ticket, the last sequence L under F) and, the record free and no ticket
 * live, writes the record conditional on last-under-F == L. Either grant
 * sets the cache to (grant, held). The release is a tombstone conditional
 * on last-under-F == P's holding (the cache), which sets the cache to
 * (tombstone, free); refused, the cache is dropped and the release is the
 * exact one (conditional on the record's own last sequence).
 */
proctype Plain() {
  byte el, v, tries = P_TRIES, cycles = CYCLES;
end:
  do
  /* the one publish on the cached (E, free): P's arrival is this write */
  :: d_step {
       pst == P_NEW && CACHED_FREE ->
       if
       :: seq < MAXSEQ && ONE_COND ->
#ifdef ONE_WRITE_EXACT
          printf("P: one publish: lease written rev %d (expected lease rev %d): granted\n", seq + 1, c_e);
#else
          printf("P: one publish: lease written rev %d (expected last under F %d): granted\n", seq + 1, c_e);
#endif
          /* granted by the one publish, a waiter served before */
#define SERVED(v) (st[v] == W_DONE)
          REACH(13, ANYW(SERVED));
          p_arr = seq;
          p_grant()
       :: else ->
          printf("P: one publish refused (expected last under F %d, now %d): cache dropped\n", c_e, LASTF);
          REACH(14, TICKET_AFTER(c_e));     /* refused: a ticket came in after E */
          c_e = 0; c_free = 0
       fi
     }
  /* the full path: one scan of F */
  :: d_step {
       pst == P_NEW && !CACHED_FREE && tries > 0 ->
       tries--;
       if
       :: lk_kind != S_LIVE && !ANY_TICKET ->
#ifdef SCAN_NOT_F
          el = lk_rev;
#else
          el = LASTF;
#endif
          p_arr = seq; pst = P_TRYING;
          printf("P: scans F as of rev %d: lease rev %d free, no live ticket, last under F %d\n", seq, lk_rev, LASTF)
       :: else -> printf("P: scans F: lease held or waiters queued: LEASE_HELD\n")
       fi
     }
  :: d_step {
       pst == P_TRYING ->
       if
       :: seq < MAXSEQ && SCAN_COND ->
#ifdef SCAN_NOT_F
          /* arrival: the scan (the two-read rule, which this write keeps) */
          printf("P: lease written rev %d (expected lease rev %d): granted, arrived at rev %d\n", seq + 1, el, p_arr);
#else
          /* arrival: this write (nothing under F since the scan) */
          printf("P: lease written rev %d (expected last under F %d): granted\n", seq + 1, el);
          p_arr = seq;
#endif
          p_grant()
       :: else ->
          printf("P: lease write refused (expected %d, lease rev %d, last under F %d)\n", el, lk_rev, LASTF);
          p_arr = 0; pst = P_NEW
       fi;
       el = 0
     }
  /* release: tombstone conditional on last-under-F == the cached holding */
  :: d_step {
       pst == P_HOLDING && seq < MAXSEQ ->
       if
       :: c_e != 0 && c_e == p_rev && LASTF == c_e ->
          printf("P: released rev %d (expected last under F %d): cache free\n", seq + 1, c_e);
          p_release();
          c_e = seq; c_free = 1
       :: else ->
          printf("P: release refused (expected last under F %d, now %d): cache dropped\n", c_e, LASTF);
          c_e = 0; c_free = 0; pst = P_EXACT
       fi
     }
  /* the exact release: conditional on the record's own last sequence */
  :: d_step {
       pst == P_EXACT && seq < MAXSEQ ->
       if
       :: lk_rev == p_rev ->
          printf("P: released rev %d (expected %d, exact)\n", seq + 1, p_rev);
          /* the filter-conditional release refused for a ticket, the exact one used */
          REACH(15, TICKET_AFTER(p_rev));
          p_release();
#ifdef CHAIN_FROM_EXACT_RELEASE
          c_e = seq; c_free = 1
#else
          skip
#endif
       :: else ->
          printf("P: exact release refused (the lease moved on)\n");
          p_rev = 0; pst = (cycles > 0 -> P_NEW : P_DONE)
       fi
     }
#ifdef EXPIRY
  :: d_step { pst == P_HOLDING -> printf("P: deadline passed: stops acting (no release)\n"); p_rev = 0; pst = P_DONE }
#endif
  :: pst == P_DONE || (pst == P_NEW && tries == 0 && !CACHED_FREE) -> break
  od
}
#endif /* ONE_WRITE */

/*
 * slot s holds the live ticket of a waiter that no longer waits: it gave
 * up, or it was granted (the ticket delete failed, or is still to come)
 */
#define EXPIRES(s) (sl_kind[s] == S_LIVE && sl_owner[s] != 0 && \
                    st[sl_owner[s] - 1] >= W_GRANTED && st[sl_owner[s] - 1] != W_REFUSED)

#ifdef VIEW
/* a message after sequence p is still in the stream: the lease's, slot s's */
#define LK_AFTER(p) (lk_kind != S_NONE && lk_rev > (p))
#define SL_AFTER(s, p) (sl_kind[s] != S_NONE && sl_rev[s] > (p))

/*
 * The replica's shared watcher: an ordered consumer over the whole stream
 * (src/nats/consumer.rs) feeding the queue view (QueueView::apply,
 * set_position). Each step delivers the next message: the lowest sequence
 * above its position that the stream still holds (history 1: the last
 * message of each subject that has one). A message superseded before the
 * watcher reached it is gone, so the consumer skips it. The pending count
 * is the number of messages the stream holds after the delivered one at
 * that moment. The watcher takes steps whenever the scheduler lets it, so
 * it may lag any distance behind the writers.
 */
proctype Watcher(byte r) {
  byte s, next, pend;
end:
  do
  :: d_step {
       LK_AFTER(rd_pos[r]) || SL_AFTER(0, rd_pos[r]) || SL_AFTER(1, rd_pos[r]) ->
       next = 255;
       if :: LK_AFTER(rd_pos[r]) -> next = lk_rev :: else -> skip fi;
       if :: SL_AFTER(0, rd_pos[r]) && sl_rev[0] < next -> next = sl_rev[0] :: else -> skip fi;
       if :: SL_AFTER(1, rd_pos[r]) && sl_rev[1] < next -> next = sl_rev[1] :: else -> skip fi;
       pend = 0;
       if :: LK_AFTER(next) -> pend++ :: else -> skip fi;
       if :: SL_AFTER(0, next) -> pend++ :: else -> skip fi;
       if :: SL_AFTER(1, next) -> pend++ :: else -> skip fi;
       if
       :: next == rd_pos[r] + 2 ->
          printf("watcher@R%d: rev %d gone from the stream: skipped\n", r, rd_pos[r] + 1)
       :: next > rd_pos[r] + 2 ->
          printf("watcher@R%d: revs %d..%d gone from the stream: skipped\n", r, rd_pos[r] + 1, next - 1)
       :: else -> skip
       fi;
       if
       :: lk_kind != S_NONE && lk_rev == next ->
          printf("watcher@R%d: delivers lease rev %d, %d pending after it\n", r, next, pend)
       :: else ->
          if :: sl_kind[0] != S_NONE && sl_rev[0] == next -> s = 0 :: else -> s = 1 fi;
          if
          :: sl_kind[s] == S_LIVE ->
             vw_place[r * NS + s] = sl_place[s];
             printf("watcher@R%d: delivers slot %d rev %d, ticket place %d, %d pending after it\n",
                    r, s, next, sl_place[s], pend)
          :: else ->
             vw_place[r * NS + s] = 0;
             printf("watcher@R%d: delivers slot %d rev %d, ticket gone, %d pending after it\n", r, s, next, pend)
          fi
       fi;
       rd_pos[r] = next;
       if :: pend == 0 -> rd_complete[r] = next :: else -> skip fi;
       s = 0; next = 0; pend = 0
     }
  od
}
#endif

/*
 * NATS: a ticket expires only after its waiter stopped waiting (the timing
 * assumption); tombstones and markers age out.
 */
#ifdef EXPIRY
/*
 * the lease record of a holder that stopped acting (its deadline passed):
 * NATS may expire it (the timing assumption of lease.pml); with
 * EXPIRE_WHILE_HOLDING also while its holder still acts (the assumption
 * removed)
 */
#ifdef EXPIRE_WHILE_HOLDING
#define STOPPED(v) (st[v] == W_DONE || st[v] == W_HOLDING)
#define P_STOPPED (pst == P_DONE || pst == P_HOLDING || pst == P_EXACT)
#else
#define STOPPED(v) (st[v] == W_DONE)
#define P_STOPPED (pst == P_DONE)
#endif
#if PLAIN
#define LEASE_ORPHAN (lk_kind == S_LIVE && ((lk_holder <= NW && STOPPED(lk_holder - 1)) || (lk_holder == NW + 1 && P_STOPPED)))
#else
#define LEASE_ORPHAN (lk_kind == S_LIVE && STOPPED(lk_holder - 1))
#endif
#endif

proctype Nature() {
  byte s;
end:
  do
#ifdef EXPIRY
  :: d_step {
       seq < MAXSEQ && LEASE_ORPHAN ->
       seq++;
       if
       :: lk_holder <= NW -> printf("nats: W%c's lease expires: marker rev %d\n", CH(lk_holder - 1), seq)
       :: else -> printf("nats: P's lease expires: marker rev %d\n", seq)
       fi;
       lk_kind = S_DEL; lk_rev = seq; lk_holder = 0
#ifdef PROBE
       ; lk_expired = 1
#endif
     }
#endif
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
#if PLAIN
    run Plain();
#endif
#ifdef VIEW
    do
    :: w < NW + NR -> run Watcher(w - NW); w++
    :: else -> break
    od;
#endif
    run Nature()
  }
}
