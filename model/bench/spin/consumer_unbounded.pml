/*
 * consumer_unbounded.pml -- the unbounded variant of consumer.pml (the SPIN
 * peer's model of the log-consumer protocol), for comparing verdicts under
 * `model check --crashes any --rebalances any --pauses any`.
 *
 * Derived from consumer.pml, which stays byte-identical to the peer's copy;
 * the protocol's actions, their guards and the asserted properties are the
 * same. What differs, and why the state space stays finite without budgets:
 *
 *   - No crash or rebalance budget: CRASH is enabled for every live owner,
 *     REBALANCE for every live non-current owner, in every state. The
 *     counters ncrash and nreb are gone from the state vector.
 *   - Epochs are two values: an owner's ep is 0 (idle), STALE or CUR. The
 *     only use of an epoch is fenced's test "ep == stored epoch", and the
 *     stored epoch only grows, so an epoch below it can never equal it
 *     again: every stale epoch behaves alike, and the stored epoch itself
 *     need not be kept (it is CUR by definition). A bump (rebalance, or a
 *     start that claims) turns every CUR of the group into STALE.
 *   - applied[g][i] saturates at 2: the properties only tell 0, 1 and "more
 *     than one" apart, and an unbounded run of crashes re-applies a record
 *     without end under effect-first.
 *   - total is dropped: no property reads it (it was a function of applied).
 *
 * Second incarnations (-DPAUSES): each group gets one paused slot, an
 * earlier incarnation of one of its owners still running after that owner
 * was started again (a GC or VM pause, a supervisor restarting a hung
 * worker). PAUSE needs a live owner holding a lease and the group's paused
 * slot free; any number of pauses happen over a run, at most one earlier
 * incarnation is alive at a time per group. The owner's incarnation moves,
 * held record and all, to the paused slot; the current slot starts as
 * RESTART does. The paused incarnation fetches and steps like an owner, is
 * never restarted or rebalanced to, and frees its slot when it crashes or is
 * fenced. Which owner it came from is not kept: no guard or property reads
 * it. Every start (RESTART, PAUSE) of the current owner claims a new epoch,
 * as our atomic-fenced does, so the earlier incarnation is fenced at its
 * next write; -DSTORED_EPOCH makes a start take the stored epoch instead
 * (consumer.pml's restart; our fenced-stored-epoch), the trap in which both
 * incarnations hold the current epoch. Without pauses the two agree: the
 * owner that restarts is the only one that could hold the current epoch.
 *
 * Compile-time knobs (spin -DNAME=VAL -a consumer_unbounded.pml):
 *   STRAT  1 effect-first | 2 commit-first | 3 atomic | 4 atomic-fenced
 *          5 atomic-cas   | 6 offset-stamp            (default 4)
 *   R (3) records, G (2) groups, C (2) owners/group, K2 (2) offset-stamp
 *   commit period; PAUSES (undefined) second incarnations; STORED_EPOCH
 *   (undefined) starts resume at the stored epoch. K and B are ignored.
 *   PROPS  bit mask of properties to assert (default 15 = all):
 *          1 no-duplicate          applied[g][i] <= 1
 *          2 contiguous-prefix     forall i < pos[g]: applied[g][i] >= 1
 *          4 monotonic-checkpoint  pos[g] >= maxpos[g] (ghost max)
 *          8 settled-prefix        like 2, but a record whose pos was
 *                                  committed and whose effect is still
 *                                  pending at a LIVE owner (or paused
 *                                  incarnation) is not counted as missing
 *   NO_GHOST_MAX  check monotonicity by an assertion at each pos write
 *          instead of keeping the ghost maxpos in the state vector.
 */

#ifndef STRAT
#define STRAT 4
#endif
#ifndef R
#define R 3
#endif
#ifndef G
#define G 2
#endif
#ifndef C
#define C 2
#endif
#ifndef K2
#define K2 2
#endif
#ifndef PROPS
#define PROPS 15
#endif

#define EFFECT_FIRST 1
#define COMMIT_FIRST 2
#define ATOMIC       3
#define FENCED       4
#define CAS          5
#define STAMP        6

/* S slots per group: its C owners (g*S+c), then with PAUSES its paused slot
 * (g*S+C); one stride keeps the group and owner of a slot plain arithmetic */
#ifdef PAUSES
#define S (C + 1)
#else
#define S C
#endif
#define SLOTS (G*S)
#define PSLOT(g) ((g)*S + C)

#define STALE 1                /* an epoch below the stored one           */
#define CUR   2                /* the stored epoch                        */

/* ---------------- shared log ---------------- */
byte appended;                 /* records 0..appended-1 exist             */

/* ---------------- durable per-group state ---------------- */
byte pos[G];                   /* committed next offset                   */
byte cur[G];                   /* which owner holds the stored epoch      */
#if STRAT == STAMP
byte stamp[G];                 /* highest applied offset + 1 (0 = none)   */
#endif

/* ---------------- ghost state (checking only) ---------------- */
byte applied[G*R];             /* times record i applied, saturated at 2  */
#ifndef NO_GHOST_MAX
byte maxpos[G];                /* highest pos ever written                */
#endif
byte k;                        /* scratch loop index; every d_step resets it
                                  to 0, so it is constant in stored states  */

/* ---------------- volatile per-slot state ---------------- */
bool alive[SLOTS];             /* a paused slot is alive while in use     */
byte ep[SLOTS];                /* 0 = idle, STALE or CUR                  */
byte off[SLOTS];               /* in-memory next offset to fetch          */
byte step[SLOTS];              /* 0 = holds nothing; 1 = holds record
                                  off-1, before step 1; 2 = between step 1
                                  and step 2                              */

#define AI(g,i) ((g)*R + (i))
/* init is _pid 0 and runs the slots in slot order: slot pids are 1..SLOTS */
#define ME     (_pid - 1)
#define GR     (ME / S)
#define CI     (ME % S)
#define PAUSED (CI == C)
#define HELD   (off[ME] - 1)     /* offset of the held record (step > 0) */

/* ---------------- property checks ---------------- */
/* Every property fails through the one assertion of PROP: pan prints an
 * error only when its text differs from the previous error's, and without
 * budgets a refuted strategy violates properties, alternately, in millions
 * of states (-c0 goes on), which printed one line each would fill the disk.
 * pan does not run printf; a trail's replay (spin -t) names the property. */
#define PROP(ok, msg)   if :: !(ok) -> printf(msg); assert(false) :: else -> skip fi

#if (PROPS & 1)
#define CHK_NODUP(g,i)  PROP(applied[AI(g,i)] <= 1, "MSC: violated no-duplicate\n")
#else
#define CHK_NODUP(g,i)  skip
#endif

#if STRAT == COMMIT_FIRST && C != 2
#error "PENDING() is written out for C == 2"
#endif
#define PEND_AT(s,i) (alive[s] && step[s] == 2 && off[s] == (i)+1)
#if STRAT == COMMIT_FIRST && defined(PAUSES)
#define PENDING(g,i) (PEND_AT((g)*S,i) || PEND_AT((g)*S+1,i) || PEND_AT(PSLOT(g),i))
#elif STRAT == COMMIT_FIRST
#define PENDING(g,i) (PEND_AT((g)*S,i) || PEND_AT((g)*S+1,i))
#else
#define PENDING(g,i) false
#endif

inline check(g) {
#if (PROPS & 2)
  k = 0;
  do
  :: k < pos[g] -> PROP(applied[AI(g,k)] >= 1, "MSC: violated contiguous-prefix\n"); k++
  :: else -> break
  od;
#endif
#if (PROPS & 8)
  k = 0;
  do
  :: k < pos[g] -> PROP(applied[AI(g,k)] >= 1 || PENDING(g,k), "MSC: violated settled-prefix\n"); k++
  :: else -> break
  od;
#endif
#if (PROPS & 4) && !defined(NO_GHOST_MAX)
  PROP(pos[g] >= maxpos[g], "MSC: violated monotonic-checkpoint\n");
#endif
  k = 0
}

inline apply(g, i) {
  /* 2 already fails no-duplicate; counting on would make the space infinite */
  if
  :: applied[AI(g,i)] < 2 -> applied[AI(g,i)]++
  :: else -> skip
  fi;
  CHK_NODUP(g,i)
}

inline commit(g, v) {               /* blind durable write pos := v */
#if (PROPS & 4) && defined(NO_GHOST_MAX)
  PROP(v >= pos[g], "MSC: violated monotonic-checkpoint\n");
#endif
  pos[g] = v;
#ifndef NO_GHOST_MAX
  if
  :: pos[g] > maxpos[g] -> maxpos[g] = pos[g]
  :: else -> skip
  fi
#endif
}

/* the stored epoch of group g moves on: whoever held it now holds a stale one */
inline bump(g) {
  k = 0;
  do
  :: k < S -> if :: ep[(g)*S+k] == CUR -> ep[(g)*S+k] = STALE :: else -> skip fi; k++
  :: else -> break
  od;
  k = 0
}

/* a start of the current owner: it claims a new epoch, or with STORED_EPOCH
 * resumes at the stored one */
inline claim(g) {
#ifndef STORED_EPOCH
  bump(g);
#endif
  ep[ME] = CUR; off[ME] = pos[g]; step[ME] = 0
}

inline go_idle() { ep[ME] = 0; off[ME] = 0; step[ME] = 0 }

/* a paused incarnation without a lease has nothing left to run: its slot is
 * freed, so that a free slot has one representation */
inline lose_lease() {
  go_idle();
  if :: PAUSED -> alive[ME] = 0 :: else -> skip fi
}

/* ---------------- strategy steps ---------------- */
inline step1() {
#if STRAT == EFFECT_FIRST
  apply(GR, HELD); step[ME] = 2
#elif STRAT == COMMIT_FIRST
  commit(GR, off[ME]); step[ME] = 2
#elif STRAT == ATOMIC
  apply(GR, HELD); commit(GR, off[ME]); step[ME] = 0
#elif STRAT == FENCED
  if
  :: ep[ME] == CUR -> apply(GR, HELD); commit(GR, off[ME]); step[ME] = 0
  :: else -> printf("MSC: fenced\n"); lose_lease()
  fi
#elif STRAT == CAS
  if
  :: HELD < pos[GR] -> off[ME] = pos[GR]; step[ME] = 0     /* skip */
  :: else -> apply(GR, HELD); commit(GR, off[ME]); step[ME] = 0
  fi
#elif STRAT == STAMP
  if
  :: off[ME] > stamp[GR] -> apply(GR, HELD); stamp[GR] = off[ME]
  :: else -> skip                                          /* skip */
  fi;
  if
  :: (off[ME] % K2 == 0) || off[ME] == R -> step[ME] = 2
  :: else -> step[ME] = 0
  fi
#endif
}

inline step2() {
#if STRAT == EFFECT_FIRST
  commit(GR, off[ME]); step[ME] = 0
#elif STRAT == COMMIT_FIRST
  apply(GR, HELD); step[ME] = 0
#elif STRAT == STAMP
  commit(GR, off[ME]); step[ME] = 0
#else
  assert(false)                     /* single-step strategies */
#endif
}

/* the lease steps, shared by an owner and a paused incarnation */
#define LEASE_STEPS \
  :: d_step { /* FETCH */ \
       alive[ME] && ep[ME] != 0 && step[ME] == 0 && off[ME] < appended -> \
       printf("MSC: g%d s%d fetch r%d\n", GR, ME, off[ME]); \
       off[ME]++; step[ME] = 1 } \
  :: d_step { /* STEP 1 */ \
       alive[ME] && step[ME] == 1 -> \
       printf("MSC: g%d s%d step1 r%d\n", GR, ME, HELD); \
       step1(); check(GR) } \
  :: d_step { /* STEP 2 */ \
       alive[ME] && step[ME] == 2 -> \
       printf("MSC: g%d s%d step2 r%d\n", GR, ME, HELD); \
       step2(); check(GR) } \
  :: d_step { /* CRASH: volatile lost, durable kept; a paused slot is freed */ \
       alive[ME] -> \
       printf("MSC: g%d s%d CRASH\n", GR, ME); \
       alive[ME] = 0; go_idle(); check(GR) }

/* ---------------- owner (g,c) with the environment actions aimed at it --- */
proctype owner()
{
end:
  do
  LEASE_STEPS
  :: d_step { /* RESTART */
       !alive[ME] ->
       alive[ME] = 1;
       if
       :: cur[GR] == CI -> claim(GR)
       :: else -> skip
       fi;
       printf("MSC: g%d c%d RESTART ep=%d off=%d\n", GR, CI, ep[ME], off[ME]) }
  :: d_step { /* REBALANCE group GR to this (live, non-current) owner */
       alive[ME] && cur[GR] != CI ->
       bump(GR); cur[GR] = CI;
       ep[ME] = CUR; off[ME] = pos[GR]; step[ME] = 0;
       printf("MSC: g%d REBALANCE -> c%d off=%d\n", GR, CI, off[ME]);
       check(GR) }
#ifdef PAUSES
  :: d_step { /* PAUSE: started again while this incarnation runs on */
       alive[ME] && ep[ME] != 0 && !alive[PSLOT(GR)] ->
       alive[PSLOT(GR)] = 1; ep[PSLOT(GR)] = ep[ME];
       off[PSLOT(GR)] = off[ME]; step[PSLOT(GR)] = step[ME];
       if
       :: cur[GR] == CI -> claim(GR)
       :: else -> go_idle()
       fi;
       printf("MSC: g%d c%d PAUSE ep=%d off=%d\n", GR, CI, ep[ME], off[ME]);
       check(GR) }
#endif
  od
}

#ifdef PAUSES
/* the paused slot of its group: an earlier incarnation, while one is alive */
proctype paused()
{
end:
  do
  LEASE_STEPS
  od
}
#endif

proctype producer()
{
end:
  do
  :: d_step { appended < R -> printf("MSC: append r%d\n", appended); appended++ }
  od
}

/* initial state: every owner alive, paused slots free; owner 0 of each group
 * holds the stored epoch. init sets the globals and starts all processes in
 * one atomic block, then terminates (its pc is constant afterwards). */
init {
  atomic {
    k = 0;
    do
    :: k < G -> ep[k*S] = CUR; k++
    :: else -> break
    od;
    k = 0;
    do
    :: k < SLOTS && k % S < C -> alive[k] = 1; run owner(); k++
#ifdef PAUSES
    :: k < SLOTS && k % S == C -> run paused(); k++
#endif
    :: else -> break
    od;
    k = 0;
    run producer()
  }
}
