"""Report layer: what every HTML page of preflight shares: the skeleton and its CSS, the banner, badges, values.

``html`` builds a node's page and ``heatmap`` a fleet's body from these pieces.
"""

from __future__ import annotations

from html import escape

from preflight.measurement import DATASET_SUBJECTS, SUBJECTS
from preflight.report import RunReport, shown_interval, shown_value
from preflight.verdict import Result

# What a badge says for each subject; its title carries SUBJECTS' full words.
BADGES = {"dataset": "dataset", "job_dataset": "job's Dataset", "scratch_on_dataset_fs": "scratch, dataset's device",
          "scratch_elsewhere": "scratch elsewhere", "synthetic": "synthetic", "no_dataset": "no dataset named",
          "unverified": "unverified"}
MISSES = ("fail", "error", "warn")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#fff}
main,.wrap{max-width:1240px;margin:0 auto;padding:0 16px 32px}.wrap{padding-bottom:0}
header.verdict{padding:14px 0;color:#fff}header.pass{background:#2e7d32}header.fail{background:#c62828}
header h1{margin:0;font-size:26px}header p{margin:2px 0 0}
h2{font-size:18px;margin:26px 0 6px;border-bottom:1px solid #d9dce1;padding-bottom:3px}
h2 small{font-weight:400;color:#555;font-size:13px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:0 12px;margin:10px 0}dl.facts dt{color:#555}
dl.facts dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%}table.results{table-layout:fixed}td,th{overflow-wrap:anywhere}th,td{text-align:left;vertical-align:top;padding:3px 6px}
tr.result{border-top:1px solid #eceef1}tr.result th{font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.viz svg{display:block;max-width:100%}.scale{color:#777;font-size:11px}
.v{font-weight:700;font-size:12px;white-space:nowrap}.v.pass{color:#2e7d32}.v.fail{color:#c62828}
.v.error{color:#8e0000}.v.warn{color:#b86e00}.v.skip{color:#777}.v.info{color:#607d8b}
tr.more td{padding-top:0;color:#444;font-size:13px}tr.more p{margin:0 0 2px}
.fix{color:#8e0000}.warning{color:#8a5a00}.method{color:#666}
.badge{display:inline-block;border-radius:3px;padding:0 5px;font-size:11px;font-weight:600;margin-left:4px;
white-space:nowrap}.badge.ok{background:#e3f1e4;color:#1b5e20}.badge.no{background:#fde7c8;color:#8a4b00}
ul.fixes li{margin-bottom:4px}a{color:#1f4e79}
table.grid{width:auto;border-collapse:separate;border-spacing:1px}
table.grid td{width:14px;height:14px;padding:0}table.grid th{font-weight:400;font-size:11px;white-space:nowrap;padding:0 4px}
table.grid thead th{writing-mode:vertical-rl;transform:rotate(180deg);vertical-align:bottom;height:auto;padding:4px 0}
table.grid td.straggler{outline:2px solid #111;outline-offset:-2px}
.legend span{display:inline-block;width:14px;height:12px;vertical-align:middle;margin:0 3px 0 10px}
"""
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def page(title: str, head: str, body: str) -> str:
    """The whole document: ``head`` (the banner) above ``body``, the CSS inline, nothing to fetch (``_CSP``)."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<title>{escape(title)}</title><style>{_CSS}</style></head><body>{head}<main>{body}</main></body></html>\n')


def banner(failed: bool, where: str, report: RunReport | None, counts: str, duration_s: float) -> str:
    """The coloured top: the verdict (``#verdict``), where (``#node``), when (``#started``), how long, the counts."""
    state = "FAILED" if failed else "PASSED"
    when = report.started.strftime("%Y-%m-%d %H:%M:%S UTC") if report else ""
    config = f" · {escape(report.config_path)}" if report else ""
    return (f'<header class="verdict {"fail" if failed else "pass"}"><div class="wrap">'
            f'<h1 id="verdict">preflight {state}</h1>'
            f'<p><span id="node">{escape(where)}</span> · <span id="started">{when}</span> · '
            f'<span id="duration">{duration_s:.1f} s</span>{config}</p>'
            f'<p id="counts">{escape(counts or "nothing run")}</p></div></header>')


def badge(subject: str) -> str:
    """What a figure was measured on, at a glance: green where it can pass a dataset threshold, amber where not."""
    good = "ok" if subject in DATASET_SUBJECTS else "no"
    return (f'<span class="badge {good}" title="{escape(SUBJECTS.get(subject, subject))}">'
            f'{escape(BADGES.get(subject, subject))}</span>')


def measured_text(result: Result) -> str:
    """The value as the table says it: ``982 MB/s ±4%``, a version or name as it is, ``not measured``."""
    if result.value is None:
        return "not run" if result.verdict == "error" else "not measured"
    return " ".join(filter(None, (shown_value(result), shown_interval(result))))
