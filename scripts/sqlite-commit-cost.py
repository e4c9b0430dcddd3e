#!/usr/bin/env python3
# Usage: python3 scripts/sqlite-commit-cost.py DIR COMMITS ROUNDS (DIR on the disk to measure,
# not tmpfs, where a sync costs nothing).
# One-row commits per second in SQLite with each durability setting, alternating rounds.
import os, sqlite3, sys, time
d = sys.argv[1]; n = int(sys.argv[2]); rounds = int(sys.argv[3])
settings = [("DELETE", "FULL"), ("DELETE", "EXTRA"), ("WAL", "FULL")]
rates = {s: [] for s in settings}
for r in range(rounds):
    for journal, sync in settings:
        path = os.path.join(d, f"cost-{journal}-{sync}.db")
        for suffix in ("", "-journal", "-wal", "-shm"):
            if os.path.exists(path + suffix): os.remove(path + suffix)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute(f"PRAGMA journal_mode = {journal}"); db.execute(f"PRAGMA synchronous = {sync}")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)"); db.execute("INSERT INTO t VALUES (1, 0)")
        start = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN IMMEDIATE"); db.execute("UPDATE t SET v = v + 1 WHERE k = 1"); db.execute("COMMIT")
        rates[(journal, sync)].append(n / (time.perf_counter() - start))
        db.close()
for (journal, sync), rs in rates.items():
    rs.sort(); med = rs[len(rs)//2]
    print(f"{journal}+{sync}: median {med:.0f} commits/s = {1e6/med:.0f} us/commit over {rounds} rounds ({', '.join(f'{x:.0f}' for x in rs)})")
