"""``--profile``: py-spy on one gunicorn worker during an extra hot-SKU wrk run, summarised as the functions with
the most inclusive samples. (Named profiling, not profile, so as not to shadow the standard library's module.)"""

import re
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.drivers import wrk_command, wrk_env
from devtools.processes import RESULTS, ROOT, Gunicorn


def profile_hot(server: Gunicorn, base: str, tokens_file: Path, duration: int, connections: int) -> dict[str, Any]:
    """py-spy on the busiest worker while the hot run is going; returns the top functions by inclusive samples."""
    out = RESULTS / "pyspy-hot.txt"
    pid = server.worker_pids()[0]
    wrk = subprocess.Popen(
        wrk_command(base, duration=duration + 2, connections=connections),
        cwd=ROOT, env=wrk_env("hot", tokens_file), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1)
    subprocess.run(
        [str(ROOT / ".venv/bin/py-spy"), "record", "--pid", str(pid), "--duration", str(duration), "--rate", "250",
         "--format", "raw", "--output", str(out), "--nonblocking"],
        check=False, capture_output=True,
    )  # fmt: skip
    wrk.wait()
    return summarize_pyspy(out)


def summarize_pyspy(path: Path) -> dict[str, Any]:
    """The 40 frames with the most inclusive samples in a py-spy raw (collapsed stacks) file, in % of all samples."""
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        seen = set()
        for frame in stack.split(";"):
            m = re.match(r"(.+?) \((.+?)(?::\d+)?\)$", frame.strip())
            key = (
                f"{m.group(1)} ({m.group(2).split('site-packages/')[-1].replace(str(ROOT) + '/', '')})" if m else frame
            )
            if key not in seen:
                seen.add(key)
                inclusive[key] = inclusive.get(key, 0) + n
    top = sorted(inclusive.items(), key=lambda kv: -kv[1])[:40]
    return {"samples": total, "top_inclusive_pct": [(k, round(100 * v / total, 1)) for k, v in top]}
