"""A store whose rows this build cannot read (a tampered/partial store, or a newer build's
JobRow with one more field under the same schema_version 1): exit 1 "internal error"."""
import os, sqlite3, subprocess, sys
from slurm_shockwave.service.store import Store
def sw(*a):
    p = subprocess.run([sys.executable, "-c", "import sys;from slurm_shockwave.cli.main import cli;"
                        "sys.argv[0]='shockwave';cli()", *a], capture_output=True, text=True)
    return p.returncode, p.stderr.strip()[:170]
def store(name, sql):
    for s in ("", "-wal", "-shm"):
        if os.path.exists(name + s): os.remove(name + s)
    Store(name).db.close(); c = sqlite3.connect(name); c.execute(sql); c.commit(); c.close()
    return name
print(sw("explain", "5", "--store", store("r5a.db", """insert into job_now values (5, 1, '{"job_id": 5, "gpus_range": "1-4"}')""")))
print(sw("explain", "5", "--store", store("r5b.db", "insert into intents values (5, 'USR1', 'x', 1.0, 0)")))
c = sqlite3.connect("r5c.db"); c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
c.execute("insert or replace into meta values('schema_version','1')"); c.commit(); c.close()
print(sw("explain", "5", "--store", "r5c.db"))
