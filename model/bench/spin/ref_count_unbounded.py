#!/usr/bin/env python3
"""ref_count_unbounded.py -- an independent plain-Python BFS of the semantics
consumer_unbounded.pml is meant to have, to cross-check what pan counts: its
"states, stored" should be this count + 1 (pan's state before init).

usage: python3 ref_count_unbounded.py STRAT [R=3 G=2 C=2 K2=2 pauses=0 stored=0]

Written from the README's description, not from the Promela: epochs are
0 (idle), 1 (stale) or 2 (current); no budgets; applied saturates at 2; no
total; with pauses one paused slot per group (owners C..C of the group's
slots), every start of the current owner claiming unless stored=1.
State = (appended, groups, slots)
 group = (pos, cur, stamp, applied tuple, maxpos)
 slot  = (alive, ep, off, step), per group C owners then the paused slot
"""
import sys
from collections import deque

EF, CF, AT, FE, CAS, ST = 1, 2, 3, 4, 5, 6
STALE, CUR = 1, 2
IDLE = (0, 0, 0)


def run(strat, R=3, G=2, C=2, K2=2, pauses=False, stored=False):
    S = C + 1 if pauses else C
    slots0 = []
    for g in range(G):
        for c in range(S):
            if c == 0:
                slots0.append((1, CUR, 0, 0))
            elif c < C:
                slots0.append((1, 0, 0, 0))
            else:
                slots0.append((0, 0, 0, 0))
    init = (0, ((0, 0, 0, (0,) * R, 0),) * G, tuple(slots0))

    def succ(state):
        app, groups, slots = state
        out = []
        if app < R:
            out.append((app + 1, groups, slots))
        for g in range(G):
            pos, cur, stamp, applied, maxpos = groups[g]

            def demoted(sl):  # a bump: the group's current epochs go stale
                sl = list(sl)
                for j in range(g * S, g * S + S):
                    a, e, o, s = sl[j]
                    if e == CUR:
                        sl[j] = (a, STALE, o, s)
                return sl

            for c in range(S):
                idx = g * S + c
                paused = c == C
                alive, ep, off, step = slots[idx]

                def put(grp=None, sl=None):
                    gs = list(groups)
                    if grp is not None:
                        gs[g] = grp
                    return (app, tuple(gs), tuple(sl if sl is not None else slots))

                def with_slot(v, sl=None):
                    sl = list(sl if sl is not None else slots)
                    sl[idx] = v
                    return sl

                held = off - 1

                def apply(A):
                    A = list(A)
                    A[held] = min(A[held] + 1, 2)
                    return tuple(A)

                if alive and ep != 0 and step == 0 and off < app:
                    out.append(put(sl=with_slot((1, ep, off + 1, 1))))
                if alive and step == 1:
                    P, St, A, M = pos, stamp, applied, maxpos
                    if strat == EF:
                        A = apply(A); own = (1, ep, off, 2)
                    elif strat == CF:
                        P = off; own = (1, ep, off, 2)
                    elif strat == AT:
                        A = apply(A); P = off; own = (1, ep, off, 0)
                    elif strat == FE:
                        if ep == CUR:
                            A = apply(A); P = off; own = (1, ep, off, 0)
                        else:
                            own = (0, 0, 0, 0) if paused else (1, 0, 0, 0)
                    elif strat == CAS:
                        if held < pos:
                            own = (1, ep, pos, 0)
                        else:
                            A = apply(A); P = off; own = (1, ep, off, 0)
                    elif strat == ST:
                        if off > St:
                            A = apply(A); St = off
                        own = (1, ep, off, 2 if (off % K2 == 0 or off == R) else 0)
                    out.append(put(grp=(P, cur, St, A, max(M, P)), sl=with_slot(own)))
                if alive and step == 2:
                    P, A = pos, applied
                    if strat in (EF, ST):
                        P = off
                    elif strat == CF:
                        A = apply(A)
                    out.append(put(grp=(P, cur, stamp, A, max(maxpos, P)), sl=with_slot((1, ep, off, 0))))
                if alive:
                    out.append(put(sl=with_slot((0, 0, 0, 0))))
                if paused:
                    continue
                if not alive:
                    if cur == c:
                        sl = slots if stored else demoted(slots)
                        out.append(put(sl=with_slot((1, CUR, pos, 0), sl)))
                    else:
                        out.append(put(sl=with_slot((1, 0, 0, 0))))
                if alive and cur != c:
                    sl = with_slot((1, CUR, pos, 0), demoted(slots))
                    out.append(put(grp=(pos, c, stamp, applied, maxpos), sl=sl))
                pidx = g * S + C
                if pauses and alive and ep != 0 and not slots[pidx][0]:
                    sl = list(slots)
                    sl[pidx] = (1, ep, off, step)
                    if cur == c:
                        if not stored:
                            sl = demoted(sl)
                        sl[idx] = (1, CUR, pos, 0)
                    else:
                        sl[idx] = (1, 0, 0, 0)
                    out.append(put(sl=sl))
        return out

    seen = {init}
    q = deque([init])
    while q:
        for t in succ(q.popleft()):
            if t not in seen:
                seen.add(t)
                q.append(t)
    return len(seen)


if __name__ == '__main__':
    kw = dict(a.split('=') for a in sys.argv[2:])
    kw = {k: (v == '1' if k in ('pauses', 'stored') else int(v)) for k, v in kw.items()}
    print(run(int(sys.argv[1]), **kw))
