import collections
import re
import sys
from datetime import datetime

first, end = {}, {}
flow_start = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(\d\d:\d\d:\d\d\.\d+) \| \w+ +\| (Flow run|Task run) '([^']+)' - (.*)", line)
    if not m:
        continue
    t = datetime.strptime(m.group(1), "%H:%M:%S.%f")
    if m.group(2) == "Flow run":
        flow_start = flow_start or t
        continue
    name = m.group(3)
    first.setdefault(name, t)
    if "Finished in state" in m.group(4):
        end[name] = t
groups = collections.defaultdict(list)
for name in end:
    groups[name.split("@")[0]].append((end[name] - first[name]).total_seconds())
for g, v in groups.items():
    print(f"{g}: n={len(v)} min={min(v):.0f}s max={max(v):.0f}s mean={sum(v)/len(v):.0f}s")
if end:
    last = max(end.values())
    print("flow wall (first flow line to last stage end):", (last - flow_start).total_seconds() / 60, "min")
