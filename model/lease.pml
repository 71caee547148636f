/*
 * Tenure's lease protocol (src/lease/acquire.rs, renew.rs, end.rs, cache.rs; src/nats/) for one
 * lease name, checked exhaustively by spin. model/README.md explains the
 * abstraction, the bounds and the properties; scripts/model-check.sh runs it.
 *
 * The bucket keeps the last message of the name (history 1) and the stream's
 * global sequence. Every write is a publish with
 * Nats-Expected-Last-Subject-Sequence = expected: it succeeds iff expected is
 * the subject's last sequence (0 when the subject has no message) and then
 * takes sequence seq+1. Two replicas run the handlers, each with its own
 * KeyCache. Clients send Acquire/Renew/Release; an attempt's reply may never
 * come, and the client then sends the same call again while the first
 * attempt may still run at any later point. An admin revokes (conditional
 * PURGE); NATS expires holdings (MaxAge marker) and ages markers and
 * tombstones out (the subject is empty again).
 *
 * Each handler step is one d_step holding exactly one bucket access (a read
 * of the stream leader or one conditional publish), so every interleaving of
 * bucket accesses between handlers, clients, the admin and NATS is explored.
 *
 * Protocol mutations (negative controls: each must yield a counterexample):
 *   NO_KEY_CHECK          Renew and Release accept any lease key
 *   NO_ACQUIRE_KEY_CHECK  Acquire takes any holding of the same holder name as its own
 *   UNCONDITIONAL_WRITE   publishes ignore the expected revision
 *   NO_STALE_RULE_BOUND   verify_holding drops the lower bound: token <= expected
 *   NO_CACHE_REVISION     KeyCache::get answers by name, whatever the revision
 *   NO_ACQUIRE_RETRY_PATH Acquire treats the caller's own holding as someone else's
 *   ACQUIRE_RETRY_WITHOUT_WRITE Acquire answers with the caller's own holding as
 *                         read, without renewing it (the client's deadline then
 *                         counts from a request sent after that holding's last write)
 * Assumptions removed (controls that show each assumption is needed):
 *   NO_CLIENT_DEADLINE    NATS may expire a holding while its client still acts on it
 *   REUSE_KEY             (with GIVE_UP) after a Release that got no definite
 *                         answer, the client acquires again with the same lease key
 * Scenario switches (the real protocol must pass with them):
 *   ANY_REPLICA           every attempt goes to either replica (default: a
 *                         client's calls go to its own replica, retries to either)
 *   GIVE_UP               a client may abandon one call without any answer
 */

#define NCLI 2          /* clients A, B: one holder name, each its own lease key */
#define NREP 2          /* Tenure replicas R0, R1, each with its own KeyCache */
#define NSLOT 2         /* attempts of one client in flight: a call and its retry */
#ifndef MAXSEQ
#define MAXSEQ 5        /* stream sequence bound: a write past it fails (unavailable) */
#endif
#ifndef OPS_A
#define OPS_A 3         /* calls of client A */
#endif
#ifndef OPS_B
#define OPS_B 2         /* calls of client B */
#endif
#ifndef RETRIES
#define RETRIES 1       /* unanswered attempts followed by a retry, all clients together */
#endif
#ifndef GIVEUPS
#define GIVEUPS 1       /* with GIVE_UP: calls abandoned without an answer */
#endif
#ifndef REVOKES
#define REVOKES 1       /* admin revokes */
#endif
#ifndef MAXCAS
#define MAXCAS 2        /* MAX_CAS_ATTEMPTS (5 in lease.rs) */
#endif

/* what the last message of the name is */
#define K_NONE  0       /* no message: the expected revision that succeeds is 0 */
#define K_HELD  1       /* a lease record */
#define K_DEL   2       /* release tombstone (KV-Operation: DEL) */
#define K_MARK  3       /* expiry marker (Nats-Marker-Reason: MaxAge) */
#define K_PURGE 4       /* revoke (KV-Operation: PURGE) */

/* calls */
#define ACQ 1
#define REN 2
#define REL 3

/* replies */
#define R_OK      1
#define R_HELD    2     /* LEASE_HELD */
#define R_NOTHELD 3     /* LEASE_NOT_HELD */
#define R_CONT    4     /* LEASE_HELD after MAXCAS lost races */
#define R_FAIL    5     /* the write failed: the sequence bound is reached */

/* handler phases: the next step of an attempt */
#define H_IDLE    0
#define H_ACQ_RD  1     /* try_acquire: read the last message (again) */
#define H_ACQ_WR  2     /* try_acquire: publish a new holding, expected = revision read */
#define H_ACQ_RN  3     /* try_acquire: it is the caller's holding: write_renewal */
#define H_REN_CW  4     /* renew: cache hit: write_renewal at the expected revision */
#define H_VERIFY  5     /* renew, release: verify_holding (read the leader) */
#define H_REN_WR  6     /* renew: write_renewal at the verified revision */
#define H_REL_LK  7     /* release: KeyCache::get again after a lost race */
#define H_REL_WR  8     /* release: tombstone, expected = the revision */
#define H_REPLY   9     /* the reply travels back */

/* ---- the bucket ---- */
byte seq;                               /* the stream's last sequence */
byte bk_kind, bk_rev, bk_tok, bk_key;   /* last message: kind, revision, stored token (0: this revision), key */
#define CUR_TOK (bk_tok == 0 -> bk_rev : bk_tok)
#define TOKAT(t, r) ((t) == 0 -> (r) : (t))     /* Record::token_at */

/* ---- each replica's KeyCache: name -> (revision, record) ---- */
byte c_rev[NREP], c_tok[NREP], c_key[NREP];     /* c_rev 0: nothing cached */

/* ---- clients ---- */
byte key[NCLI];         /* client c's lease key: c+1, then c+1+NCLI, ... after each switch */
byte bel[NCLI];         /* the token client c acts on (0: none) */
bool belfree[NCLI];     /* ACQUIRE_RETRY_WITHOUT_WRITE: that belief is backed by no write after the request */
bool rq_nowrite[NCLI*NSLOT];    /* ACQUIRE_RETRY_WITHOUT_WRITE: the reply is a read, not a write */
byte lastrev[NCLI];     /* the revision client c presents next (0: none) */
byte ops[NCLI];         /* calls left; also the id of the current call */
byte waiting[NCLI];     /* slot+1 of the attempt client c waits on (0: none) */
byte call_op[NCLI], call_exp[NCLI];     /* the call being sent */
byte call_tok[NCLI];    /* ghost: the token of the holding the current Acquire call created */
byte retries = RETRIES;
byte giveups = GIVEUPS;

/* ---- attempts in flight: slot i = c*NSLOT + s ---- */
byte rq_op[NCLI*NSLOT], rq_exp[NCLI*NSLOT], rq_key[NCLI*NSLOT], rq_rep[NCLI*NSLOT];
byte rq_call[NCLI*NSLOT];       /* the call it belongs to (ops at sending) */
byte rq_tok[NCLI*NSLOT];        /* the token its successful write carries */
bool rq_late[NCLI*NSLOT];       /* that holding expired before the reply arrived */

/* ---- ghosts ---- */
byte revtok;            /* the token of the revoked holding (0: none) */
byte revokes = REVOKES;

#define CH(c) ('A' + (c))

/* the caller's key check in Renew and Release (verify_holding, KeyCache lookup) */
#ifdef NO_KEY_CHECK
#define KEYOK(k) (1)
#else
#define KEYOK(k) ((k) == rq_key[i])
#endif

/* Acquire: the last message is the caller's own holding (same holder and key) */
#if defined(NO_ACQUIRE_RETRY_PATH)
#define OWN_HOLDING(k) (0)
#elif defined(NO_ACQUIRE_KEY_CHECK)
#define OWN_HOLDING(k) (1)
#else
#define OWN_HOLDING(k) ((k) == rq_key[i])
#endif

/* the condition on every write: Nats-Expected-Last-Subject-Sequence */
#ifdef UNCONDITIONAL_WRITE
#define COND(e) (1)
#else
#define COND(e) ((e) == bk_rev)
#endif

/* verify_holding's stale-revision rule: token <= expected <= revision */
#ifdef NO_STALE_RULE_BOUND
#define IN_HOLDING(e, t, rv) ((e) <= (rv))
#else
#define IN_HOLDING(e, t, rv) ((t) <= (e) && (e) <= (rv))
#endif

/* KeyCache::get(name, expected) with the caller's key */
#ifdef NO_CACHE_REVISION
#define CACHE_HIT(e) (c_rev[r] != 0 && KEYOK(c_key[r]))
#else
#define CACHE_HIT(e) (c_rev[r] != 0 && c_rev[r] == (e) && KEYOK(c_key[r]))
#endif

/*
 * The timing assumption: expiry of token t waits for the deadline of every
 * client acting on it. belfree[c]: client c acts on a reply that no write
 * after its request backs, so its deadline does not precede the expiry.
 */
#ifdef NO_CLIENT_DEADLINE
#define NOBELIEF(t) (1)
#else
#define NOBELIEF(t) ((bel[0] != (t) || belfree[0]) && (bel[1] != (t) || belfree[1]))
#endif

/*
 * Reachability probes (-DPROBE=n): each stops the search where a path of
 * the protocol is taken, to show that the checked model really takes it.
 */
#ifdef PROBE
#define REACH(n, cond) if :: PROBE == n && (cond) -> printf("REACHED probe %d\n", n); assert(0) :: else -> skip fi
#else
#define REACH(n, cond) skip
#endif

/* A violated property prints its name (the trail replay shows it), then fails. */
#define CHECK(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

/*
 * P1, new tokens: a new holding's token exceeds every revision any client
 * was given or acts on, and the revision it replaces.
 */
#define NEWTOK_OK(t) ((t) > bk_rev && (t) > lastrev[0] && (t) > lastrev[1] && (t) > bel[0] && (t) > bel[1])

/*
 * P3, no two live holdings: a client that acts on token t (its deadline has
 * not passed and no reply told it otherwise) holds the live record: the
 * name's last message is a holding with token t and that client's key. So
 * at most one client acts on a live holding. A revoked holding is exempt:
 * its holder acts until it learns, which fencing tokens cover.
 */
#define BELIEF_OK(c) (bel[c] == 0 || bel[c] == revtok || \
                      (bk_kind == K_HELD && CUR_TOK == bel[c] && bk_key == key[c]))
#define CHECK_P3 CHECK(BELIEF_OK(0) && BELIEF_OK(1), \
  "VIOLATED P3: a client acts on a holding that is not the live record (two live holdings)\n")

/* Prints what a read of the leader saw: "rev 3: held, token 3, key A". */
inline print_read() {
  if
  :: bk_kind == K_NONE -> printf("no message (expected 0)")
  :: bk_kind == K_DEL -> printf("rev %d: tombstone", bk_rev)
  :: bk_kind == K_MARK -> printf("rev %d: expiry marker", bk_rev)
  :: bk_kind == K_PURGE -> printf("rev %d: purge", bk_rev)
  :: bk_kind == K_HELD && bk_key <= NCLI -> printf("rev %d: held, token %d, key %c", bk_rev, CUR_TOK, 'A' + bk_key - 1)
  :: bk_kind == K_HELD && bk_key > NCLI -> printf("rev %d: held, token %d, key %c%d", bk_rev, CUR_TOK, 'A' + (bk_key - 1) % NCLI, (bk_key - 1) / NCLI + 1)
  fi
}

/* After a lost race: go to `next`, or answer contended after MAXCAS attempts. */
inline lost_race(next) {
  if
  :: att < MAXCAS -> att++; ph = next
  :: else -> res = R_CONT; ph = H_REPLY
  fi
}

/* try_acquire, after reading the last message (rrev, rtok, rkey, kind k) */
inline acquire_decide(k) {
  if
  :: k == K_HELD && OWN_HOLDING(rkey) ->
#ifdef ACQUIRE_RETRY_WITHOUT_WRITE
     printf("%c@R%d: Acquire finds its own holding: answers it as read, no write\n", CH(c), r);
     res = R_OK; rtok = TOKAT(rtok, rrev); rq_nowrite[i] = 1; ph = H_REPLY
#else
     ph = H_ACQ_RN              /* the caller's holding: a retry whose reply was lost */
#endif
  :: k == K_HELD && !OWN_HOLDING(rkey) ->
     /* P4: an Acquire call is never told LEASE_HELD by the holding it took itself */
     CHECK(!(rq_call[i] == ops[c] && call_tok[c] != 0 && TOKAT(rtok, rrev) == call_tok[c]),
           "VIOLATED P4: a retried Acquire is told LEASE_HELD by the holding its own first attempt took\n");
     res = R_HELD; ph = H_REPLY
  :: else -> ph = H_ACQ_WR      /* none, tombstone, marker or purge: expected = its revision */
  fi
}

/*
 * Leases::write_renewal: the record read at rv (stored token t, key k)
 * written again with the same token, conditional on rv. On a lost race: go
 * to `next` (counted), or for the cache path (next 0) on to verify_holding.
 */
inline write_renewal(rv, t, k, next) {
  if
  :: seq >= MAXSEQ -> res = R_FAIL; ph = H_REPLY
  :: seq < MAXSEQ && COND(rv) ->
     tok = TOKAT(t, rv);
     if
     :: rq_op[i] == ACQ ->
        printf("%c@R%d: Acquire finds its own holding: renewal rev %d token %d (expected %d)\n", CH(c), r, seq + 1, tok, rv)
     :: else ->
        printf("%c@R%d: renewal rev %d token %d (expected %d)\n", CH(c), r, seq + 1, tok, rv)
     fi;
     /* P2: only the key holder renews: the record replaced is the caller's holding */
     CHECK(bk_kind == K_HELD && bk_key == rq_key[i],
           "VIOLATED P2: a renewal replaced a record that is not the caller's holding\n");
     /* P1: a renewal keeps the holding's token */
     CHECK(tok == CUR_TOK, "VIOLATED P1: a renewal wrote a token other than the live holding's\n");
     REACH(1, rq_op[i] == REN && next == 0);                  /* Renew through the KeyCache */
     REACH(2, rq_op[i] == REN && rq_exp[i] < rv);             /* a stale revision accepted */
     REACH(3, rq_op[i] == ACQ && rq_call[i] == ops[c] && call_tok[c] == tok);  /* a retry gets its own holding */
     REACH(6, att > 1);                                       /* success after a lost race */
     seq++;
     bk_kind = K_HELD; bk_rev = seq; bk_tok = tok; bk_key = k;
     c_rev[r] = seq; c_tok[r] = tok; c_key[r] = k;             /* KeyCache::insert */
     res = R_OK; rrev = seq; rtok = tok; rq_tok[i] = tok; ph = H_REPLY;
     tok = 0;
     CHECK_P3
  :: else ->
     printf("%c@R%d: renewal expected %d fails: wrong last sequence\n", CH(c), r, rv);
     if
     :: next == 0 -> ph = H_VERIFY
     :: else -> lost_race(next)
     fi
  fi
}

/*
 * Leases::verify_holding: read the leader and remember the record; the
 * caller's key must match and the expected revision lie in
 * [token, current revision] (the stale-revision rule).
 */
inline verify_holding(e, next) {
  printf("%c@R%d: verify (expected %d) reads ", CH(c), r, e); print_read(); printf("\n");
  if
  :: bk_kind != K_HELD -> res = R_NOTHELD; ph = H_REPLY
  :: else ->
     rrev = bk_rev; rtok = bk_tok; rkey = bk_key;
     c_rev[r] = rrev; c_tok[r] = rtok; c_key[r] = rkey;       /* KeyCache::insert */
     if
     :: KEYOK(rkey) && IN_HOLDING(e, TOKAT(rtok, rrev), rrev) -> ph = next
     :: !KEYOK(rkey) -> REACH(8, 1); res = R_NOTHELD; ph = H_REPLY   /* another key: refused */
     :: else -> res = R_NOTHELD; ph = H_REPLY
     fi
  fi
}

/* The client's next Acquire uses a new lease key (unless REUSE_KEY). */
inline new_key() {
#ifndef REUSE_KEY
  key[c] = key[c] + NCLI
#else
  skip
#endif
}

/* The reply reaches the client only if it still waits on this attempt. */
inline reply() {
  if
  :: waiting[c] == s + 1 ->
     if
     :: res == R_OK && rq_late[i] ->
        /* the holding expired meanwhile: the reply is past the client's deadline */
        REACH(5, 1);
        if
        :: rq_op[i] == ACQ -> printf("%c: Acquire OK token %d rev %d, past its deadline: not acted on\n", CH(c), rtok, rrev)
        :: else -> printf("%c: Renew OK token %d rev %d, past its deadline: not acted on\n", CH(c), rtok, rrev)
        fi;
        lastrev[c] = rrev
     :: res == R_OK && !rq_late[i] && rq_op[i] != REL ->
        if
        :: rq_op[i] == ACQ -> printf("%c: Acquire OK token %d rev %d: acts on token %d\n", CH(c), rtok, rrev, rtok)
        :: else -> printf("%c: Renew OK token %d rev %d: acts on token %d\n", CH(c), rtok, rrev, rtok)
        fi;
        /* P1: the token a client acts on never changes under it */
        CHECK(bel[c] == 0 || bel[c] == rtok,
              "VIOLATED P1: a Renew moved the client to another token\n");
        lastrev[c] = rrev; bel[c] = rtok; belfree[c] = rq_nowrite[i]
     /* a call about another client's holding changes nothing of the caller's */
     :: res == R_NOTHELD && rq_op[i] == REN ->
        printf("%c: Renew -> LEASE_NOT_HELD: stops acting\n", CH(c));
        if :: rq_exp[i] == lastrev[c] -> bel[c] = 0; belfree[c] = 0; lastrev[c] = 0 :: else -> skip fi
     :: res == R_OK && rq_op[i] == REL ->
        printf("%c: Release OK\n", CH(c));
        if :: rq_exp[i] == lastrev[c] -> lastrev[c] = 0 :: else -> skip fi
     :: res == R_NOTHELD && rq_op[i] == REL ->
        printf("%c: Release -> LEASE_NOT_HELD\n", CH(c));
        if :: rq_exp[i] == lastrev[c] -> lastrev[c] = 0 :: else -> skip fi
     :: res == R_HELD -> printf("%c: Acquire -> LEASE_HELD\n", CH(c))
     :: res == R_CONT -> printf("%c: -> LEASE_HELD (contended)\n", CH(c))
     :: res == R_FAIL -> printf("%c: -> unavailable\n", CH(c))
     fi;
     /*
      * A Release without a definite answer (OK or LEASE_NOT_HELD) may still
      * happen later: the client leaves that holding to expire, and acquires
      * next time with a new lease key.
      */
     if
     :: rq_op[i] == REL && (res == R_CONT || res == R_FAIL) && rq_exp[i] == lastrev[c] ->
        lastrev[c] = 0;
        new_key()
     :: else -> skip
     fi;
     waiting[c] = 0; call_tok[c] = 0;
     REACH(7, bel[0] != 0 && bel[1] != 0);                    /* both act: one on the revoked token */
     CHECK_P3
  :: else -> skip       /* the client stopped waiting for this attempt: the reply is lost */
  fi
}

/*
 * Forgets what the next step no longer needs, so that states that differ
 * only in dead values are one state.
 */
inline tidy() {
  rq_rep[i] = 0;
  if :: rq_op[i] != ACQ -> rq_call[i] = 0 :: else -> skip fi;
  if
  :: ph == H_ACQ_RD || ph == H_VERIFY || ph == H_REL_LK -> rrev = 0; rtok = 0; rkey = 0
  :: ph == H_ACQ_WR -> rtok = 0; rkey = 0
  :: ph == H_REN_CW -> rrev = 0
  :: ph == H_REPLY ->
     r = 0; att = 0; rkey = 0;
     if :: res != R_OK || rq_op[i] == REL -> rrev = 0; rtok = 0 :: else -> skip fi
  :: else -> skip
  fi
}

/* One Tenure handler task for attempts in slot s of client c. */
proctype Handler(byte c; byte s) {
  byte i = c * NSLOT + s;
  byte ph, r, rrev, rtok, rkey, res, att, tok;
end:
  do
  /* Leases::try_acquire: read the last message from the leader */
  :: d_step {
       ph == H_IDLE && rq_op[i] == ACQ ->
       r = rq_rep[i]; att = 1;
       printf("%c@R%d: Acquire reads ", CH(c), r); print_read(); printf("\n");
       rrev = bk_rev; rtok = bk_tok; rkey = bk_key;
       acquire_decide(bk_kind);
       tidy()
     }
  :: d_step {
       ph == H_ACQ_RD ->
       printf("%c@R%d: Acquire reads ", CH(c), r); print_read(); printf("\n");
       rrev = bk_rev; rtok = bk_tok; rkey = bk_key;
       acquire_decide(bk_kind);
       tidy()
     }
  /* try_acquire: publish the record (token 0), expected = the revision read (0: none) */
  :: d_step {
       ph == H_ACQ_WR ->
       if
       :: seq >= MAXSEQ -> res = R_FAIL; ph = H_REPLY
       :: seq < MAXSEQ && COND(rrev) ->
          printf("%c@R%d: Acquire wrote rev %d token %d (expected %d)\n", CH(c), r, seq + 1, seq + 1, rrev);
          CHECK(bk_kind != K_HELD,
                "VIOLATED P3: an Acquire replaced a live holding with a second one\n");
          CHECK(!(rq_call[i] == ops[c] && call_tok[c] != 0 && bk_kind == K_HELD && CUR_TOK == call_tok[c]),
                "VIOLATED P4: a retried Acquire created a second holding\n");
          CHECK(NEWTOK_OK(seq + 1),
                "VIOLATED P1: a new token is not greater than every token and revision before it\n");
          REACH(4, rrev == 0 && seq > 0);                     /* expected 0 after the subject emptied */
          seq++;
          bk_kind = K_HELD; bk_rev = seq; bk_tok = 0; bk_key = rq_key[i];
          if :: rq_call[i] == ops[c] -> call_tok[c] = seq :: else -> skip fi;
          c_rev[r] = seq; c_tok[r] = 0; c_key[r] = rq_key[i];  /* KeyCache::insert */
          res = R_OK; rrev = seq; rtok = seq; rq_tok[i] = seq; ph = H_REPLY;
          CHECK_P3
       :: else ->
          printf("%c@R%d: Acquire expected %d fails: wrong last sequence\n", CH(c), r, rrev);
          lost_race(H_ACQ_RD)
       fi;
       tidy()
     }
  :: d_step { ph == H_ACQ_RN -> write_renewal(rrev, rtok, rkey, H_ACQ_RD); tidy() }

  /* Leases::renew: KeyCache::get(name, expected) */
  :: d_step {
       ph == H_IDLE && rq_op[i] == REN ->
       r = rq_rep[i]; att = 1;
       if
       :: CACHE_HIT(rq_exp[i]) ->
          printf("%c@R%d: Renew expected %d: KeyCache has rev %d\n", CH(c), r, rq_exp[i], c_rev[r]);
          rtok = c_tok[r]; rkey = c_key[r]; ph = H_REN_CW
       :: else -> ph = H_VERIFY
       fi;
       tidy()
     }
  /* a cache hit: write_renewal at the expected revision; a lost race goes on to verify */
  :: d_step { ph == H_REN_CW -> write_renewal(rq_exp[i], rtok, rkey, 0); tidy() }

  /* Leases::release: KeyCache::get(name, expected), first and after a lost race */
  :: d_step {
       (ph == H_IDLE && rq_op[i] == REL) || ph == H_REL_LK ->
       if :: ph == H_IDLE -> r = rq_rep[i]; att = 1 :: else -> skip fi;
       if
       :: CACHE_HIT(rq_exp[i]) ->
          printf("%c@R%d: Release expected %d: KeyCache has rev %d\n", CH(c), r, rq_exp[i], c_rev[r]);
          rrev = rq_exp[i]; rtok = c_tok[r]; rkey = c_key[r]; ph = H_REL_WR
       :: else -> ph = H_VERIFY
       fi;
       tidy()
     }

  /* verify_holding (Renew and Release) */
  :: d_step {
       ph == H_VERIFY ->
       if
       :: rq_op[i] == REN -> verify_holding(rq_exp[i], H_REN_WR)
       :: else -> verify_holding(rq_exp[i], H_REL_WR)
       fi;
       tidy()
     }
  :: d_step { ph == H_REN_WR -> write_renewal(rrev, rtok, rkey, H_VERIFY); tidy() }

  /* Store::tombstone, conditional on the revision */
  :: d_step {
       ph == H_REL_WR ->
       if
       :: seq >= MAXSEQ -> res = R_FAIL; ph = H_REPLY
       :: seq < MAXSEQ && COND(rrev) ->
          printf("%c@R%d: Release wrote tombstone rev %d ending token %d (expected %d)\n",
                 CH(c), r, seq + 1, TOKAT(rtok, rrev), rrev);
          /* P2: only the key holder releases: the record ended is the caller's holding */
          CHECK(bk_kind == K_HELD && bk_key == rq_key[i],
                "VIOLATED P2: a Release ended a record that is not the caller's holding\n");
          seq++;
          bk_kind = K_DEL; bk_rev = seq; bk_tok = 0; bk_key = 0;
          c_rev[r] = 0; c_tok[r] = 0; c_key[r] = 0;           /* KeyCache::remove */
          res = R_OK; ph = H_REPLY;
          CHECK_P3
       :: else ->
          printf("%c@R%d: Release expected %d fails: wrong last sequence\n", CH(c), r, rrev);
          c_rev[r] = 0; c_tok[r] = 0; c_key[r] = 0;           /* lost race: forget, verify */
          lost_race(H_REL_LK)
       fi;
       tidy()
     }

  /* the reply; the slot is free again */
  :: d_step {
       ph == H_REPLY ->
       reply();
       rq_op[i] = 0; rq_exp[i] = 0; rq_key[i] = 0; rq_rep[i] = 0; rq_call[i] = 0;
       rq_tok[i] = 0; rq_late[i] = 0; rq_nowrite[i] = 0;
       ph = H_IDLE; r = 0; rrev = 0; rtok = 0; rkey = 0; res = 0; att = 0
     }
  od
}

#define FREE(c) (rq_op[(c)*NSLOT] == 0 || rq_op[(c)*NSLOT+1] == 0)
/* another client's holding: its revision is public (WatchLease, ListLeases) */
#define FOREIGN(c) (bk_kind == K_HELD && bk_key != key[c] && bk_rev != lastrev[c])
#define CAN_CALL(c) (bel[c] == 0 || lastrev[c] != 0 || FOREIGN(c))

/* Sends client c's call through a free slot and replica rp. */
inline post(rp) {
  if
  :: rq_op[c*NSLOT] == 0 -> sl = 0
  :: else -> sl = 1
  fi;
  rq_op[c*NSLOT+sl] = call_op[c]; rq_exp[c*NSLOT+sl] = call_exp[c]; rq_key[c*NSLOT+sl] = key[c];
  rq_rep[c*NSLOT+sl] = rp; rq_call[c*NSLOT+sl] = ops[c];
  waiting[c] = sl + 1;
  if
  :: call_op[c] == ACQ && !retry -> printf("%c -> R%d: Acquire\n", CH(c), rp)
  :: call_op[c] == ACQ && retry -> printf("%c -> R%d: Acquire again (no reply to the first attempt)\n", CH(c), rp)
  :: call_op[c] == REN && !retry -> printf("%c -> R%d: Renew expected %d\n", CH(c), rp, call_exp[c])
  :: call_op[c] == REN && retry -> printf("%c -> R%d: Renew expected %d again (no reply to the first attempt)\n", CH(c), rp, call_exp[c])
  :: call_op[c] == REL && !retry -> printf("%c -> R%d: Release expected %d\n", CH(c), rp, call_exp[c])
  :: call_op[c] == REL && retry -> printf("%c -> R%d: Release expected %d again (no reply to the first attempt)\n", CH(c), rp, call_exp[c])
  fi;
  sl = 0; retry = 0; rp = 0
}

proctype Client(byte c) {
  byte sl, rp;
  bool retry;
end:
  do
  /* the client's deadline passes (send time + granted TTL - margin) */
  :: d_step {
       bel[c] != 0 ->
       printf("%c: deadline passed: stops acting on token %d\n", CH(c), bel[c]);
       bel[c] = 0; belfree[c] = 0
     }
  /* a new call */
  :: atomic {
       waiting[c] == 0 && ops[c] > 0 && FREE(c) && CAN_CALL(c) ->
       if
       :: bel[c] == 0 -> call_op[c] = ACQ; call_exp[c] = 0
       :: lastrev[c] != 0 -> call_op[c] = REN; call_exp[c] = lastrev[c]
       :: lastrev[c] != 0 -> call_op[c] = REL; call_exp[c] = lastrev[c];
          bel[c] = 0; belfree[c] = 0    /* a holder stops acting before it releases */
       /* a client without the key tries another client's holding */
       :: FOREIGN(c) -> call_op[c] = REN; call_exp[c] = bk_rev
       :: FOREIGN(c) -> call_op[c] = REL; call_exp[c] = bk_rev
       fi;
       ops[c]--; call_tok[c] = 0;
#ifdef ANY_REPLICA
       if :: rp = 0 :: rp = 1 fi;
#else
       rp = c % NREP;   /* a client's connection goes to its own replica */
#endif
       post(rp);
       /*
        * No reply to this attempt in time (the request or its reply is lost
        * or slow): the client sends the same call again, to either replica,
        * and the first attempt may still run at any later point. Sending the
        * retry now rather than later loses no behaviour: sending is seen by
        * nothing but the retry's handler, which starts whenever it likes.
        */
       if
       :: retries > 0 && FREE(c) ->
          retries--; retry = 1;
          if :: rp = 0 :: rp = 1 fi;
          post(rp)
#ifdef GIVE_UP
       /* or it gives up on the call, not knowing whether it happened */
       :: giveups > 0 ->
          giveups--; waiting[c] = 0;
          printf("%c: gives up on that call: no answer before its deadline\n", CH(c));
          if
          :: call_op[c] == REL ->
             lastrev[c] = 0;
             new_key()                  /* the next Acquire uses a new lease key */
          :: else -> skip
          fi
#endif
       :: skip
       fi;
       call_op[c] = 0; call_exp[c] = 0
     }
  :: waiting[c] == 0 && bel[c] == 0 && (ops[c] == 0 || !CAN_CALL(c)) -> break
  od
}

/*
 * Admin RevokeLease (admin.rs): read the holding, PURGE conditional on the
 * revision read. That write either purges the holding that is current at
 * its moment or changes nothing, so one step at the moment of the write has
 * the same outcomes.
 */
proctype Admin() {
end:
  d_step {
    revokes > 0 && bk_kind == K_HELD && seq < MAXSEQ ->
    revokes--;
    revtok = CUR_TOK;
    printf("admin: revoke wrote purge rev %d ending token %d\n", seq + 1, revtok);
    seq++;
    bk_kind = K_PURGE; bk_rev = seq; bk_tok = 0; bk_key = 0;
    CHECK_P3
  }
}

/*
 * NATS's clock. A holding expires only once no client acts on it: a
 * client's deadline (send time + TTL - margin) comes before the expiry of
 * any write its request caused (write time + TTL, or later). Markers and
 * tombstones age out: the subject is then empty (last sequence 0).
 */
proctype Nature() {
  byte j;
end:
  do
  :: d_step {
       bk_kind == K_HELD && seq < MAXSEQ && NOBELIEF(CUR_TOK) ->
       printf("nats: token %d expires: marker rev %d\n", CUR_TOK, seq + 1);
       /* replies still on their way about this holding arrive past their deadline */
       for (j : 0 .. NCLI*NSLOT-1) {
         if :: rq_tok[j] == CUR_TOK -> rq_late[j] = 1 :: else -> skip fi
       }
       j = 0;
       seq++;
       bk_kind = K_MARK; bk_rev = seq; bk_tok = 0; bk_key = 0;
       CHECK_P3
     }
  :: d_step {
       bk_kind == K_DEL || bk_kind == K_MARK || bk_kind == K_PURGE ->
       printf("nats: rev %d ages out: the subject is empty\n", bk_rev);
       bk_kind = K_NONE; bk_rev = 0; bk_tok = 0; bk_key = 0;
       CHECK_P3
     }
  od
}

init {
  byte c;
  atomic {
    do
    :: c < NCLI ->
       key[c] = c + 1;
       if :: c == 0 -> ops[c] = OPS_A :: else -> ops[c] = OPS_B fi;
       run Handler(c, 0); run Handler(c, 1);
       c++
    :: else -> break
    od;
    c = 0;
    do
    :: c < NCLI -> run Client(c); c++
    :: else -> break
    od;
#if REVOKES > 0
    run Admin();
#endif
    run Nature()
  }
}
