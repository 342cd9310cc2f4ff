"""A self-contained HTML report of one saved eval run.

One file, no network: inline CSS, the reward histogram as inline SVG, and a small
inline script for filtering and expanding rollouts. It can be mailed, attached to
an issue or opened from a CI artifact. It holds the run metadata, the same summary
numbers `summarize` gives (it calls it), the histogram, and every rollout's
transcript with tool calls, tool results and errors.

Transcripts are arbitrary model output, so every piece of text goes through
`html.escape`, and a Content-Security-Policy allows only this file's own script
(by hash) and styles: even a missed escape could neither run script nor load
anything from the network.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.eval.export import LoadedRun, load_run
from verifiers.eval.summary import EvalSummary, Stat, fmt_stat, summarize
from verifiers.types import RolloutResult

__all__ = ["histogram", "render_report", "write_report"]

REPORT_FILE = "report.html"


def _e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, default=str)


# -- histogram ----------------------------------------------------------------------------


def histogram(values: Sequence[float], bins: int = 10) -> list[tuple[float, float, int]]:
    """(low, high, count) per bin. Rewards within [0, 1] use [0, 1]; others their own range.

    Bins are half-open except the last, which includes its upper edge (so reward 1.0 counts).
    """
    if not values:
        return []
    lo, hi = min(values), max(values)
    if lo >= 0.0 and hi <= 1.0:
        lo, hi = 0.0, 1.0
    elif lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        i = int((v - lo) / width)
        counts[min(max(i, 0), bins - 1)] += 1
    return [(lo + i * width, lo + (i + 1) * width, c) for i, c in enumerate(counts)]


def _histogram_svg(values: Sequence[float]) -> str:
    hist = histogram(values)
    if not hist:
        return '<p class="muted">No rollouts.</p>'
    w, h, left, bottom, top = 640, 240, 40, 36, 20
    plot_w, plot_h = w - left - 10, h - bottom - top
    peak = max(c for _, _, c in hist) or 1
    bar_w = plot_w / len(hist)
    parts = [
        f'<svg id="reward-histogram" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="Histogram of {len(values)} rewards" '
        f'data-total="{len(values)}">',
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
        f'<text class="tick" x="{left - 6}" y="{top + 4}" text-anchor="end">{peak}</text>',
        f'<text class="tick" x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>',
    ]
    for i, (lo, hi, count) in enumerate(hist):
        bh = plot_h * count / peak
        x = left + i * bar_w
        y = top + plot_h - bh
        bracket = "]" if i == len(hist) - 1 else ")"
        label = f"[{lo:.3g}, {hi:.3g}{bracket}: {count}"
        parts.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{bh:.1f}" '
            f'data-lo="{lo:.6g}" data-hi="{hi:.6g}" data-count="{count}"><title>{_e(label)}</title></rect>'
        )
        if count:
            parts.append(
                f'<text class="count" x="{x + bar_w / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">{count}</text>'
            )
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{lo:.3g}</text>'
        )
    last_hi = hist[-1][1]
    parts.append(
        f'<text class="tick" x="{left + plot_w:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{last_hi:.3g}</text>'
    )
    parts.append(
        f'<text class="tick" x="{left + plot_w / 2:.1f}" y="{h - 4}" text-anchor="middle">reward</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


# -- summary ------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{_e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _counts(title: str, counts: Mapping[str, int], total: int, cls: str = "") -> str:
    if not counts:
        return ""
    rows = [(k, v, f"{100 * v / total:.1f}%" if total else "-") for k, v in counts.items()]
    return f"<h3>{_e(title)}</h3>" + _table(("name", "count", "share"), rows, cls)


def _card(label: str, value: str, ident: str, cls: str = "") -> str:
    return (
        f'<div class="card {_e(cls)}"><div class="label">{_e(label)}</div>'
        f'<div class="value" id="{_e(ident)}">{_e(value)}</div></div>'
    )


def _stat_rows(items: Mapping[str, Stat]) -> list[tuple[str, str, str, int]]:
    return [(name, f"{s.mean:.4f}", f"{s.std:.4f}", s.n) for name, s in items.items()]


def _summary_html(s: EvalSummary) -> str:
    cards = [
        _card("rollouts", f"{s.n}", "n-rollouts"),
        _card("examples x r", f"{s.n_examples} x {s.rollouts_per_example}", "n-examples"),
        _card("reward (mean ± std)", fmt_stat(s.reward), "reward-stat"),
        _card("errored rollouts", str(s.n_errored), "n-errored", "bad" if s.n_errored else ""),
    ]
    if s.pass_at_k:
        k_max = max(s.pass_at_k)
        cards.append(_card("pass@1", f"{s.pass_at_k.get(1, 0.0):.4f}", "pass-at-1"))
        if k_max > 1:
            cards.append(_card(f"pass@{k_max}", f"{s.pass_at_k[k_max]:.4f}", "pass-at-max"))
    if s.n_with_scoring_errors:
        cards.append(_card("with scoring errors", str(s.n_with_scoring_errors), "n-scoring-errors", "bad"))
    out = ['<div class="cards">', *cards, "</div>"]
    out.append(
        f'<p class="muted">Standard deviations are population std over rollouts. Errored rollouts count with '
        f"the reward the rubric gave them; without them: {_e(fmt_stat(s.reward_without_errors))}.</p>"
    )
    if s.reward is not None:
        out.append(
            f'<p hidden id="reward-numbers" data-mean="{s.reward.mean!r}" data-std="{s.reward.std!r}"></p>'
        )
    out.append('<div class="grid">')
    if s.metrics or s.reward_by_task:
        rows = _stat_rows(s.metrics) + _stat_rows(
            {f"reward[task={k}]": v for k, v in s.reward_by_task.items()}
        )
        out.append("<div><h3>Metrics</h3>" + _table(("name", "mean", "std", "n"), rows, "metrics") + "</div>")
    if s.pass_at_k:
        rows = [(k, f"{v:.4f}", s.pass_at_k_examples.get(k, "")) for k, v in s.pass_at_k.items()]
        out.append(
            "<div><h3>pass@k</h3>"
            + _table(("k", "pass@k", "examples"), rows, "pass-at-k")
            + f'<p class="muted">correct: reward ≥ {_e(f"{s.pass_threshold:.6g}")}; unbiased estimator, '
            "averaged over examples.</p></div>"
        )
    out.append("<div>" + _counts("Stop reasons", s.stop_reasons, s.n, "stop-reasons") + "</div>")
    if s.errors_by_type or s.scoring_errors_by_where:
        out.append(
            '<div class="bad-block">'
            + _counts("Rollout errors by type", s.errors_by_type, s.n, "errors")
            + _counts("Scoring errors by reward function", s.scoring_errors_by_where, s.n, "scoring-errors")
            + "</div>"
        )
    t = s.timing
    timing_rows = [
        (name, f"{ts.mean:.3f}", f"{ts.p50:.3f}", f"{ts.p95:.3f}", f"{ts.max:.3f}")
        for name, ts in (("generation", t.generation_s), ("scoring", t.scoring_s), ("total", t.total_s))
    ]
    wall = ""
    if t.wall_s is not None:
        rate = f", {t.rollouts_per_s:.2f} rollouts/s" if t.rollouts_per_s else ""
        wall = f'<p class="muted">wall clock {t.wall_s:.2f} s{_e(rate)}</p>'
    out.append(
        "<div><h3>Timing (s per rollout)</h3>"
        + _table(("phase", "mean", "p50", "p95", "max"), timing_rows, "timing")
        + wall
        + "</div>"
    )
    tok = s.tokens
    token_rows = [
        ("prompt", f"{tok.prompt_total:,}", f"{tok.prompt_mean:.1f}"),
        ("completion", f"{tok.completion_total:,}", f"{tok.completion_mean:.1f}"),
    ]
    out.append(
        "<div><h3>Tokens</h3>" + _table(("", "total", "mean / rollout"), token_rows, "tokens") + "</div>"
    )
    out.append("</div>")
    return "".join(out)


# -- transcripts ---------------------------------------------------------------------------


def _content_html(content: Any) -> str:
    if content is None or content == "":
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(f'<pre class="content">{_e(part.get("text", ""))}</pre>')
            else:
                parts.append(f'<pre class="content part">{_e(_json_text(part))}</pre>')
        return "".join(parts)
    return f'<pre class="content">{_e(_json_text(content))}</pre>'


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
        except ValueError:
            return arguments  # malformed: exactly what the model sent
    return _json_text(arguments)


def _message_html(msg: Any) -> str:
    if not isinstance(msg, dict):
        return f'<div class="msg"><pre class="content">{_e(_json_text(msg))}</pre></div>'
    role = str(msg.get("role", "?"))
    head = f'<span class="role">{_e(role)}</span>'
    if msg.get("tool_call_id"):
        head += f' <code class="call-id">{_e(msg["tool_call_id"])}</code>'
    if msg.get("name"):
        head += f' <code class="name">{_e(msg["name"])}</code>'
    body = _content_html(msg.get("content"))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        call_id = call.get("id", "") if isinstance(call, dict) else ""
        body += (
            f'<div class="tool-call"><span class="tc-label">tool call</span> '
            f'<span class="tc-name">{_e(fn.get("name", "?"))}</span> <code class="call-id">{_e(call_id)}</code>'
            f'<pre class="args">{_e(_arguments_text(fn.get("arguments", "")))}</pre></div>'
        )
    if not body:
        body = '<p class="muted">(empty)</p>'
    return f'<div class="msg role-{_e(role)}"><div class="msg-head">{head}</div>{body}</div>'


def _messages_html(messages: Any) -> str:
    if isinstance(messages, str):
        return f'<div class="msg role-text">{_content_html(messages)}</div>'
    if not messages:
        return '<p class="muted">(none)</p>'
    return "".join(_message_html(m) for m in messages)


def _rollout_html(r: RolloutResult) -> str:
    kind = "rollout" if r.error is not None else ("scoring" if r.scoring_errors else "")
    badges = ""
    if r.error is not None:
        badges += f'<span class="badge bad">{_e(r.error.type)}</span>'
    if r.scoring_errors:
        badges += f'<span class="badge warn">{len(r.scoring_errors)} scoring error(s)</span>'
    if r.is_truncated:
        badges += '<span class="badge warn">truncated</span>'
    summary = (
        f'<summary><span class="ref">{r.example_id}:{r.rollout_index}</span>'
        f'<span class="reward">reward {r.reward:.4f}</span>'
        f'<span class="stop">{_e(r.stop_reason)}</span><span class="turns">{r.turns} turn(s)</span>{badges}</summary>'
    )
    fields: list[tuple[str, str]] = [("task", r.task), ("answer", r.answer), ("reward", f"{r.reward:.4f}")]
    fields += [(f"metric: {k}", f"{v:.4f}") for k, v in r.metrics.items()]
    fields += [
        ("stop reason", r.stop_reason),
        (
            "time",
            f"generation {r.timing.generation_s:.3f} s, scoring {r.timing.scoring_s:.3f} s, "
            f"total {r.timing.total_s:.3f} s",
        ),
        ("tokens", f"prompt {r.usage.prompt_tokens}, completion {r.usage.completion_tokens}"),
    ]
    if r.info:
        fields.append(("info", _json_text(r.info)))
    kv = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in fields)
    errors = ""
    if r.error is not None:
        errors += (
            f'<div class="error"><b>{_e(r.error.type)}</b> in {_e(r.error.where)}: '
            f"<pre>{_e(r.error.message)}</pre></div>"
        )
    for err in r.scoring_errors:
        errors += (
            f'<div class="error scoring"><b>{_e(err.type)}</b> in {_e(err.where)}: '
            f"<pre>{_e(err.message)}</pre></div>"
        )
    return (
        f'<details class="rollout{" has-error" if kind else ""}" id="r-{r.example_id}-{r.rollout_index}" '
        f'data-example="{r.example_id}" data-rollout="{r.rollout_index}" data-reward="{r.reward!r}" '
        f'data-error="{kind}">{summary}<div class="body">{errors}<table class="kv">{kv}</table>'
        f"<h4>Prompt</h4>{_messages_html(r.prompt)}<h4>Completion</h4>{_messages_html(r.completion)}</div></details>"
    )


# -- page -----------------------------------------------------------------------------------

_CSS = """
:root { --bad: #b42318; --warn: #b54708; --ok: #067647; --muted: #667085; --line: #d0d5dd; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #101828;
  background: #f9fafb; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 10px; }
h3 { font-size: 14px; margin: 12px 0 6px; } h4 { margin: 14px 0 6px; color: var(--muted); }
.muted { color: var(--muted); font-size: 12px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px; margin: 16px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 150px; background: #fcfcfd; }
.card .label { color: var(--muted); font-size: 12px; } .card .value { font-size: 20px; font-weight: 600; }
.card.bad .value, .bad-block h3 { color: var(--bad); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px 24px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eaecf0; vertical-align: top; }
td { font-variant-numeric: tabular-nums; }
table.meta td, table.kv td { white-space: pre-wrap; word-break: break-word; }
table.kv th { width: 160px; color: var(--muted); font-weight: 500; }
svg .bar { fill: #2e90fa; } svg .axis { stroke: #98a2b3; } svg text { font-size: 11px; fill: #475467; }
.controls { display: flex; gap: 12px; align-items: center; flex-wrap: wrap; margin-bottom: 10px; }
.controls input[type=search] { padding: 4px 8px; min-width: 260px; }
details.rollout { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; background: #fff; }
details.rollout.has-error { border-left: 4px solid var(--bad); }
details.rollout > summary { cursor: pointer; padding: 6px 10px; display: flex; gap: 14px; align-items: center; }
details.rollout .ref { font-weight: 600; min-width: 60px; } details.rollout .body { padding: 4px 12px 12px; }
.badge { border-radius: 10px; padding: 0 8px; font-size: 12px; color: #fff; }
.badge.bad { background: var(--bad); } .badge.warn { background: var(--warn); }
.error { border: 1px solid var(--bad); background: #fef3f2; color: var(--bad); border-radius: 6px;
  padding: 6px 10px; margin: 6px 0; }
.error.scoring { border-color: var(--warn); background: #fffaeb; color: var(--warn); }
.error pre { margin: 4px 0 0; white-space: pre-wrap; }
.msg { border-left: 3px solid var(--line); padding: 4px 10px; margin: 6px 0; background: #fcfcfd; }
.msg.role-system { border-color: #9e77ed; } .msg.role-user { border-color: #2e90fa; }
.msg.role-assistant { border-color: #12b76a; } .msg.role-tool { border-color: #f79009; background: #fffcf5; }
.msg-head .role { font-weight: 600; text-transform: uppercase; font-size: 11px; letter-spacing: .04em; }
pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap;
  word-break: break-word; margin: 4px 0; }
.tool-call { border: 1px dashed #f79009; border-radius: 4px; padding: 4px 8px; margin: 4px 0; }
.tc-label { color: var(--warn); font-size: 11px; text-transform: uppercase; } .tc-name { font-weight: 600; }
code { font-size: 12px; color: var(--muted); }
.hidden { display: none; }
"""

# Kept dependency-free and tiny; the hash of this exact text goes into the CSP header.
_JS = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll("details.rollout"));
  var q = document.getElementById("filter");
  var errs = document.getElementById("errors-only");
  var count = document.getElementById("shown-count");
  function apply() {
    var text = q.value.toLowerCase();
    var shown = 0;
    rows.forEach(function (el) {
      var ok = (!errs.checked || el.dataset.error !== "") &&
               (!text || el.textContent.toLowerCase().indexOf(text) !== -1);
      el.classList.toggle("hidden", !ok);
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " rollouts shown";
  }
  function setAll(open) {
    rows.forEach(function (el) { if (!el.classList.contains("hidden")) { el.open = open; } });
  }
  q.addEventListener("input", apply);
  errs.addEventListener("change", apply);
  document.getElementById("expand").addEventListener("click", function () { setAll(true); });
  document.getElementById("collapse").addEventListener("click", function () { setAll(false); });
  var hash = decodeURIComponent(location.hash.slice(1));
  if (hash === "errors") { errs.checked = true; }
  apply();
  if (hash.indexOf("r-") === 0) {
    var target = document.getElementById(hash);
    if (target) { target.open = true; target.scrollIntoView(); }
  }
  document.body.setAttribute("data-ready", "1");
})();
"""


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(_JS.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )


def _metadata_html(run: LoadedRun) -> str:
    rows = [("path", str(run.path))]
    rows += [(str(k), _json_text(v)) for k, v in run.metadata.items()]
    notes = ""
    if not run.metadata:
        notes += (
            '<p class="error scoring">metadata.json is missing: the run may have died before writing it.</p>'
        )
    if run.skipped_lines:
        notes += f'<p class="error scoring">{run.skipped_lines} unreadable line(s) in results.jsonl were skipped.</p>'
    if run.superseded:
        notes += f'<p class="muted">{run.superseded} row(s) were replaced by a later write (resume).</p>'
    return notes + _table(("key", "value"), rows, "meta")


def render_report(run: LoadedRun, summary: EvalSummary | None = None) -> str:
    """The report page for an already loaded run, as a string."""
    if summary is None:
        summary = summarize(run.results, run.rollouts_per_example, wall_s=run.duration_s)
    results = sorted(run.results, key=lambda r: (r.example_id, r.rollout_index))
    status = str(run.metadata.get("status", "unknown"))
    created = str(run.metadata.get("created_at", ""))
    title = f"{run.env_id} · {run.model} · {run.run_id}"
    rollouts = "".join(_rollout_html(r) for r in results)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_csp())}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Eval report: {_e(title)}</title><style>{_CSS}</style></head>"
        "<body><main>"
        f'<header><h1 id="title">{_e(run.env_id)} · {_e(run.model)}</h1>'
        f'<p class="muted">run <b>{_e(run.run_id)}</b> · status <b id="status">{_e(status)}</b> · '
        f"{_e(created)}</p></header>"
        f'<section id="summary"><h2>Summary</h2>{_summary_html(summary)}</section>'
        f'<section id="histogram"><h2>Reward distribution</h2>{_histogram_svg([r.reward for r in results])}'
        "</section>"
        f'<section id="rollouts"><h2>Rollouts</h2><div class="controls">'
        '<input type="search" id="filter" placeholder="filter by any text" aria-label="filter rollouts">'
        '<label><input type="checkbox" id="errors-only"> only rollouts with errors</label>'
        '<button type="button" id="expand">expand all</button>'
        '<button type="button" id="collapse">collapse all</button>'
        f'<span id="shown-count" class="muted">{len(results)} rollouts</span></div>{rollouts}</section>'
        f'<section id="metadata"><h2>Run metadata</h2>{_metadata_html(run)}</section>'
        f"</main><script>{_JS}</script></body></html>\n"
    )


def write_report(run_dir: Path, out_path: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (default ``<run_dir>/report.html``); returns its path.

    Written to a temporary file and renamed, so a viewer never sees half a report.
    """
    run = load_run(Path(run_dir))
    out = Path(out_path) if out_path is not None else run.path / REPORT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render_report(run)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
