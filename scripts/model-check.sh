#!/usr/bin/env bash
# Model check of the lease protocol (model/lease.pml), fair queueing
# (model/fifo.pml), semaphores (model/sem.pml), groups (model/group.pml),
# lock-delay fences (model/delay.pml) and read-write locks (model/rwlock.pml)
# with spin; model/README.md explains the models.
#
#   scripts/model-check.sh            every check (about 10 minutes on 2 cores)
#   scripts/model-check.sh fifo NO_   only checks whose name contains a word
#   scripts/model-check.sh --install  only installs spin and gcc (CI, before
#                                     running the checks beside other apt users)
#
# Three kinds of check, each counted once in the summary:
#   verify   the real protocol, searched exhaustively within its bounds:
#            must report 0 errors and a completed search
#   control  a mutation of the protocol or a removed assumption: must find a
#            counterexample (breadth-first, so the shortest) that violates the
#            property the control targets; its trail is printed
#   probe    a path of the protocol that the real model must reach (a check
#            that the model is not vacuous)
#
# Installs spin (Debian package) and gcc when missing. Works in a temp folder;
# nothing is written to the tree. MODEL_MEMLIM (MB, default 4096) caps pan's
# memory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if ! command -v spin >/dev/null 2>&1 || ! command -v gcc >/dev/null 2>&1; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "model-check: spin or gcc is missing; install them (apt-get install spin gcc) or run as root" >&2
      exit 1
    fi
  fi
  echo "model-check: installing spin and gcc (apt-get)" >&2
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin gcc >/dev/null
fi
[ "${1:-}" = --install ] && exit 0

memlim=${MODEL_MEMLIM:-4096}
filters=("$@")
work=$(mktemp -d /tmp/tenure-model.XXXXXX)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
failures=()
start=$SECONDS

# Whether a check named $1 is selected by the command-line words.
selected() {
  [ ${#filters[@]} -eq 0 ] && return 0
  local f
  for f in "${filters[@]}"; do
    case "$1" in *"$f"*) return 0 ;; esac
  done
  return 1
}

# Each check's wall time (build and search) is printed with its verdict.
check_start=$SECONDS
pass() { passed=$((passed + 1)); echo "  PASS $1 [$((SECONDS - check_start)) s]"; }
fail() { failed=$((failed + 1)); failures+=("$1"); echo "  FAIL $1 [$((SECONDS - check_start)) s]"; }

# Generates and compiles pan for model $1 in a fresh folder $2, with spin
# flags $3 and gcc flags $4.
build() {
  local model=$1 dir=$2 sflags=$3 cflags=$4
  mkdir -p "$dir"
  cp "$root/model/$model.pml" "$dir/"
  # shellcheck disable=SC2086
  (cd "$dir" && spin -a $sflags "$model.pml" >spin.out 2>&1 && gcc -w $cflags -DMEMLIM="$memlim" -o pan pan.c) || {
    cat "$dir/spin.out" >&2
    return 1
  }
}

# One number from pan's report in file $1.
pan_stat() {
  local file=$1 what=$2
  case "$what" in
    states) awk '/states, stored/ { print $1; exit }' "$file" ;;
    transitions) awk '/transitions \(= stored\+matched\)/ { print $1; exit }' "$file" ;;
    depth) sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$file" | head -n 1 ;;
    memory) awk '/total actual memory usage/ { print $1; exit }' "$file" ;;
    time) sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$file" | head -n 1 ;;
    vector) sed -n 's/^State-vector \([0-9]*\) byte.*/\1/p' "$file" | head -n 1 ;;
  esac
}

# The printf lines of a trail replay: who did what, up to the violation.
trail() {
  local model=$1 dir=$2 sflags=$3
  # shellcheck disable=SC2086
  (cd "$dir" && spin $sflags -t "$model.pml" 2>&1) |
    sed 's/^[[:space:]]*//; s/[[:space:]][[:space:]]*/ /g; s/ $//' |
    grep -E '^([ABC](@R[01])?[ :]|[GOSW]:|admin:|nats:|clock:|watcher@R[0-9]:|W[0-9]:|P:|VIOLATED|REACHED)' |
    sed '/^VIOLATED/q; /^REACHED/q'
}

# verify NAME MODEL SPINFLAGS BOUNDS: exhaustive search, must find nothing.
verify() {
  local name=$1 model=$2 sflags=$3 bounds=$4
  selected "$name" || return 0
  check_start=$SECONDS
  local dir="$work/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
  echo "verify $name"
  echo "  bounds: $bounds"
  if ! build "$model" "$dir" "$sflags" "-O2 -DSAFETY -DCOLLAPSE"; then
    fail "$name (does not compile)"
    return
  fi
  (cd "$dir" && ./pan -n -m100000 -w25 >pan.out 2>&1) || true
  local out="$dir/pan.out"
  local errors
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -n 1)
  echo "  $(pan_stat "$out" states) states stored, $(pan_stat "$out" transitions) transitions," \
    "depth $(pan_stat "$out" depth), state vector $(pan_stat "$out" vector) bytes," \
    "$(pan_stat "$out" memory) MB, $(pan_stat "$out" time) s"
  if [ "$errors" = 0 ] && ! grep -q "Search not completed\|max search depth too small\|MEMLIM" "$out"; then
    pass "$name: 0 errors, full state space explored"
  else
    grep -E "pan:|error|Warning|MEMLIM" "$out" | head -n 5 | sed 's/^/    /'
    if [ -f "$dir/$model.pml.trail" ]; then
      echo "  counterexample:"
      trail "$model" "$dir" "$sflags" | sed 's/^/    /'
    fi
    fail "$name: errors ${errors:-?} or search incomplete"
  fi
}

# control NAME MODEL SPINFLAGS WHAT [PROPERTY]: must find a counterexample;
# with PROPERTY (e.g. F1), one that violates that property.
control() {
  local name=$1 model=$2 sflags=$3 what=$4 property=${5:-}
  selected "$name" || return 0
  check_start=$SECONDS
  local dir="$work/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
  echo "control $name: $what"
  if ! build "$model" "$dir" "$sflags" "-O1 -DSAFETY -DBFS"; then
    fail "$name (does not compile)"
    return
  fi
  (cd "$dir" && ./pan -n >pan.out 2>&1) || true
  local out="$dir/pan.out"
  if grep -q "errors: 1" "$out" && [ -f "$dir/$model.pml.trail" ]; then
    local lines
    lines=$(trail "$model" "$dir" "$sflags")
    if echo "$lines" | grep -q "^VIOLATED${property:+ $property:}"; then
      echo "  counterexample (depth $(pan_stat "$out" depth), $(pan_stat "$out" states) states searched):"
      echo "$lines" | sed 's/^/    /'
      pass "$name: counterexample found${property:+ (violates $property)}"
      return
    fi
  fi
  grep -E "errors|pan:" "$out" | head -n 3 | sed 's/^/    /'
  fail "$name: no counterexample found${property:+ violating $property}"
}

# probe NAME MODEL N WHAT [SPINFLAGS]: the real model (built with the
# optional extra flags) must reach probe N.
probe() {
  local name=$1 model=$2 n=$3 what=$4 sflags="-DPROBE=$3 ${5:-}"
  selected "$name" || return 0
  check_start=$SECONDS
  local dir="$work/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
  if ! build "$model" "$dir" "$sflags" "-O1 -DSAFETY"; then
    fail "$name (does not compile)"
    return
  fi
  (cd "$dir" && ./pan -n -m100000 >pan.out 2>&1) || true
  if [ -f "$dir/$model.pml.trail" ] && trail "$model" "$dir" "$sflags" | tail -n 1 | grep -q "^REACHED probe $n\$"; then
    pass "$name reachable: $what (depth $(pan_stat "$dir/pan.out" depth))"
  else
    fail "$name not reached: $what"
  fi
}

echo "model-check: spin $(spin -V | sed -n 's/Spin Version \([^ ]*\).*/\1/p'), pan memory limit ${memlim} MB"

# ---- the lease protocol ----
verify lease lease "" \
  "clients A (3 calls) and B (2 calls), one holder name, two keys; replicas R0, R1 with KeyCaches (each client's calls to its own replica, the retry to either); 1 unanswered attempt retried, the first still running; 1 revoke; expiry and ageing out at any time; MAX_CAS_ATTEMPTS 2; stream sequence <= 5"
verify lease-any-replica lease "-DANY_REPLICA -DOPS_A=2 -DOPS_B=2 -DREVOKES=0" \
  "as lease, but every attempt to either replica; 2 calls each; no revoke"
verify lease-give-up lease "-DGIVE_UP -DRETRIES=0" \
  "as lease, but instead of a retry 1 call abandoned without an answer (after a Release with no definite answer the client acquires later with a new key)"

control lease-NO_KEY_CHECK lease "-DNO_KEY_CHECK" "Renew and Release accept any lease key" P2
control lease-NO_ACQUIRE_KEY_CHECK lease "-DNO_ACQUIRE_KEY_CHECK" "Acquire takes a holding of the same holder name as its own, whatever the key" P2
control lease-UNCONDITIONAL_WRITE lease "-DUNCONDITIONAL_WRITE" "publishes without Nats-Expected-Last-Subject-Sequence" P3
control lease-NO_STALE_RULE_BOUND lease "-DNO_STALE_RULE_BOUND" "verify_holding accepts an expected revision below the holding's token" P1
control lease-NO_CACHE_REVISION lease "-DNO_CACHE_REVISION" "KeyCache answers by name whatever the revision asked" P1
control lease-NO_ACQUIRE_RETRY_PATH lease "-DNO_ACQUIRE_RETRY_PATH" "Acquire treats the caller's own holding as someone else's" P4
control lease-ACQUIRE_RETRY_WITHOUT_WRITE lease "-DACQUIRE_RETRY_WITHOUT_WRITE" "a retried Acquire answers with the holding it read, without renewing it" P3
control lease-NO_CLIENT_DEADLINE lease "-DNO_CLIENT_DEADLINE" "assumption removed: expiry may fire before the client's deadline" P3
control lease-REUSE_KEY lease "-DGIVE_UP -DRETRIES=0 -DREUSE_KEY" "assumption removed: after a Release with no answer the client acquires again with the same key" P3

probe lease-probe-1 lease 1 "a Renew through the KeyCache"
probe lease-probe-2 lease 2 "a Renew with a stale revision (a retry) accepted"
probe lease-probe-3 lease 3 "a retried Acquire gets its own holding, same token"
probe lease-probe-4 lease 4 "an Acquire with expected 0 after the subject emptied"
probe lease-probe-5 lease 5 "a reply that arrives after its holding expired"
probe lease-probe-6 lease 6 "a write that succeeds after a lost race"
probe lease-probe-7 lease 7 "both clients act, one on a revoked holding"
probe lease-probe-8 lease 8 "a Renew or Release with another key refused"

# ---- fair queueing ----
verify fifo fifo "-DMAXSEQ=9" \
  "waiters W0, W1, W2 in 2 queue slots (slot pick and conditional ticket write, refusal when full, head check, lease write then ticket delete, release) and a plain Acquire P (2 tries, lease write alone after its queue read); lease and queue read in one step; 1 ticket refresh; 1 waiter gives up; 1 ticket delete fails; tickets of waiters that stopped waiting expire; tombstones and markers age out; stream sequence <= 9"
verify fifo-split-read fifo "-DSPLIT_READ -DMAXSEQ=7" \
  "as fifo, but the lease read and the queue read are two steps (as the code orders them); stream sequence <= 7"

control fifo-NO_HEAD_CHECK fifo "-DNO_HEAD_CHECK" "any waiter acquires when the lease is free" F1
control fifo-ORDER_BY_LAST_REVISION fifo "-DORDER_BY_LAST_REVISION" "the queue is ordered by the ticket's last revision" F1
control fifo-NON_ATOMIC_GRANT fifo "-DNON_ATOMIC_GRANT" "the grant deletes the ticket before it writes the lease (the wrong order)" F1
control fifo-NO_QUEUE_CHECK fifo "-DNO_QUEUE_CHECK" "a plain Acquire does not read the queue" F1
control fifo-STALE_QUEUE_READ fifo "-DSTALE_QUEUE_READ" "the head check may read a snapshot older than the own ticket" F1
control fifo-NO_SLOT_CONDITION fifo "-DNO_SLOT_CONDITION" "a ticket is written into its slot unconditionally" F1
control fifo-NO_LEASE_CONDITION fifo "-DNO_LEASE_CONDITION -DSPLIT_READ" "the head's lease write is unconditional (lease and queue read in two steps)" F2
control fifo-DELETE_ON_LOST_GRANT fifo "-DDELETE_ON_LOST_GRANT" "the head deletes its ticket although its lease write failed" F1

# The probes run within the bounds of the verify runs (probe 3 within
# fifo-all's, below).
probe fifo-probe-1 fifo 1 "a grant past an earlier waiter that gave up and whose ticket expired" "-DMAXSEQ=9"
probe fifo-probe-2 fifo 2 "a waiter queues between P's queue read and P's write, and P is granted" "-DMAXSEQ=9"
probe fifo-probe-3 fifo 3 "all three waiters and P served (within fifo-all's bounds)" \
  "-DEXPIRY -DMAXSEQ=16 -DREFRESHES=0 -DGIVEUPS=0 -DFAILED_DELETES=0"
probe fifo-probe-4 fifo 4 "a ticket reuses a slot an earlier ticket left" "-DMAXSEQ=9"
probe fifo-probe-5 fifo 5 "a waiter refused because every slot is live" "-DMAXSEQ=9"
probe fifo-probe-6 fifo 6 "a waiter reads the queue while another holds the lease with its ticket still live" "-DSPLIT_READ -DMAXSEQ=7"
probe fifo-probe-7 fifo 7 "a grant after the ticket a failed delete left live expired" "-DMAXSEQ=9"

# ---- the queue view: a waiter asks the shared watcher's view first ----
# Two waiters, no plain Acquire; no run of them needs more than 11 writes,
# so the sequence bound cuts nothing.
view="-DVIEW -DNW=2 -DPLAIN=0 -DMAXSEQ=12 -DREFRESHES=3 -DGIVEUPS=2 -DFAILED_DELETES=2"
verify fifo-view fifo "$view" \
  "waiters W0, W1 in 2 slots, no plain Acquire; a lagging watcher reads the history-1 stream in order (skipping superseded messages, each delivery with its pending count) into the queue view; a try asks the view: NotMine sleeps, Mine grants with the lease write alone, Unknown reads the queue from the leader; Mine needs complete >= the ticket's last revision; 3 refreshes, 2 give-ups, 2 failed ticket deletes; stream sequence <= 12"
verify fifo-view-two-replicas fifo "-DVIEW -DNR=2 -DNW=2 -DPLAIN=0 -DMAXSEQ=12 -DREFRESHES=1 -DGIVEUPS=0 -DFAILED_DELETES=0" \
  "as fifo-view, but two replicas, each waiter asking its own replica's watcher (each lagging on its own); 1 refresh, no give-up, no failed ticket delete"
control fifo-view-POSITION_RULE fifo "$view -DVIEW_POSITION_RULE" \
  "the view says Mine once its position reaches the waiter's revision (today's rule), complete or not" F1
probe fifo-view-probe-8 fifo 8 "a grant on the view's Mine while a later waiter waits, after the watcher skipped a superseded ticket write" "$view"
probe fifo-view-probe-9 fifo 9 "the control's overtake answered Unknown: position past the revision, nobody ahead in the view, an earlier waiter waiting" "$view"

# ---- fair queueing, split: everyone served ----
# Three waiters and P with neither refresh, give-up nor failed delete: no run
# needs more than 16 writes, so the bound cuts nothing, and every run that
# serves all four is inside the verify run.
verify fifo-all fifo "-DEXPIRY -DMAXSEQ=16 -DREFRESHES=0 -DGIVEUPS=0 -DFAILED_DELETES=0" \
  "waiters W0, W1, W2 in 2 slots and the plain Acquire P (2 tries); a holder releases or stops acting at its deadline, and NATS then expires its lease; no refresh, give-up or failed delete; stream sequence <= 16 (cuts nothing)"

# ---- fair queueing, split: three waiters and no plain Acquire ----
# Without P a run of three waiters needs at most 13 writes, so the sequence
# bound cuts nothing, and a third waiter's grant is inside the verify run.
waiters="-DEXPIRY -DNW=3 -DPLAIN=0 -DMAXSEQ=13"
verify fifo-waiters fifo "$waiters" \
  "waiters W0, W1, W2 in 2 slots, no plain Acquire; a holder releases or stops acting at its deadline, and NATS then expires its lease (a marker) while the others wait; 1 refresh, 1 give-up, 1 failed ticket delete; stream sequence <= 13 (cuts nothing)"
control fifo-waiters-EXPIRE_WHILE_HOLDING fifo "$waiters -DEXPIRE_WHILE_HOLDING" \
  "assumption removed: NATS may expire a lease while its holder still acts" F2
probe fifo-waiters-probe-10 fifo 10 "a waiter granted over an expired holding while a later waiter waits" "$waiters"
probe fifo-waiters-probe-11 fifo 11 "a third waiter granted after the other two were served" "$waiters"

# ---- fair queueing: the grant with a lock-delay fence (one batch) ----
batch="-DBATCH_GRANT -DMAXSEQ=7"
verify fifo-batch-grant fifo "$batch" \
  "as fifo, but every grant is either the two writes or the one atomic batch (ticket delete + lease; the model has no fence); stream sequence <= 7"
probe fifo-batch-probe-12 fifo 12 "a grant by the batch" "$batch"

# ---- fair queueing on R1: the plain Acquire as one filter-conditional publish ----
# Two waiters and P (3 cycles); no run needs more than 15 writes, so the
# sequence bound cuts nothing.
# The one-publish plain Acquire src/ ships (docs/design.md section 16,
# "One write").
onewrite="-DONE_WRITE -DEXPIRY -DNW=2 -DCYCLES=3 -DP_TRIES=3 -DMAXSEQ=16"
verify fifo-one-write fifo "$onewrite" \
  "waiters W0, W1 in 2 slots and the plain Acquire P, 3 Acquire/Release cycles: the one publish on the cached (E, free), conditional on last-under-F == E; refused, the full path (one scan of F, the record conditional on last-under-F == L, 3 scans in all); release conditional on last-under-F == its holding, refused then exact; lease expiry; 1 refresh, 1 give-up, 1 failed ticket delete; stream sequence <= 16 (cuts nothing)"
control fifo-one-write-ONE_WRITE_EXACT fifo "$onewrite -DONE_WRITE_EXACT" \
  "the one publish is conditional on the lease record's own last sequence, not on F" F1
control fifo-one-write-CHAIN_FROM_EXACT_RELEASE fifo "$onewrite -DCHAIN_FROM_EXACT_RELEASE" \
  "the exact release (after the filter-conditional one was refused) also sets the cache free" F1
control fifo-one-write-SCAN_NOT_F fifo "$onewrite -DSCAN_NOT_F" \
  "the full path writes the record conditional on its revision as scanned, not on F, and still sets the cache" F1
probe fifo-one-write-probe-13 fifo 13 "P granted by the one publish, after a waiter was served" "$onewrite"
probe fifo-one-write-probe-14 fifo 14 "P's one publish refused: a ticket written after the cached E" "$onewrite"
probe fifo-one-write-probe-15 fifo 15 "P's filter-conditional release refused for a ticket, the exact release used" "$onewrite"

# ---- semaphores: the limit under concurrent limit changes ----
verify sem sem "" \
  "clients A (limit 1), B (limit 2), C (limit 1 or 2, chosen per call), 2 Acquires each; slot keys 1, 2 and the definition key; slots read in any order, then the definition, then the slots of a larger limit in force; lone slot writes, first-definition batches, redefinition batches with tombstones; release, deadline and expiry; tombstones and markers age out, not under an attempt that read the slot before them; stream sequence <= 24 (cuts nothing)"
control sem-NO_TOMBSTONES sem "-DNO_TOMBSTONES" "a redefinition does not tombstone the other free slots" S1
control sem-DEF_FIRST sem "-DDEF_FIRST" "the definition is read before the slots" S2
control sem-NO_DEF_WRITE sem "-DNO_DEF_WRITE" "an Acquire with another limit and no holder writes its slot alone, without redefining" S1
control sem-NO_SLOT_CONDITION sem "-DNO_SLOT_CONDITION" "the lone slot write is unconditional" S3
control sem-AGE_ANY_TIME sem "-DAGE_ANY_TIME" "assumption removed: a slot's tombstone ages out while an attempt that read the slot before it is in flight" S2
probe sem-probe-1 sem 1 "a lone slot write refused by a redefinition's tombstone (the limit changed after its reads)"
probe sem-probe-2 sem 2 "a redefinition to another limit committed"
probe sem-probe-3 sem 3 "a redefinition refused on a slot condition"
probe sem-probe-4 sem 4 "an Acquire refused LIMIT_MISMATCH"
probe sem-probe-5 sem 5 "limit 2 full: an Acquire refused LEASE_HELD"
probe sem-probe-6 sem 6 "a slot taken over expected 0 after its last message aged out"
probe sem-probe-7 sem 7 "a first definition lost to another"

# ---- semaphores with the sweep that removes unused ones ----
verify sem-sweep sem "-DSWEEP -DNC=2" \
  "as sem but clients A (limit 1) and B (limit 2) only (with C the search does not fit 4 GB), and a sweeper (2 sweeps) that reads the definition and the slots of its limit, one step each in any order, and removes the semaphore in one batch when they are free; the definition's tombstone ages out, not under an attempt that read the definition before it"
control sem-sweep-SWEEP_DEF_ONLY sem "-DSWEEP -DNC=2 -DSWEEP_DEF_ONLY" "the removal tombstones the definition alone, without a tombstone over each free slot" S1
probe sem-sweep-probe-8 sem 8 "a sweep removes the semaphore" "-DSWEEP -DNC=2"
probe sem-sweep-probe-9 sem 9 "an Acquire defines the semaphore again over a removed definition" "-DSWEEP -DNC=2"

# ---- semaphores: the head's slot on the watcher's word ----
verify sem-view sem "-DVIEW" \
  "as sem, and any attempt may instead take the definition and one free slot (revision above 0) as the stream holds them at one moment, the definition of the limit asked for, and write the slot over that revision any number of steps later; those reads hold back no ageing"
control sem-view-VIEW_ZERO sem "-DVIEW -DVIEW_ZERO" "the view vouches for a slot with no message (revision 0)" S1
control sem-view-VIEW_TORN sem "-DVIEW -DVIEW_TORN" "the view's definition is from an earlier moment than its slot" S2
probe sem-view-probe-10 sem 10 "a slot taken on the view's word" "-DVIEW"
verify sem-view-sweep sem "-DVIEW -DSWEEP -DNC=2" \
  "as sem-sweep, with the view's path of sem-view"

# ---- groups: one atomic batch against single Acquires ----
verify group group "" \
  "group client G (AcquireGroup N0+N1: member reads, queue reads, one batch of guards and records; ReleaseGroup batch; deadline, then per-member expiry), 2 calls; single client S (either name, reads the queue), 2 calls; waiter W on N0 (ticket, lease, ticket delete); observer O, 2 observations of both members; stream sequence <= 20 (cuts nothing)"
control group-SPLIT_GROUPS group "-DSPLIT_GROUPS" "the members written as separate publishes (the split-groups test fault)" G1
control group-NO_MEMBER_CONDITION group "-DNO_MEMBER_CONDITION" "a member's record without its expected revision" G2
control group-NO_QUEUE_GUARD group "-DNO_QUEUE_GUARD" "the batch without the queue guards" G3
probe group-probe-1 group 1 "a group granted after the waiter was served"
probe group-probe-2 group 2 "a group batch refused by a queue guard alone"
probe group-probe-3 group 3 "a group batch lost to a single Acquire of a member"
probe group-probe-4 group 4 "an observer sees both members of a group"
probe group-probe-5 group 5 "an observer sees both ends of a ReleaseGroup"
probe group-probe-6 group 6 "an observer sees one member expired, the other still the group's"

# ---- lock-delay fences and the batch grant ----
verify delay delay "" \
  "one name, its fence and one queue slot; A (lock delay) 2 Acquires, B (none) 2 Acquires, a waiter W (either) whose grant is the batch ticket delete + fence + lease; release (fence delete + tombstone), 1 revoke (fence delete + purge); expiry after the holder's deadline; tombstones and purges age into markers and markers age out, not before the delay has passed; stream sequence <= 12"
control delay-NO_FENCE delay "-DNO_FENCE" "a holding with a lock delay is written without its fence" D1
control delay-FENCE_APART delay "-DFENCE_APART" "the fence is a publish of its own after the record (and may fail)" D1
control delay-NO_FENCE_DELETE delay "-DNO_FENCE_DELETE" "a release of a delayed holding leaves its fence" D2
control delay-BATCH_TICKET_FIRST delay "-DBATCH_TICKET_FIRST" "the waiter deletes its ticket alone before the fence + lease batch" D4
control delay-DELAY_OVER_MARKER_TTL delay "-DDELAY_OVER_MARKER_TTL" "assumption removed: a lock delay longer than the marker TTL" D1
control delay-AGE_ANY_TIME delay "-DAGE_ANY_TIME" "assumption removed: the name's last message ages out under an attempt that read it before" D2
probe delay-probe-1 delay 1 "an Acquire refused LOCK_DELAY after an expiry"
probe delay-probe-2 delay 2 "an Acquire refused LOCK_DELAY after a revoke"
probe delay-probe-3 delay 3 "the waiter goes on once the delay has passed"
probe delay-probe-4 delay 4 "the waiter's batch deletes an older fence"
probe delay-probe-5 delay 5 "the waiter's batch writes its own fence"
probe delay-probe-6 delay 6 "an Acquire of an empty name deletes a fence that outlived the marker"

# ---- read-write locks: the filter condition, modes, downgrade and the queue ----
verify rwlock rwlock "" \
  "slot keys S1, S2 (N = 2) and the definition (defined before, never changed) under one filter F; A (EXCLUSIVE) 2 Acquires, B (SHARED) 1, C (SHARED or EXCLUSIVE, chosen per call) 1; the scan reads one message at a time in revision order, each at its own moment, L the last revision read; the record into a free slot read, filter-conditional on L, 2 attempts; a call without a ticket only into an empty queue, then a ticket at the tail, only the head takes; 1 renewal and 1 downgrade (own slot's revision); release, deadline and expiry; tombstones and markers age out at any time; stream sequence <= 11 (cuts nothing)"
control rwlock-EXACT_COND rwlock "-DEXACT_COND" "the Acquire's write is conditional on its own slot's revision as read, not on the filter" RW1
control rwlock-NO_MODE_CHECK rwlock "-DNO_MODE_CHECK" "a SHARED Acquire counts an EXCLUSIVE record as a shared one" RW1
control rwlock-DOWNGRADE_OLD_TOKEN rwlock "-DDOWNGRADE_OLD_TOKEN" "the downgrade keeps the EXCLUSIVE grant's token" RW2
control rwlock-BARGE rwlock "-DBARGE" "an Acquire without a ticket does not read the queue" RW3
control rwlock-SCAN_ANY_ORDER rwlock "-DSCAN_ANY_ORDER" "the scan reads each slot once, in any order (concurrent gets), L the largest revision read" RW1
probe rwlock-probe-1 rwlock 1 "two SHARED holders at once"
probe rwlock-probe-2 rwlock 2 "a downgrade"
probe rwlock-probe-3 rwlock 3 "a SHARED grant while a downgraded holder holds"
probe rwlock-probe-4 rwlock 4 "a filter-conditional write refused by a write to another slot"
probe rwlock-probe-5 rwlock 5 "an EXCLUSIVE waiter granted with a SHARED waiter queued behind it"
probe rwlock-probe-6 rwlock 6 "an Acquire without a ticket refused by the queue alone"
probe rwlock-probe-7 rwlock 7 "a scan reads a slot twice (a message written during the scan)"
probe rwlock-probe-8 rwlock 8 "a SHARED Acquire finds N SHARED records held (not compatible)"

echo "model-check: total $((SECONDS - start)) s"
if [ "$failed" -gt 0 ]; then
  printf 'model-check: failed: %s\n' "${failures[@]}"
fi
echo "model-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
