"""`agv screenshot`: the picture of the report's first screen that the README shows, regenerated from a run.

    agv screenshot --out DIR [--png docs/report-first-screen.png]

Renders DIR/results.json into a temporary directory (the run's own report is left as it is), opens it in headless
Chromium at 1280 x 900 and writes the PNG, with a sidecar `<png>.json` recording the hash of the HTML template and
printer it was rendered with and the run it shows (profile, commit). `tests/test_docs.py` fails when either has
changed since: run this command again then.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "templates" / "report.html.j2"
PRINTERS = HERE / "printers.py"  # the HTML markup is written there
DEFAULT_PNG = "docs/report-first-screen.png"  # run from the repository's root, as the README says
SIZE = (1280, 900)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000"]


def template_hash():
    """sha256 of the HTML template (its style) and of the printers (the markup): what the picture depends on besides
    the run."""
    return hashlib.sha256(TEMPLATE.read_bytes() + PRINTERS.read_bytes()).hexdigest()


def browser():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def take(out_dir, png, log=print):
    """Render OUT/results.json and photograph its first screen; returns the sidecar's contents."""
    from reports.render import load_results, render

    chrome = browser()
    if chrome is None:
        raise RuntimeError("no Chromium on PATH (Debian: apt-get install chromium)")
    results = load_results(out_dir)
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(Path(out_dir) / "results.json", work / "results.json")
        render(work, pdf=False, log=lambda *a: None)
        subprocess.run([chrome, *FLAGS, f"--user-data-dir={work / 'profile'}", f"--window-size={SIZE[0]},{SIZE[1]}",
                        f"--screenshot={png.resolve()}", (work / "report.html").as_uri()],
                       capture_output=True, timeout=120, check=True)
    env = results["environment"]
    meta = {"template_sha256": template_hash(), "size": list(SIZE), "profile": env.get("profile"),
            "commit": env.get("git_commit"), "device": env.get("device"), "wall_seconds": env.get("wall_seconds")}
    Path(f"{png}.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"wrote {png} and {png}.json (profile {meta['profile']}, commit {meta['commit']})")
    return meta


def main(argv=None, prog="python -m reports.screenshot"):
    from derive import options
    from derive.results import ResultsError

    p = options.parser(prog, __doc__, parents=[options.out_dir(help="directory holding the run's results.json")])
    p.add_argument("--png", default=DEFAULT_PNG, metavar="FILE", help="the picture to write (its sidecar beside it)")
    args = p.parse_args(argv)
    try:
        take(args.out, args.png)
    except (FileNotFoundError, ResultsError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
